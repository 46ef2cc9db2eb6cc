"""horovodrs: Horovod's horovodrun for one host.

``horovodrs -np 4 python train.py`` starts 4 processes with what ``hvd.init()`` needs (rank,
size, the rendezvous service's address and the job's secret), prefixes every output line with
its rank, and ends the whole job as soon as one process fails: the others are stopped and the
launcher exits with the failed process's code.
"""

import argparse
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

from horovod_rs import _native

# How long stopped processes get to exit before they are killed.
GRACE_S = 5.0


def _parse(argv):
    parser = argparse.ArgumentParser(prog="horovodrs", description=__doc__.splitlines()[0])
    parser.add_argument("-np", "--num-proc", type=int, required=True, help="processes to start")
    parser.add_argument("-H", "--hosts", help="host:slots,... (only this host is supported)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command every process runs")
    args = parser.parse_args(argv)
    if args.num_proc < 1:
        parser.error("-np must be at least 1")
    if not args.command:
        parser.error("give the command to run, e.g. horovodrs -np 2 python train.py")
    if args.hosts and any(not h.split(":")[0] in ("localhost", "127.0.0.1") for h in args.hosts.split(",")):
        parser.error("only this host is supported: several hosts over ssh are not implemented")
    return args


def _pump(stream, prefix, out):
    for line in iter(stream.readline, b""):
        out.buffer.write(prefix + line)
        out.flush()
    stream.close()


def run(num_proc, command, env=None):
    """Runs ``command`` as ranks 0..num_proc-1; returns the job's exit code."""
    secret = secrets.token_bytes(32)
    service = _native.Rendezvous(secret, num_proc)
    base = dict(os.environ if env is None else env)
    base.update({
        "HOROVOD_SIZE": str(num_proc),
        "HOROVOD_LOCAL_SIZE": str(num_proc),
        "HOROVOD_CROSS_RANK": "0",
        "HOROVOD_CROSS_SIZE": "1",
        "HOROVOD_HOSTNAME": "127.0.0.1",
        "HOROVOD_RS_RENDEZVOUS": "127.0.0.1:%d" % service.port(),
        "HOROVOD_RS_SECRET": secret.hex(),
    })
    processes, pumps = [], []
    for rank in range(num_proc):
        env_rank = dict(base, HOROVOD_RANK=str(rank), HOROVOD_LOCAL_RANK=str(rank))
        p = subprocess.Popen(command, env=env_rank, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        processes.append(p)
        for stream, out, tag in ((p.stdout, sys.stdout, b"stdout"), (p.stderr, sys.stderr, b"stderr")):
            t = threading.Thread(target=_pump, args=(stream, b"[%d]<%s>:" % (rank, tag), out), daemon=True)
            t.start()
            pumps.append(t)
    code = 0
    try:
        while True:
            codes = [p.poll() for p in processes]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                sys.stderr.write("horovodrs: rank %d exited with code %d; stopping the other ranks\n" % (rank, code))
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(0.05)
    finally:
        _stop(processes)
        for t in pumps:
            t.join(timeout=GRACE_S)
        service.close()
    return code


def _stop(processes):
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + GRACE_S
    for p in processes:
        try:
            p.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    sys.exit(run(args.num_proc, args.command))


if __name__ == "__main__":
    main()
