"""The floor of ``make bench-estimator``: the same training as a fit's, with nothing around it.
Run by ``torch.distributed.run`` (one thread per process, as a Spark task's one core): each
process takes every size-th row of the arrays in ``--data`` (features, label, validation mask;
in memory), trains ``bench_models``' torch model with DistributedDataParallel over gloo for the
epochs and batch size given, validating after each epoch, and rank 0 prints one JSON line:
``{"train": s, "validation": s}`` (the seconds of each, summed over the epochs).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=["mlp", "mnist"], required=True)
    parser.add_argument("--data", required=True, help=".npz with features, label, validation")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    arrays = np.load(args.data)
    mine = slice(rank, None, size)
    features, label, validation = (torch.from_numpy(arrays[name][mine]) for name in ("features", "label",
                                                                                      "validation"))
    x, y = features[~validation], label[~validation]
    val_x, val_y = features[validation], label[validation]
    # Every process runs the same steps (as a fit's ranks do): the mean share of the training rows.
    rows = torch.tensor([len(x)])
    dist.all_reduce(rows)
    steps = int(rows) // size // args.batch
    model = torch.nn.parallel.DistributedDataParallel(bench_models.torch_model(args.case, args.hidden))
    optimizer = bench_models.torch_optimizer(args.case, model, size)
    loss_fn = bench_models.torch_loss(args.case)
    seconds = {"train": 0.0, "validation": 0.0}
    for _ in range(args.epochs):
        started = time.perf_counter()
        model.train()
        order = torch.randperm(len(x)).repeat(2)  # a process with fewer rows than the mean wraps around
        for step in range(steps):
            rows = order[step * args.batch:(step + 1) * args.batch]
            optimizer.zero_grad()
            loss_fn(model(x[rows]), y[rows]).backward()
            optimizer.step()
        seconds["train"] += time.perf_counter() - started
        started = time.perf_counter()
        model.eval()
        with torch.no_grad():
            for first in range(0, len(val_x), args.batch):
                loss_fn(model.module(val_x[first:first + args.batch]), val_y[first:first + args.batch])
        seconds["validation"] += time.perf_counter() - started
    dist.barrier()
    if rank == 0:
        print(json.dumps(seconds), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
