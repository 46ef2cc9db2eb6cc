"""Small generated data sets for the estimator tests (no downloads)."""

import bz2

import numpy as np


def write_mnist_libsvm(path, rows, seed=0, side=28):
    """An MNIST-shaped libsvm file (bz2, as MNIST's): ``side``x``side`` images whose class (0-9)
    decides where a bright bar lies, plus noise; labels 0-9."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(rows):
        label = int(rng.integers(10))
        image = rng.random((side, side)) * 0.3
        row = 2 + (label % 5) * (side - 4) // 5
        col = 2 if label < 5 else side // 2
        image[row:row + 3, col:col + side // 3] = 1.0
        flat = image.reshape(-1)
        nonzero = np.flatnonzero(flat > 0.25)
        lines.append("%d %s" % (label, " ".join("%d:%.3f" % (i + 1, flat[i]) for i in nonzero)))
    with bz2.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
