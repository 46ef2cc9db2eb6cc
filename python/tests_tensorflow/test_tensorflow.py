"""horovod_rs.tensorflow under the launcher (``horovodrs -np N pytest python/tests_tensorflow``):
every rank runs every test, in the same order."""

import numpy as np
import pytest
import tensorflow as tf

import horovod_rs.tensorflow as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
EVERY = np.arange(SIZE, dtype=np.float64)  # each rank's number


def both_modes(fn):
    """``fn`` run eagerly and traced: the same answers either way."""
    return [fn, tf.function(fn)]


@pytest.mark.parametrize("mode", [0, 1], ids=["eager", "traced"])
@pytest.mark.parametrize("op, expected", [
    (hvd.Sum, EVERY.sum() + SIZE), (hvd.Average, EVERY.mean() + 1), (hvd.Min, 1.0), (hvd.Max, SIZE),
    (hvd.Product, np.prod(EVERY + 1)),
])
@pytest.mark.parametrize("dtype", [tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_allreduce_ops_and_types(mode, op, expected, dtype):
    fn = both_modes(lambda x: hvd.allreduce(x, op=op))[mode]
    result = fn(tf.cast(tf.fill([3, 2], RANK + 1), dtype))
    assert result.dtype == dtype and result.shape == (3, 2)
    want = int(expected) if dtype.is_integer else expected
    np.testing.assert_allclose(tf.cast(result, tf.float64).numpy(), np.full((3, 2), want), rtol=1e-2)


@pytest.mark.parametrize("mode", [0, 1], ids=["eager", "traced"])
def test_collectives_run_in_copies_leaving_their_inputs_and_results_apart(mode):
    # The engine reduces in each input's copy, which becomes the result over the same memory:
    # the inputs (a variable's value among them) must keep their values, and two results apart.
    v = tf.Variable(tf.fill([1000], float(RANK + 1)))
    x = tf.fill([257], float(RANK + 1))
    fn = both_modes(lambda a, b: (hvd.allreduce(a, op=hvd.Sum), hvd.broadcast(b, root_rank=SIZE - 1),
                                  hvd.allreduce(a, op=hvd.Max)))[mode]
    summed, broadcast, largest = fn(v.value(), x)
    np.testing.assert_array_equal(v.numpy(), np.full(1000, RANK + 1.0))
    np.testing.assert_array_equal(x.numpy(), np.full(257, RANK + 1.0))
    np.testing.assert_array_equal(summed.numpy(), np.full(1000, (EVERY + 1).sum()))
    np.testing.assert_array_equal(broadcast.numpy(), np.full(257, float(SIZE)))
    np.testing.assert_array_equal(largest.numpy(), np.full(1000, float(SIZE)))
    assert (summed + 0.0).numpy()[0] == (EVERY + 1).sum()  # TensorFlow computes on a result


def test_allreduce_scale_factors_and_deprecated_average():
    x = tf.constant([2.0, 4.0])
    np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0).numpy(),
                               [3.0 * SIZE, 6.0 * SIZE])
    np.testing.assert_allclose(hvd.allreduce(x, average=False).numpy(), [2.0 * SIZE, 4.0 * SIZE])
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_grouped_allreduce_mixes_dense_and_indexed_slices():
    dense = tf.fill([2], float(RANK))
    slices = tf.IndexedSlices(tf.fill([1, 3], float(RANK + 1)), tf.constant([RANK]), dense_shape=tf.constant([SIZE, 3]))
    reduced_dense, reduced_slices = hvd.grouped_allreduce([dense, slices], op=hvd.Sum)
    np.testing.assert_allclose(reduced_dense.numpy(), [EVERY.sum()] * 2)
    # Every rank's rows, in rank order: as a dense tensor, row r holds rank r's values.
    assert isinstance(reduced_slices, tf.IndexedSlices)
    assert reduced_slices.indices.numpy().tolist() == list(range(SIZE))
    np.testing.assert_allclose(tf.convert_to_tensor(reduced_slices).numpy(), (EVERY[:, None] + 1) * np.ones((1, 3)))
    with pytest.raises(NotImplementedError, match="Only Sum and Average"):
        hvd.allreduce(slices, op=hvd.Max)


