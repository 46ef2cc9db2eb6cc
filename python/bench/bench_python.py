"""make bench-python: training steps/s of a Rossmann-shaped MLP (198-1000-1000-1000-500-1) on
several processes, horovod_rs's DistributedOptimizer against torch's DistributedDataParallel
(gloo), and the floor: the same job with no communication (--impl none: each process steps its
own model, as many processes at once, so they share the cores and memory as the others do). Run
under `horovodrs -np N` (--impl horovod_rs, none) or `torch.distributed.run` (--impl ddp); rank 0
prints `impl,procs,batch,steps_per_s`.
"""

import argparse
import os
import time

import torch

WARMUP, STEPS = 5, 100


def model():
    torch.manual_seed(0)
    layers, width = [], 198
    for units in (1000, 1000, 1000, 500):
        layers += [torch.nn.Linear(width, units), torch.nn.ReLU()]
        width = units
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def train(net, optimizer, batch, rank):
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(batch, 198, generator=g), torch.randn(batch, 1, generator=g)
    for step in range(WARMUP + STEPS):
        if step == WARMUP:
            started = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.l1_loss(net(x), y).backward()
        optimizer.step()
    return STEPS / (time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["horovod_rs", "ddp", "none"], required=True)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per process, as in a Spark task
    net = model()
    if args.impl == "ddp":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, procs = dist.get_rank(), dist.get_world_size()
        net = torch.nn.parallel.DistributedDataParallel(net)
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)
    else:
        import horovod_rs.torch as hvd

        hvd.init()  # with --impl none only to know the rank and to start together
        rank, procs = hvd.rank(), hvd.size()
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)
        if args.impl == "horovod_rs":
            optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=net.named_parameters())
            hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        else:
            hvd.barrier()
    steps_per_s = train(net, optimizer, args.batch, rank)
    if args.impl == "none":
        hvd.barrier()  # the other process may still be stepping: leave together
    if rank == 0:
        print("%s,%d,%d,%.2f" % (args.impl, procs, args.batch, steps_per_s), flush=True)
    if args.impl == "ddp":
        torch.distributed.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    main()
