"""GPU tensors under the launcher, on a host with CUDA devices (skipped elsewhere): allreduce and
broadcast on NCCL in the tensor's memory when the binding is built with CUDA support, the other
collectives through host memory; results equal the CPU reference.

Each rank uses the device ``local_rank() % device_count()``, as Horovod's examples pin it.
"""

import pytest
import torch

import horovod_rs.torch as hvd

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this host")

hvd.init()
N, R = hvd.size(), hvd.rank()


@pytest.fixture(scope="module")
def device():
    d = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(d)
    return d


def values(rank, dtype, device):
    return (torch.arange(1000, device=device) % 3 + 1 + rank % 2).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32])
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Min, hvd.Max])
def test_allreduce_on_the_gpu_equals_the_cpu_reference(device, dtype, op):
    if op == hvd.Average and not dtype.is_floating_point:
        pytest.skip("integer averages round differently on NCCL")
    result = hvd.allreduce(values(R, dtype, device), op=op, name="gpu.ar.%s.%s" % (dtype, op))
    assert result.device == device and result.dtype == dtype
    expected = hvd.allreduce(values(R, dtype, "cpu"), op=op, name="cpu.ar.%s.%s" % (dtype, op))
    assert torch.allclose(result.cpu().double(), expected.double(), rtol=0.02, atol=0.02)


def test_in_place_allreduce_and_broadcast_keep_the_tensors_memory(device):
    t = torch.full((1 << 20,), float(R), device=device)
    pointer = t.data_ptr()
    hvd.allreduce_(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert t.data_ptr() == pointer
    assert torch.equal(t.cpu(), torch.full((1 << 20,), float(N * (N - 1) / 2)))
    b = torch.full((7,), float(R), device=device)
    hvd.broadcast_(b, root_rank=N - 1)
    assert torch.equal(b.cpu(), torch.full((7,), float(N - 1)))


def test_other_collectives_go_through_the_host_and_come_back(device):
    gathered = hvd.allgather(torch.full((R + 1, 2), float(R), device=device))
    assert gathered.device == device
    assert gathered.shape == (N * (N + 1) // 2, 2)
    scattered = hvd.reducescatter(torch.ones(N * 2, device=device), op=hvd.Sum)
    assert scattered.device == device and torch.equal(scattered.cpu(), torch.full((2,), float(N)))


def test_distributed_optimizer_on_the_gpu_matches_the_cpu(device):
    def train(where, prefix):  # names must agree across ranks, devices need not
        torch.manual_seed(0)
        net = torch.nn.Linear(10, 1).to(where)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                       named_parameters=[(prefix + n, p) for n, p in net.named_parameters()])
        g = torch.Generator().manual_seed(R)
        x, y = torch.randn(32, 10, generator=g).to(where), torch.randn(32, 1, generator=g).to(where)
        for _ in range(5):
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
        return torch.cat([p.detach().cpu().reshape(-1) for p in net.parameters()])

    assert torch.allclose(train(device, "gpu."), train("cpu", "cpu."), atol=1e-5)