def test_allreduce_gradient_is_the_allreduce_of_the_gradients():
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(hvd.allreduce(x * (RANK + 1.0), op=hvd.Sum))
    # d/dx of sum_r (r+1) x over the ranks, allreduced (summed) again: (rank+1) * size.
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [(RANK + 1.0) * SIZE] * 2)


@pytest.mark.parametrize("mode", [0, 1], ids=["eager", "traced"])
def test_allgather_of_different_row_counts(mode):
    fn = both_modes(lambda x: hvd.allgather(x))[mode]
    result = fn(tf.fill([RANK + 1, 2], RANK))
    expected = np.concatenate([np.full((r + 1, 2), r) for r in range(SIZE)])
    np.testing.assert_array_equal(result.numpy(), expected)


def test_allgather_gradient_is_this_ranks_rows_of_the_average():
    x = tf.Variable(tf.ones([RANK + 1, 2]))
    with tf.GradientTape() as tape:
        gathered = hvd.allgather(x)
        weights = tf.cast(tf.range(tf.shape(gathered)[0]), tf.float32)[:, None]
        loss = tf.reduce_sum(gathered * weights)
    start = sum(r + 1 for r in range(RANK))
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), np.arange(start, start + RANK + 1)[:, None] * [1, 1])


def test_grouped_allgather():
    a, b = hvd.grouped_allgather([tf.fill([1], RANK), tf.fill([2, 2], float(RANK))])
    assert a.numpy().tolist() == list(range(SIZE))
    assert b.shape == (2 * SIZE, 2)


@pytest.mark.parametrize("mode", [0, 1], ids=["eager", "traced"])
def test_broadcast_and_its_gradient(mode):
    root = SIZE - 1
    fn = both_modes(lambda x: hvd.broadcast(x, root))[mode]
    np.testing.assert_array_equal(fn(tf.fill([2], RANK)).numpy(), [root, root])
    x = tf.Variable([1.0, 1.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(hvd.broadcast(x, root) * 3.0)
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [3.0 if RANK == root else 0.0] * 2)


def test_broadcast_variables_assigns_the_roots_values():
    a, b = tf.Variable([float(RANK)] * 3), tf.Variable(RANK)
    hvd.broadcast_variables([a, b], root_rank=0)
    assert a.numpy().tolist() == [0.0] * 3 and int(b.numpy()) == 0
    values = hvd.broadcast_([a], root_rank=SIZE - 1)
    np.testing.assert_array_equal(values[0].numpy(), a.numpy())


def test_alltoall_with_and_without_splits_and_its_gradient():
    # Rank r sends i+1 rows to rank i, each row holding the sender.
    splits = [i + 1 for i in range(SIZE)]
    x = tf.Variable(tf.fill([sum(splits), 2], float(RANK)))
    with tf.GradientTape() as tape:
        rows, received = hvd.alltoall(x, splits=splits)
        loss = tf.reduce_sum(rows * float(RANK + 1))
    assert received.numpy().tolist() == [RANK + 1] * SIZE
    np.testing.assert_array_equal(rows.numpy()[:, 0], np.repeat(np.arange(SIZE), RANK + 1))
    # Row block i went to rank i, whose loss weighed it by i + 1.
    np.testing.assert_allclose(tape.gradient(loss, x).numpy()[:, 0], np.repeat(np.arange(SIZE) + 1.0, splits))
    equal = hvd.alltoall(tf.range(SIZE) + 10 * RANK)
    assert equal.numpy().tolist() == [10 * r + RANK for r in range(SIZE)]


def test_reducescatter_shares_and_gradient():
    rows = SIZE + 1  # does not divide: the first rank gets one row more
    x = tf.Variable(tf.fill([rows, 2], float(RANK + 1)))
    with tf.GradientTape() as tape:
        mine = hvd.reducescatter(x, op=hvd.Sum)
        loss = tf.reduce_sum(mine)
    assert mine.shape[0] == (2 if RANK == 0 else 1)
    np.testing.assert_allclose(mine.numpy(), np.full((mine.shape[0], 2), EVERY.sum() + SIZE))
    # Horovod's rule: the gathered gradient, times the ranks for Sum.
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), np.full((rows, 2), float(SIZE)))
    averaged = hvd.grouped_reducescatter([tf.fill([SIZE], float(RANK))])[0]
    np.testing.assert_allclose(averaged.numpy(), [EVERY.mean()])
    with pytest.raises(ValueError, match="not a scalar"):
        hvd.reducescatter(tf.constant(1.0))


