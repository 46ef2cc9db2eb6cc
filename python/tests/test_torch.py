"""horovod_rs.torch under the launcher: ``horovodrs -np N python -m pytest python/tests``.

Every rank runs every test in the same order; each builds its inputs from its rank and checks
the result against a reference computed from all ranks' inputs locally.
"""

import itertools

import pytest
import torch

import horovod_rs.torch as hvd

hvd.init()
N, R = hvd.size(), hvd.rank()

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]
OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]


def values(rank, dtype):
    """Rank-dependent small values, so sums and products fit every dtype."""
    return (torch.arange(6) % 3 + 1 + rank % 2).to(dtype)


def reference(op, dtype):
    inputs = torch.stack([values(r, torch.float64) for r in range(N)])
    out = {hvd.Sum: inputs.sum(0), hvd.Min: inputs.min(0).values, hvd.Max: inputs.max(0).values,
           hvd.Product: inputs.prod(0), hvd.Average: inputs.sum(0) / N}[op]
    if op == hvd.Average and not dtype.is_floating_point:
        out = torch.div(inputs.sum(0), N, rounding_mode="trunc")
    return out


@pytest.mark.parametrize("dtype,op", list(itertools.product(DTYPES, OPS)))
def test_allreduce_every_op_and_dtype(dtype, op):
    result = hvd.allreduce(values(R, dtype), op=op, name="ar.%s.%s" % (dtype, op))
    assert result.dtype == dtype
    tolerance = {torch.float16: 0.02, torch.bfloat16: 0.02, torch.float32: 1e-6}.get(dtype, 1e-12)
    assert torch.allclose(result.to(torch.float64), reference(op, dtype), rtol=tolerance, atol=tolerance)


def test_in_place_scaled_and_compressed_allreduce():
    t = torch.full((4,), float(R + 1))
    hvd.allreduce_(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert torch.equal(t, torch.full((4,), float(N * (N + 1) / 2)))
    compressed = hvd.allreduce(torch.full((3,), 0.5 + R), compression=hvd.Compression.fp16, op=hvd.Average)
    assert compressed.dtype == torch.float32
    assert torch.allclose(compressed, torch.full((3,), 0.5 + (N - 1) / 2))


def test_in_place_calls_reduce_in_the_tensors_own_memory():
    # 2 MiB runs alone in its memory, the small ones fused; a transposed view goes through a copy.
    big, small = torch.full((512, 1024), float(R)), torch.full((5,), float(R))
    pointers = (big.data_ptr(), small.data_ptr())
    strided = torch.arange(6.0).reshape(2, 3).t() * (R + 1)
    handles = [hvd.allreduce_async_(t, name="inplace.%d" % i, op=hvd.Sum) for i, t in enumerate((big, small, strided))]
    for h in handles:
        hvd.synchronize(h)
    total = float(N * (N - 1) / 2)
    assert (big.data_ptr(), small.data_ptr()) == pointers
    assert torch.equal(big, torch.full((512, 1024), total)) and torch.equal(small, torch.full((5,), total))
    assert torch.equal(strided, torch.arange(6.0).reshape(2, 3).t() * (N * (N + 1) / 2))
    b = torch.full((300, 1000), float(R))
    hvd.broadcast_(b, root_rank=N - 1)
    assert torch.equal(b, torch.full((300, 1000), float(N - 1)))


def test_async_submissions_in_different_orders_on_each_rank():
    names = ["order.%d" % i for i in range(20)]
    order = names if R % 2 == 0 else list(reversed(names))
    handles = {n: hvd.allreduce_async(torch.tensor([float(i), float(R)]), name=n, op=hvd.Sum)
               for n, i in ((n, names.index(n)) for n in order)}
    for i, n in enumerate(names):
        assert torch.equal(hvd.synchronize(handles[n]), torch.tensor([float(i * N), float(N * (N - 1) / 2)]))


def test_grouped_allreduce():
    results = hvd.grouped_allreduce([torch.ones(2) * R, torch.ones(3) * 2 * R], op=hvd.Sum)
    total = N * (N - 1) / 2
    assert torch.equal(results[0], torch.ones(2) * total) and torch.equal(results[1], torch.ones(3) * 2 * total)


def test_allgather_with_a_different_first_dimension_per_rank():
    gathered = hvd.allgather(torch.full((R + 1, 2), float(R)))
    expected = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(N)])
    assert torch.equal(gathered, expected)


