"""make bench-grouped: the time of one call that reduces a group of small tensors (the gradients
of Horovod's MNIST conv net: 40 B to 64 KB) over 2 processes, for groups of 1, 2, 4 and 8:
horovod_rs's ``grouped_allreduce`` (--impl horovod_rs, under ``horovodrs -np 2``) and torch's
gloo, each tensor's ``all_reduce(async_op=True)`` submitted before any is waited on (--impl gloo,
under ``torch.distributed.run``). Rank 0 prints ``grouped,<impl>,<tensors>,<us_per_call>``.
"""

import argparse
import atexit
import time

import torch

SHAPES = [(10, 1, 5, 5), (10,), (20, 10, 5, 5), (20,), (50, 320), (50,), (10, 50), (10,)]
WARMUP, CALLS = 100, 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["horovod_rs", "gloo"], required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.impl == "horovod_rs":
        import horovod_rs.torch as hvd

        hvd.init()
        rank = hvd.rank()

        def reduce(tensors, k):
            hvd.grouped_allreduce(tensors, name="group%d" % k)
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        atexit.register(dist.destroy_process_group)  # (a rank leaving early fails the other's last wait)

        def reduce(tensors, k):
            for work in [dist.all_reduce(t, async_op=True) for t in tensors]:
                work.wait()

    for k in (1, 2, 4, 8):
        tensors = [torch.rand(shape) for shape in SHAPES[:k]]
        for _ in range(WARMUP):
            reduce(tensors, k)
        started = time.perf_counter()
        for _ in range(CALLS):
            reduce(tensors, k)
        if rank == 0:
            print("grouped,%s,%d,%.1f" % (args.impl, k, (time.perf_counter() - started) / CALLS * 1e6), flush=True)


if __name__ == "__main__":
    main()