def test_distributed_gradient_tape_averages_and_keeps_local_sources():
    shared, local = tf.Variable([1.0]), tf.Variable([1.0])
    with tf.GradientTape() as tape:
        loss = (RANK + 1.0) * (shared[0] + local[0])
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(local)
    g_shared, g_local = tape.gradient(loss, [shared, local])
    np.testing.assert_allclose(g_shared.numpy(), [EVERY.mean() + 1])
    # A local source keeps this rank's gradient, divided by the ranks as in Horovod.
    np.testing.assert_allclose(g_local.numpy(), [(RANK + 1.0) / SIZE])


def test_distributed_gradient_tape_in_a_traced_training_step():
    w = tf.Variable(tf.zeros([2]))
    optimizer = tf.keras.optimizers.SGD(0.5)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((w - x) ** 2) / 2
        tape = hvd.DistributedGradientTape(tape, compression=hvd.Compression.fp16)
        optimizer.apply_gradients(zip(tape.gradient(loss, [w]), [w]))

    for _ in range(20):
        step(tf.fill([2], float(RANK)))
    # Every rank pulls w toward the mean of the ranks' targets.
    np.testing.assert_allclose(w.numpy(), [EVERY.mean()] * 2, atol=1e-2)


@pytest.mark.parametrize("mode", [0, 1], ids=["eager", "traced"])
def test_a_tapes_gradients_of_mixed_types_shapes_and_sparsity_each_come_back_averaged(mode):
    # Reduced as one flat tensor per type: every piece must land back in its own gradient.
    dense32 = [tf.Variable(tf.ones(shape)) for shape in ([3, 2], [2, 3], [1], [])]
    dense64 = tf.Variable(tf.ones([4], tf.float64))
    table = tf.Variable(tf.ones([5, 2]))  # its gradient through tf.gather is sparse
    wide = tf.Variable(tf.ones([4, 3]))  # sparse too: each rank gathers a row of its own, RANK + 1 times
    mine = tf.constant([RANK % 4] * (RANK + 1), tf.int64)

    def gradients():
        with tf.GradientTape() as tape:
            scale = RANK + 1.0
            loss = sum(scale * (i + 1.0) * tf.reduce_sum(v) for i, v in enumerate(dense32))
            loss += tf.cast(scale * 10.0 * tf.reduce_sum(dense64), tf.float32)
            loss += scale * tf.reduce_sum(tf.gather(table, [1, 3]))
            loss += scale * tf.reduce_sum(tf.gather(wide, mine))
        tape = hvd.DistributedGradientTape(tape, compression=hvd.Compression.fp16)
        return tape.gradient(loss, dense32 + [dense64, table, wide])

    grads = both_modes(gradients)[mode]()
    mean = EVERY.mean() + 1
    for i, (grad, variable) in enumerate(zip(grads[:4], dense32)):
        assert grad.dtype == tf.float32 and grad.shape == variable.shape
        np.testing.assert_allclose(grad.numpy(), np.full(variable.shape, (i + 1.0) * mean), rtol=1e-3)
    assert grads[4].dtype == tf.float64
    np.testing.assert_allclose(grads[4].numpy(), np.full([4], 10.0 * mean), rtol=1e-3)
    assert isinstance(grads[5], tf.IndexedSlices) and isinstance(grads[6], tf.IndexedSlices)
    rows = tf.convert_to_tensor(grads[5]).numpy()  # every rank's gathered rows, averaged
    np.testing.assert_allclose(rows, [[0, 0], [mean] * 2, [0, 0], [mean] * 2, [0, 0]], rtol=1e-3)
    expected = np.zeros([4, 3])
    for rank in range(SIZE):
        expected[rank % 4] += (rank + 1) * (rank + 1) / SIZE
    np.testing.assert_allclose(tf.convert_to_tensor(grads[6]).numpy(), expected, rtol=1e-3)


