"""make bench-grouped: the time of one call that reduces a group of small tensors (the gradients
of Horovod's MNIST conv net: 40 B to 64 KB) over 2 processes, for groups of 1, 2, 4 and 8, as a
DistributedOptimizer's last gradients arrive: horovod_rs (--impl horovod_rs, under
``horovodrs -np 2``) through ``grouped_allreduce`` and through one ``allreduce_async`` per tensor,
all submitted before any is waited on; torch's gloo (--impl gloo, under ``torch.distributed.run``)
through one ``all_reduce(async_op=True)`` per tensor. Rank 0 prints
``grouped,<impl>,<how>,<tensors>,<us_per_call>``.
"""

import argparse
import atexit
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "examples", "bench"))
import bench_models  # noqa: E402

WARMUP, CALLS = 100, 1000


def horovod_rs_ways():
    import horovod_rs.torch as hvd

    hvd.init()

    def grouped(tensors, k):
        hvd.grouped_allreduce(tensors, name="group%d" % k)

    def one_by_one(tensors, k):
        for handle in [hvd.allreduce_async(t, name="async%d.%d" % (k, i)) for i, t in enumerate(tensors)]:
            hvd.synchronize(handle)

    return hvd.rank(), [("grouped_allreduce", grouped), ("allreduce_async", one_by_one)]


def gloo_ways():
    import torch.distributed as dist

    dist.init_process_group("gloo")
    atexit.register(dist.destroy_process_group)

    def one_by_one(tensors, k):
        for work in [dist.all_reduce(t, async_op=True) for t in tensors]:
            work.wait()

    return dist.get_rank(), [("all_reduce_async", one_by_one)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["horovod_rs", "gloo"], required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rank, ways = horovod_rs_ways() if args.impl == "horovod_rs" else gloo_ways()
    # In forward order: the first k are the last k gradients backward produces.
    shapes = [p.shape for p in bench_models.torch_model("mnist").parameters()]
    for how, reduce in ways:
        for k in (1, 2, 4, 8):
            tensors = [torch.rand(shape) for shape in shapes[:k]]
            for _ in range(WARMUP):
                reduce(tensors, k)
            started = time.perf_counter()
            for _ in range(CALLS):
                reduce(tensors, k)
            if rank == 0:
                print("grouped,%s,%s,%d,%.1f" % (args.impl, how, k, (time.perf_counter() - started) / CALLS * 1e6),
                      flush=True)


if __name__ == "__main__":
    main()