def test_broadcast_from_every_root():
    for root in range(N):
        t = torch.full((3,), float(R))
        hvd.broadcast_(t, root_rank=root)
        assert torch.equal(t, torch.full((3,), float(root)))


def test_alltoall_with_splits():
    # Rank r sends r + 1 rows to every rank, each row holding the sender's rank.
    sent = torch.full(((R + 1) * N, 1), float(R))
    received, received_splits = hvd.alltoall(sent, splits=[R + 1] * N)
    expected = torch.cat([torch.full((r + 1, 1), float(r)) for r in range(N)])
    assert torch.equal(received, expected)
    assert received_splits.dtype == torch.int32
    assert received_splits.tolist() == [r + 1 for r in range(N)]


def test_alltoall_without_splits_returns_the_rows_only():
    received = hvd.alltoall(torch.full((N, 2), float(R)))
    assert torch.equal(received, torch.arange(N, dtype=torch.float32).repeat_interleave(2).reshape(N, 2))


def test_alltoall_splits_that_do_not_cover_the_tensor_are_refused():
    with pytest.raises(ValueError, match="summing to the first dimension"):
        hvd.alltoall(torch.zeros(N + 1, 1), splits=[1] * N)


def test_join_returns_the_last_rank_to_join_on_every_rank():
    import time

    time.sleep(0.2 * (R == N - 1))
    assert hvd.join() == N - 1


def test_join_with_uneven_data_per_rank():
    # Rank r has r + 1 batches; ranks that ran out contribute zeros until everyone joins.
    for step in range(R + 1):
        total = hvd.allreduce(torch.tensor([R + 1.0, 1.0]), op=hvd.Sum, name="uneven.%d" % step)
        live = range(step, N)
        assert total.tolist() == [float(sum(r + 1 for r in live)), float(len(live))]
        average = hvd.allreduce(torch.tensor([float(N)]), name="uneven.avg.%d" % step)
        assert average.item() == pytest.approx(len(live))  # Horovod divides by size() too
    assert hvd.join() == N - 1


def test_allgather_and_broadcast_fail_while_a_rank_has_joined_as_in_horovod():
    # Only allreduces run while a rank has joined; the others name the joined ranks.
    if R != 0:
        with pytest.raises(RuntimeError, match=r"Allgather is not supported with Join.*\[0\]"):
            hvd.allgather(torch.ones(2, 3), name="rows.while.joined")
        with pytest.raises(RuntimeError, match=r"Broadcast is not supported with Join"):
            hvd.broadcast(torch.ones(3), root_rank=1, name="weights.while.joined")
    last = hvd.join()
    assert last != 0 and hvd.allgather_object(last) == [last] * N


def test_distributed_optimizer_with_uneven_batches_matches_zero_gradients_from_joined_ranks():
    def batches(rank):
        g = torch.Generator().manual_seed(rank)
        return [torch.randn(4, 4, generator=g) for _ in range(rank + 1)]  # rank r has r + 1 batches

    def loss(model, x):
        return torch.nn.functional.mse_loss(model(x), torch.ones(4, 1))

    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for x in batches(R):
        opt.zero_grad()
        loss(model, x).backward()
        opt.step()
    last = hvd.join()
    assert last == N - 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)

    # One process: at step s, the gradients of the ranks that still have data, summed, over N.
    reference = _model()
    per_rank = [batches(r) for r in range(N)]
    for step in range(N):
        grads = None
        for r in range(step, N):
            reference.zero_grad()
            loss(reference, per_rank[r][step]).backward()
            g = [p.grad.clone() for p in reference.parameters()]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        with torch.no_grad():
            for p, g in zip(reference.parameters(), grads):
                p -= 0.1 * g / N
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    expected = torch.cat([p.detach().flatten() for p in reference.parameters()])
    assert torch.allclose(flat, expected, atol=1e-6)


def test_build_queries_answer_like_horovod_with_gloo_and_without_mpi_or_nccl():
    assert not hvd.mpi_built() and hvd.gloo_built() and hvd.gloo_enabled() and not hvd.nccl_built()
    assert not hvd.cuda_built() and not hvd.mpi_threads_supported()


def test_reducescatter():
    result = hvd.reducescatter(torch.arange(N * 2, dtype=torch.float32), op=hvd.Sum)
    assert torch.equal(result, torch.arange(R * 2, R * 2 + 2, dtype=torch.float32) * N)