def test_legacy_optimizer_reduces_in_compute_gradients():
    w = tf.Variable([0.0])
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
    grads = opt.compute_gradients(lambda: (RANK + 1.0) * w[0], var_list=[w])
    np.testing.assert_allclose(grads[0][0].numpy(), [EVERY.mean() + 1])
    opt.apply_gradients(grads)
    np.testing.assert_allclose(w.numpy(), [-(EVERY.mean() + 1)])


def test_objects_and_rank_ops():
    assert hvd.broadcast_object({"from": RANK}, root_rank=SIZE - 1) == {"from": SIZE - 1}
    assert hvd.allgather_object(RANK * 10) == [r * 10 for r in range(SIZE)]
    assert hvd.broadcast_object_fn(root_rank=0)(lambda: RANK)() == 0  # functions travel (cloudpickle)
    assert int(hvd.rank_op()) == RANK and int(hvd.size_op()) == SIZE
    assert int(hvd.local_size_op()) == hvd.local_size() and int(hvd.local_rank_op()) == hvd.local_rank()


def test_ranks_that_disagree_get_a_named_error():
    with pytest.raises(tf.errors.FailedPreconditionError, match="shape differs"):
        hvd.allreduce(tf.ones([RANK + 1]), name="disagreeing.shapes")
    with pytest.raises(tf.errors.InvalidArgumentError, match="one entry per rank"):
        hvd.alltoall(tf.ones([3]), splits=[3] + [1] * SIZE)
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be integers"):  # even when they add up
        hvd.alltoall(tf.ones([SIZE]), splits=tf.ones([SIZE]))
    # The job goes on after an error.
    assert float(hvd.allreduce(tf.constant(1.0), op=hvd.Sum)) == SIZE


def test_a_v1_graphs_collectives_raise_tensorflows_error_types():
    # Horovod's own tests expect these types in their graph-mode halves (a tf.py_function alone
    # would report both as UnknownError).
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        disagreeing = hvd.allreduce(tf.ones([RANK + 1]), name="v1.disagreeing.shapes")
        wrong_splits = hvd.alltoall(tf.ones([SIZE]), splits=tf.ones([SIZE]))
        agreeing = hvd.allreduce(tf.ones([3]), op=hvd.Sum, name="v1.agreeing")
        assert agreeing.shape == (3,)
        with pytest.raises(tf.errors.FailedPreconditionError, match="shape differs"):
            session.run(disagreeing)
        with pytest.raises(tf.errors.InvalidArgumentError, match="must be integers"):
            session.run(wrong_splits)
        np.testing.assert_array_equal(session.run(agreeing), np.full(3, float(SIZE)))
        assert session.run(hvd.join()) in range(SIZE)


def test_keras_modules_are_horovods():
    import horovod_rs.keras as hvd_keras
    import horovod_rs.tensorflow.keras as hvd_tf_keras

    assert hvd_keras.DistributedOptimizer is hvd_tf_keras.DistributedOptimizer
    assert hvd_keras.callbacks.BroadcastGlobalVariablesCallback
    np.testing.assert_allclose(hvd_keras.allgather(np.array([RANK])).numpy(), np.arange(SIZE))
    assert float(hvd_keras.reducescatter(np.ones(SIZE), op=hvd.Sum)[0]) == SIZE


def test_join_returns_the_last_rank_to_join():
    assert int(hvd.join()) in range(SIZE)


