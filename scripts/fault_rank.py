"""One rank of a fault trial (run by scripts/faults.py under ``horovodrs -np 2``).

``python fault_rank.py KIND RESULT_DIR``: the ranks run allreduces; the fault of KIND happens on
rank 1 (or, for strangers, beside the job). Every rank that ends on its own writes
``RESULT_DIR/rank-<r>.json``: ``{"outcome": "finished" | "error", "message": ..., "seconds": ...}``.
A rank that dies or hangs writes nothing; faults.py tells those apart.
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import numpy as np

STEPS = 200


def stranger(address, kind):
    """A client that is not a rank, on the rendezvous service's port."""
    host, port = address.rsplit(":", 1)
    if kind == "wrong-secret":
        # A real handshake with another secret, claiming rank 1: it must be refused.
        code = ("from horovod_rs.common import basics; import os\n"
                "basics.init_rank(basics.RankSpec(1, 2, %r, os.urandom(32), connect_timeout=5))" % address)
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")})
    s = socket.create_connection((host, int(port)), timeout=5)
    if kind == "garbage":
        s.sendall(os.urandom(4096))
    elif kind == "huge-length":
        s.sendall(b"\xff" * 16 + os.urandom(64))
    # "silent": connects and sends nothing.
    return s


def main(kind, result_dir):
    from horovod_rs.common import arrays, basics

    rank = int(os.environ["HOROVOD_RANK"])
    # The launcher stops every rank once one fails; the survivors outlast that (it kills them
    # after its grace period) to report how their own collectives ended.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    started = time.time()
    strangers = []
    if kind.startswith("stranger-") and rank == 0:
        strangers = [stranger(os.environ["HOROVOD_RS_RENDEZVOUS"], kind[len("stranger-"):]) for _ in range(3)]
    try:
        basics.init()
        victim_step = random.Random(os.environ.get("FAULT_SEED", "0")).randrange(STEPS // 4, STEPS // 2)
        for step in range(STEPS):
            if rank == 1 and step == victim_step:
                if kind == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                elif kind == "stop":
                    os.kill(os.getpid(), signal.SIGSTOP)
                elif kind == "never-submits":
                    time.sleep(3600)
            shape = (1000 + (rank if kind == "mismatch" and step == victim_step else 0),)
            result = arrays.allreduce(np.full(shape, float(rank + 1), np.float32), op="sum", name="step.%d" % step)
            if not np.all(result == 3.0):
                raise AssertionError("step %d: allreduce gave %r, not 3.0" % (step, result[:4]))
        basics.shutdown()
        outcome = {"outcome": "finished"}
    except Exception as e:  # the behaviour under test: a named error
        outcome = {"outcome": "error", "message": "%s: %s" % (type(e).__name__, e)}
    outcome["seconds"] = round(time.time() - started, 2)
    for s in strangers:
        if isinstance(s, subprocess.Popen):
            outcome["stranger_exit"] = s.wait(timeout=60)
        else:
            s.close()
    with open(os.path.join(result_dir, "rank-%d.json" % rank), "w") as f:
        json.dump(outcome, f)
    sys.exit(0 if outcome["outcome"] == "finished" else 1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
