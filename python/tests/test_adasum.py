"""Adasum (op=hvd.Adasum) under the launcher: the combination rule, and DistributedOptimizer's
Adasum mode keeping ranks identical."""

import pytest
import torch

import horovod_rs.torch as hvd
from horovod_rs.torch import adasum

hvd.init()
N, R = hvd.size(), hvd.rank()


def test_the_pair_rule_sums_orthogonal_vectors_and_keeps_equal_ones():
    a, b = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0.0, 2.0], dtype=torch.float64)
    assert torch.equal(adasum.combine_pair(a, b), torch.tensor([1.0, 2.0], dtype=torch.float64))
    assert torch.allclose(adasum.combine_pair(a, a), a)
    assert torch.equal(adasum.combine_pair(a, torch.zeros(2, dtype=torch.float64)), a)


def test_adasum_allreduce_equals_the_tree_of_every_ranks_tensor():
    mine = torch.tensor([float(R + 1), float(R % 2), 1.0])
    everyone = torch.stack([torch.tensor([float(r + 1), float(r % 2), 1.0]) for r in range(N)])
    expected = adasum.combine(everyone).to(torch.float32)
    result = hvd.allreduce(mine, op=hvd.Adasum, name="adasum.values")
    assert torch.allclose(result, expected)
    same = hvd.allreduce(torch.full((4,), 3.0), op=hvd.Adasum, name="adasum.same")
    assert torch.allclose(same, torch.full((4,), 3.0)), "equal tensors give themselves"
    t = mine.clone()
    hvd.allreduce_(t, op=hvd.Adasum, name="adasum.inplace")
    assert torch.allclose(t, expected)
    with pytest.raises(ValueError, match="Adasum combines float tensors"):
        hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum)


def test_distributed_optimizer_with_adasum_keeps_ranks_identical():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters(),
                                   op=hvd.Adasum)
    g = torch.Generator().manual_seed(R)
    for _ in range(3):
        opt.zero_grad()
        x, y = torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    weights = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    everyone = hvd.allgather(weights.unsqueeze(0), name="adasum.weights")
    assert all(torch.equal(everyone[0], w) for w in everyone)