def test_partial_distributed_optimizer_keeps_local_layers_gradients():
    import keras

    import horovod_rs.keras as hvd_keras

    local = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="ones"),
                              local])
    opt = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=[local])
    x = np.array([[RANK + 1.0]], dtype=np.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    shared, mine = model.trainable_weights
    grads = tape.gradient(loss, [shared, mine])
    opt.apply(grads, [shared, mine])
    # d loss/d w = x for both weights (1 x 1 x x); the shared one averages x over the ranks, the
    # local one keeps this rank's x divided by the ranks (Horovod's scale_local_gradients).
    np.testing.assert_allclose(shared.numpy(), [[1.0 - (EVERY.mean() + 1)]])
    np.testing.assert_allclose(mine.numpy(), [[1.0 - (RANK + 1.0) / SIZE]])


def test_sync_batch_normalization_normalizes_with_every_ranks_batch():
    # Rank r's batch is 2 rows of value r and r + 10: the statistics over all ranks' rows.
    x = np.array([[RANK], [RANK + 10.0]], dtype=np.float32)
    layer = hvd.SyncBatchNormalization(axis=1, epsilon=0.0, momentum=0.0)
    out = layer(x, training=True).numpy()
    every = np.concatenate([[r, r + 10.0] for r in range(SIZE)])
    np.testing.assert_allclose(out[:, 0], (x[:, 0] - every.mean()) / every.std(), rtol=1e-4)
    np.testing.assert_allclose(layer.moving_mean.numpy(), [every.mean()], rtol=1e-5)
    with pytest.raises(ValueError, match="fused=True"):
        hvd.SyncBatchNormalization(fused=True)


def test_an_elastic_jobs_traced_step_works_in_the_world_it_runs_in(monkeypatch):
    # An elastic job's reset may change the world after a step was traced (horovodrs's elastic
    # launcher, run_elastic). This step is traced while the world looks one rank larger, then runs
    # in this one: it must average its sparse gradients over, cut an allgather's gradient by, and
    # read size_op and rank_op from the world it runs in (Horovod's are ops, read when they run).
    from horovod_rs.common import basics
    monkeypatch.setattr(basics, "elastic_member", lambda: object())
    table, wider = tf.Variable(tf.zeros([4, 2])), tf.Variable(tf.zeros([5, 3]))
    rows = tf.Variable(tf.fill([RANK + 1, 2], 1.0))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, [1])) + tf.reduce_sum(tf.gather(wider, [RANK, 4]))
        table_grad, wider_grad = hvd.DistributedGradientTape(tape).gradient(loss, [table, wider])
        with tf.GradientTape() as tape:
            gathered = tf.reduce_sum(hvd.allgather(rows))
        rows_grad = tape.gradient(gathered, rows)
        single = hvd.allreduce(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([2]), tf.constant([4, 2])))
        return table_grad, wider_grad, rows_grad, single, hvd.size_op(), hvd.rank_op()

    with monkeypatch.context() as traced_in_a_larger_world:
        traced_in_a_larger_world.setattr(basics, "size", lambda: SIZE + 1)
        concrete = step.get_concrete_function()
    table_grad, wider_grad, rows_grad, single, size, rank = concrete()
    assert isinstance(table_grad, tf.IndexedSlices) and isinstance(single, tf.IndexedSlices)
    # Each rank's row 1 (or 2) of ones, averaged: SIZE rows of 1 / SIZE, which add up to ones.
    np.testing.assert_allclose(tf.convert_to_tensor(table_grad).numpy()[1], [1.0, 1.0], rtol=1e-6)
    # Rows of another width in the same exchange: each rank's own row, and row 4 from every rank.
    np.testing.assert_allclose(tf.convert_to_tensor(wider_grad).numpy(),
                               [[1.0 / SIZE] * 3] * SIZE + [[0.0] * 3] * (4 - SIZE) + [[1.0] * 3], rtol=1e-6)
    np.testing.assert_allclose(tf.convert_to_tensor(single).numpy()[2], [1.0, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(rows_grad.numpy(), np.ones([RANK + 1, 2]))
    assert (int(size), int(rank)) == (SIZE, RANK)


def test_elastic_run_restores_the_last_commit_and_joins_again_after_a_failed_collective():
    v = tf.Variable(float(RANK))  # rank 0's value wins at every sync
    state = hvd.elastic.TensorFlowState(variables=[v], epoch=0)
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(len(calls))
        state.variables[0].assign_add(1.0)
        state.epoch += 1
        state.commit()
        state.variables[0].assign_add(100.0)  # not committed: gone after the failure
        if len(calls) == 1:
            hvd.allreduce(tf.ones([RANK + 1]), name="elastic.disagreeing")  # fails on every rank
        return float(state.variables[0].numpy()), state.epoch

    # Attempt 1 commits 1.0 and fails; attempt 2 starts from it: 1 + 1 + 100, epoch 2.
    assert train(state) == (102.0, 2)
    assert calls == [0, 1] and hvd.is_initialized()
    assert float(hvd.allreduce(tf.constant(1.0), op=hvd.Sum)) == SIZE
