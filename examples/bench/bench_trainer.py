"""torch's side of ``make bench-trainer``: ``bench_models``' MLP (36-H-H-1, ReLU, Adam 1e-3, MSE)
trained in this one process on the rows ``horovod-bench-train`` trains the native trainer on (the
same generator, the same batches' size and count), with ``--threads`` torch threads. Prints
``trainer,torch,<threads>,<steps per second>,<loss>``, the native binary's CSV.

    python bench_trainer.py ROWS EPOCHS BATCH HIDDEN --threads N
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402

FEATURES = 36
MASK = (1 << 64) - 1


def rows(count):
    """The rows of ``horovod-bench-train``'s ``table``: its xorshift generator, drawn in order."""
    state = 0x2545_F491_4F6C_DD1D
    draws = np.empty(count * (FEATURES + 1), dtype=np.float32)
    for i in range(len(draws)):
        state ^= (state << 13) & MASK
        state ^= state >> 7
        state ^= (state << 17) & MASK
        draws[i] = np.float32(state >> 40) / np.float32(1 << 24) - np.float32(0.5)
    draws = draws.reshape(count, FEATURES + 1)
    features = np.float32(3.4) * draws[:, :FEATURES]
    weights = np.array([((i % 5) - 2.0) * 0.1 for i in range(FEATURES)], dtype=np.float32)
    label = features @ weights + np.float32(0.1) * draws[:, FEATURES]
    return features, label.astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("rows", "epochs", "batch", "hidden"):
        parser.add_argument(name, type=int)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    features, label = (torch.from_numpy(a) for a in rows(args.rows))
    model = bench_models.torch_model("mlp", args.hidden)
    optimizer = bench_models.torch_optimizer("mlp", model)
    loss_fn = bench_models.torch_loss("mlp")
    steps = args.rows // args.batch
    started = time.perf_counter()
    for _ in range(args.epochs):
        order = torch.randperm(args.rows)
        for step in range(steps):
            batch = order[step * args.batch:(step + 1) * args.batch]
            optimizer.zero_grad()
            loss = loss_fn(model(features[batch]), label[batch])
            loss.backward()
            optimizer.step()
    rate = args.epochs * steps / (time.perf_counter() - started)
    print("trainer,torch,%d,%.1f,%.4f" % (args.threads, rate, loss.item()), flush=True)


if __name__ == "__main__":
    main()
