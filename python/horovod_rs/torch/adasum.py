"""Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation"), Horovod's
``op=hvd.Adasum``: gradients (or model updates) combined so that parallel parts add up and
repeated parts count once.

Two vectors combine as ``(1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b``: orthogonal ones are
summed, equal ones give themselves. Ranks combine in pairs, level by level (0 with 1, 2 with 3,
then the pairs), as Horovod's recursive doubling does; an odd one out moves up a level unchanged.
Every rank gathers every rank's tensor and computes the tree itself in float64, so every rank
ends with the same bits (Horovod reduces the halves in place instead; the result is the same).
"""

import torch


def combine_pair(a, b):
    """Adasum of two float64 vectors."""
    dot, aa, bb = torch.dot(a, b), torch.dot(a, a), torch.dot(b, b)
    if aa == 0:
        return b.clone()
    if bb == 0:
        return a.clone()
    return (1 - dot / (2 * aa)) * a + (1 - dot / (2 * bb)) * b


def combine(rows):
    """Adasum of the rows of a 2-D tensor (one per rank, in rank order), as float64."""
    level = [row.to(torch.float64) for row in rows]
    while len(level) > 1:
        paired = [combine_pair(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = paired + level[len(paired) * 2:]
    return level[0]