def test_objects_and_barrier():
    assert hvd.broadcast_object({"from": R, "list": [1, 2]}, root_rank=N - 1) == {"from": N - 1, "list": [1, 2]}
    assert hvd.allgather_object(("rank", R)) == [("rank", r) for r in range(N)]
    hvd.barrier()


def test_mismatched_shapes_fail_on_every_rank_naming_the_tensor():
    with pytest.raises(RuntimeError, match="mismatch.shape"):
        hvd.allreduce(torch.zeros(R + 1), name="mismatch.shape")


def test_a_name_stays_taken_until_its_result_is_synchronized():
    handle = hvd.allreduce_async(torch.ones(3), name="taken")
    hvd.barrier()  # every rank submitted it: it may well have run, its result not yet synchronized
    with pytest.raises(ValueError, match="taken"):
        hvd.allreduce_async(torch.ones(3), name="taken")
    assert hvd.synchronize(handle).tolist() == [1.0] * 3
    assert hvd.allreduce(torch.ones(3), name="taken").tolist() == [1.0] * 3


def test_alltoall_refuses_splits_that_are_not_integers():
    # Float splits that happen to add up would otherwise be taken on some ranks and not others.
    with pytest.raises(ValueError, match="integers"):
        hvd.alltoall(torch.ones(N), splits=torch.ones(N))


def test_a_failed_group_frees_every_name():
    with pytest.raises(RuntimeError, match="failed.0"):
        hvd.grouped_allreduce([torch.zeros(R + 1), torch.ones(3)], name="failed")
    # The group's other tensor ran; its name is free again with the failed one's.
    assert [t.tolist() for t in hvd.grouped_allreduce([torch.ones(2), torch.ones(3)], name="failed")] == \
        [[1.0] * 2, [1.0] * 3]


def test_a_failed_optimizer_step_frees_every_gradients_name():
    same, differs = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(R + 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([same, differs], lr=0.1),
                                   named_parameters=[("same", same), ("differs", differs)])
    (same.sum() + differs.sum()).backward()
    with pytest.raises(RuntimeError, match="grad.differs"):
        opt.step()
    # Both gradients' results were taken: their names are free for the next step's collectives.
    assert hvd.allreduce(torch.ones(3), name="grad.same").tolist() == [1.0] * 3
    assert hvd.allreduce(torch.ones(2), name="grad.differs").tolist() == [1.0] * 2


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def test_distributed_optimizer_matches_one_process_on_the_full_batch():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8 * N, 4, generator=g), torch.randn(8 * N, 1, generator=g)
    shard = slice(8 * R, 8 * (R + 1))

    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[shard]), y[shard]).backward()
        opt.step()

    single = _model()
    single_opt = torch.optim.SGD(single.parameters(), lr=0.1, momentum=0.9)
    for _ in range(5):
        single_opt.zero_grad()
        torch.nn.functional.mse_loss(single(x), y).backward()
        single_opt.step()

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = hvd.allgather(flat.unsqueeze(0))
    assert all(torch.equal(everyone[r], everyone[0]) for r in range(N)), "ranks differ"
    expected = torch.cat([p.detach().flatten() for p in single.parameters()])
    assert torch.allclose(flat, expected, atol=1e-5)


# Gradients flow through the collectives that return new tensors, as in Horovod: the backward of
# each is the matching collective on the gradient.

def test_allreduce_gradient_is_the_reduced_gradient():
    x = torch.full((3,), float(R + 1), requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum) * float(R + 1)).sum().backward()
    # The backward is the same Sum of every rank's gradient (r + 1).
    assert torch.allclose(x.grad, torch.full((3,), float(sum(r + 1 for r in range(N)))))


def test_grouped_allreduce_gradients():
    a, b = torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)
    ra, rb = hvd.grouped_allreduce([a, b], op=hvd.Average)
    (ra.sum() * 2 + rb.sum() * 3).backward()
    assert torch.allclose(a.grad, torch.full((2,), 2.0)) and torch.allclose(b.grad, torch.full((3,), 3.0))


def test_allgather_gradient_is_this_ranks_rows_of_the_averaged_gradient():
    x = torch.ones(R + 1, 2, requires_grad=True)  # ranks contribute different numbers of rows
    gathered = hvd.allgather(x)
    weights = torch.arange(gathered.shape[0], dtype=torch.float32).reshape(-1, 1) * (R + 1)
    (gathered * weights).sum().backward()
    offset = sum(r + 1 for r in range(R))
    mean_scale = sum(r + 1 for r in range(N)) / N
    expected = torch.arange(offset, offset + R + 1, dtype=torch.float32).reshape(-1, 1).expand(R + 1, 2) * mean_scale
    assert torch.allclose(x.grad, expected)


