"""Writes an MNIST-like data set in LIBSVM format (``mnist.bz2``), where Horovod's Spark MNIST
examples look for the real one: 28x28 grey images as 784 features with values in [0, 1] (as
LIBSVM's scaled MNIST), labels 0-9.

Each class is a fixed random pattern of strokes; an image is its class's pattern, shifted by up
to two pixels, with random intensity and noise. A small convolutional net tells the classes apart
after an epoch or two, so the examples' accuracy means something without the real data.

    python mnist_libsvm.py --rows 3000 --output /tmp/data/mnist.bz2
"""

import argparse
import bz2
import os

import numpy as np

SIDE = 28


def class_patterns(rng, classes=10, strokes=4):
    """One 28x28 pattern in [0, 1] per class: a few thick random line segments."""
    patterns = np.zeros((classes, SIDE, SIDE), dtype=np.float32)
    for pattern in patterns:
        for _ in range(strokes):
            (r0, c0), (r1, c1) = rng.integers(5, SIDE - 5, size=(2, 2))
            for t in np.linspace(0.0, 1.0, 40):
                r, c = int(round(r0 + (r1 - r0) * t)), int(round(c0 + (c1 - c0) * t))
                pattern[max(0, r - 1):r + 2, max(0, c - 1):c + 2] = 1.0
    return patterns


def images(rng, patterns, rows):
    """``rows`` labels and images (784 values in [0, 1], two decimals)."""
    labels = rng.integers(0, len(patterns), size=rows)
    shifts = rng.integers(-2, 3, size=(rows, 2))
    out = np.empty((rows, SIDE, SIDE), dtype=np.float32)
    for i, (label, (dr, dc)) in enumerate(zip(labels, shifts)):
        out[i] = np.roll(np.roll(patterns[label], dr, axis=0), dc, axis=1)
    out *= rng.uniform(0.6, 1.0, size=(rows, 1, 1))
    out += rng.normal(0.0, 0.08, size=out.shape)
    out = np.clip(out, 0.0, 1.0)
    out[out < 0.15] = 0.0  # sparse, as real digits on a black background
    return labels, np.round(out, 2).reshape(rows, SIDE * SIDE)


def libsvm_lines(labels, pixels):
    for label, row in zip(labels, pixels):
        nonzero = np.flatnonzero(row)
        yield "%d %s\n" % (label, " ".join("%d:%g" % (i + 1, row[i]) for i in nonzero))


def write(path, rows, seed=0):
    rng = np.random.default_rng(seed)
    labels, pixels = images(rng, class_patterns(rng), rows)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with bz2.open(path, "wt") as f:
        f.writelines(libsvm_lines(labels, pixels))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="mnist.bz2")
    args = parser.parse_args()
    write(args.output, args.rows, args.seed)


if __name__ == "__main__":
    main()
