"""make bench-lockstep: what a synchronous 4-byte allreduce costs once both processes have called
it, when they compute between calls as training steps do. Each of 2 processes busy-waits for
``compute`` ms (times 1 to 1.3, drawn per step and process, so one arrives first) and then
allreduces 4 bytes; every call's start and return are timestamped (``time.perf_counter``, the
host's monotonic clock, which both processes share). The figure is a call's return less the
later process's start: the latency that lockstep adds to each step beyond waiting for the slower
process (thread wake-ups, the exchange). horovod_rs (--impl horovod_rs, under ``horovodrs -np
2``) against torch's gloo (--impl gloo, under ``torch.distributed.run``). Rank 0 prints
``lockstep,<impl>,<compute_ms>,<p10_us>,<p50_us>,<p90_us>`` over both processes' calls.
"""

import argparse
import atexit
import time

import numpy as np
import torch

WARMUP, CALLS = 20, 300
COMPUTE_MS = (0, 5, 20)


def horovod_rs_way():
    import horovod_rs.torch as hvd

    hvd.init()

    def allreduce(tensor):
        hvd.allreduce(tensor, name="lockstep")

    return hvd.rank(), allreduce, hvd.allgather_object


def gloo_way():
    import torch.distributed as dist

    dist.init_process_group("gloo")
    atexit.register(dist.destroy_process_group)

    def gather(value):
        values = [None] * dist.get_world_size()
        dist.all_gather_object(values, value)
        return values

    return dist.get_rank(), dist.all_reduce, gather


def busy(seconds):
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["horovod_rs", "gloo"], required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rank, allreduce, gather = horovod_rs_way() if args.impl == "horovod_rs" else gloo_way()
    draws = np.random.default_rng(rank)
    tensor = torch.zeros(1)  # (gloo sums in place: zeros stay finite)
    for compute_ms in COMPUTE_MS:
        started, returned = [], []
        for _ in range(WARMUP + CALLS):
            busy(compute_ms / 1e3 * (1 + 0.3 * draws.random()))
            started.append(time.perf_counter())
            allreduce(tensor)
            returned.append(time.perf_counter())
        everyone = gather((np.array(started[WARMUP:]), np.array(returned[WARMUP:])))
        if rank == 0:
            last_start = np.max([s for s, _ in everyone], axis=0)
            after = np.concatenate([r - last_start for _, r in everyone]) * 1e6
            print("lockstep,%s,%d,%.0f,%.0f,%.0f" % ((args.impl, compute_ms) + tuple(np.percentile(after, [10, 50, 90]))),
                  flush=True)


if __name__ == "__main__":
    main()