def test_broadcast_gradient_reaches_the_root_only():
    x = torch.full((2,), float(R), requires_grad=True)
    (hvd.broadcast(x, root_rank=0) * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((2,), 2.0 if R == 0 else 0.0))


def test_alltoall_gradient_goes_back_to_the_sender():
    x = torch.ones(N, 1, requires_grad=True)
    received = hvd.alltoall(x)
    (received * torch.arange(N, dtype=torch.float32).reshape(N, 1)).sum().backward()
    # Row i of this rank went to rank i, which weighted it by this rank's number.
    assert torch.equal(x.grad, torch.full((N, 1), float(R)))


def test_reducescatter_gradient_is_the_gathered_gradient_by_horovods_rule():
    x = torch.ones(N * 2, requires_grad=True)
    hvd.reducescatter(x, op=hvd.Sum).sum().backward()
    assert torch.equal(x.grad, torch.full((N * 2,), float(N)))  # times the ranks for Sum, as Horovod
    y = torch.ones(N * 2, requires_grad=True)
    hvd.reducescatter(y, op=hvd.Average, prescale_factor=2.0).sum().backward()
    assert torch.equal(y.grad, torch.full((N * 2,), 2.0))


def test_reducescatter_scales_integers_as_horovod_and_refuses_scalars_and_adasum():
    result = hvd.reducescatter(torch.full((N * 2,), 3, dtype=torch.int32), op=hvd.Sum, prescale_factor=0.5,
                               postscale_factor=2.0)
    assert result.tolist() == [2 * N, 2 * N]  # int(3 * 0.5) = 1 per rank, summed, doubled
    with pytest.raises(ValueError, match="scalar"):
        hvd.reducescatter(torch.tensor(1.0))
    with pytest.raises(RuntimeError, match="Adasum"):
        hvd.reducescatter(torch.ones(N), op=hvd.Adasum)
    summed = hvd.allreduce(torch.full((2,), 3, dtype=torch.int64), op=hvd.Sum, prescale_factor=0.5)
    assert summed.tolist() == [N, N]


def test_int16_reduces():
    result = hvd.allreduce(torch.full((4,), 1000 + R, dtype=torch.int16), op=hvd.Sum)
    assert result.dtype == torch.int16 and result.tolist() == [sum(1000 + r for r in range(N))] * 4


def test_grouped_allgather_and_reducescatter_with_gradients():
    a = torch.full((R + 1, 2), float(R), requires_grad=True)
    b = torch.full((1,), float(R), requires_grad=True)
    ga, gb = hvd.grouped_allgather([a, b])
    assert torch.equal(gb, torch.arange(N, dtype=torch.float32))
    assert ga.shape == (sum(r + 1 for r in range(N)), 2)
    (ga.sum() + gb.sum() * 2).backward()
    assert torch.equal(a.grad, torch.ones(R + 1, 2)) and torch.equal(b.grad, torch.full((1,), 2.0))

    x = torch.ones(N * 2, requires_grad=True)
    (rx,) = hvd.grouped_reducescatter([x], op=hvd.Sum)
    assert torch.equal(rx, torch.full((2,), float(N)))
    rx.sum().backward()
    assert torch.equal(x.grad, torch.full((N * 2,), float(N)))


def test_a_failed_collective_is_a_horovod_internal_error():
    with pytest.raises(hvd.HorovodInternalError, match="shape"):
        hvd.allreduce(torch.zeros(R + 1), name="mismatched.shapes")


def test_a_blocked_wait_lets_signal_handlers_run():
    # Rank 0 submits late; meanwhile a signal handler on the other ranks interrupts their wait
    # (as Ctrl-C's KeyboardInterrupt does) long before the collective timeout.
    import signal
    import time

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted()

    if R == 0:
        time.sleep(2)
        hvd.allreduce(torch.ones(1), name="interrupted.wait")  # the others' submissions complete it
        hvd.barrier()
        return
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    started = time.time()
    try:
        with pytest.raises(Interrupted):
            hvd.allreduce(torch.ones(1), name="interrupted.wait")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.time() - started < 30
    hvd.barrier()  # the interrupted collective still completes once rank 0 submits it


def test_backward_passes_accumulate_then_reduce_once_and_step_reduces_what_is_pending():
    w = torch.nn.Parameter(torch.zeros(2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("bpps.w", w)],
                                   backward_passes_per_step=2)
    for scale in (1.0, 2.0):  # two passes: the gradients add up, as Horovod's (no division)
        (w * (R + 1) * scale).sum().backward()
    opt.step()
    mean = sum(r + 1 for r in range(N)) / N
    assert torch.allclose(w.detach(), torch.full((2,), -3.0 * mean))
    opt.zero_grad()
    (w * (R + 1)).sum().backward()  # one pass of two: step() reduces it anyway
    opt.step()
    assert torch.allclose(w.detach(), torch.full((2,), -4.0 * mean))


def test_skip_synchronize_lets_the_averaged_gradients_be_changed_before_the_step():
    w = torch.nn.Parameter(torch.zeros(1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("skip.w", w)])
    (w * (R + 1)).sum().backward()
    opt.synchronize()
    w.grad.mul_(10)
    with opt.skip_synchronize():
        opt.step()
    assert torch.allclose(w.detach(), torch.full((1,), -10.0 * sum(r + 1 for r in range(N)) / N))
    assert opt._parameter_names[w] == "skip.w"


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_embedding_gradients(sparse_as_dense):
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(10, 3, sparse=True)
    hvd.broadcast_parameters(embedding.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(embedding.parameters(), lr=1.0) if sparse_as_dense
                                   else torch.optim.SGD(embedding.parameters(), lr=1.0),
                                   named_parameters=embedding.named_parameters(), sparse_as_dense=sparse_as_dense)
    before = embedding.weight.detach().clone()
    embedding(torch.tensor([R % 10])).sum().backward()
    opt.step()
    moved = (before - embedding.weight.detach()).abs().sum(dim=1)
    if sparse_as_dense:  # SparseAdam (sparse gradients only): its first step moves each touched row by lr
        assert all(torch.isclose(moved[r], torch.tensor(3.0)) for r in range(min(N, 10))), moved
        return
    # Every rank's row moved by the averaged gradient (1/N per element, 3 elements).
    for r in range(min(N, 10)):
        assert torch.isclose(moved[r], torch.tensor(3.0 / N)), (r, moved)


def test_sparse_allreduce_async_returns_a_function_giving_the_sparse_result():
    t = torch.sparse_coo_tensor([[R]], [float(R + 1)], (N,))
    result = hvd.sparse_allreduce_async(t, name="sparse.t", op=hvd.Sum)()
    assert torch.equal(result.to_dense(), torch.arange(1, N + 1, dtype=torch.float32))


@pytest.mark.parametrize("momentum", [0.1, None])
def test_sync_batch_norm_normalizes_the_whole_batch_forward_and_backward(momentum):
    # Each rank's batch is its own; one BatchNorm over all of them (in every process, from the
    # gathered batches) is the reference for the outputs, the input gradients, the weights'
    # gradients (summed over the ranks, as DistributedOptimizer sums them) and the running stats.
    torch.manual_seed(0)
    everyone = torch.randn(3 * N, 4, 5) * 3 + 1
    mine = everyone[3 * R:3 * (R + 1)].clone().requires_grad_()
    weights = torch.randn(3 * N, 4, 5)
    synced = hvd.SyncBatchNorm(4, momentum=momentum)
    reference = torch.nn.BatchNorm1d(4, momentum=momentum)
    with torch.no_grad():
        for layer in (synced, reference):
            layer.weight.copy_(torch.arange(1.0, 5.0))
            layer.bias.copy_(torch.arange(4.0))
    for _ in range(2):
        out = synced(mine)
        whole = everyone.clone().requires_grad_()
        expected = reference(whole)
        torch.testing.assert_close(out, expected[3 * R:3 * (R + 1)], rtol=1e-4, atol=1e-5)
        (out * weights[3 * R:3 * (R + 1)]).sum().backward()
        (expected * weights).sum().backward()
        torch.testing.assert_close(mine.grad, whole.grad[3 * R:3 * (R + 1)], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(hvd.allreduce(synced.weight.grad, op=hvd.Sum), reference.weight.grad,
                                   rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(synced.running_var, reference.running_var, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(synced.running_mean, reference.running_mean, rtol=1e-4, atol=1e-5)
        for tensor in (mine, synced.weight, synced.bias, reference.weight, reference.bias):
            tensor.grad = None
    synced.eval()
    reference.eval()
    torch.testing.assert_close(synced(mine), reference(everyone)[3 * R:3 * (R + 1)], rtol=1e-4, atol=1e-5)
