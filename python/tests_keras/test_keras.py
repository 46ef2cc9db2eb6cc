"""horovod_rs.tensorflow.keras under the launcher: ``horovodrs -np 2 python -m pytest python/tests_keras``."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod_rs.tensorflow.keras as hvd  # noqa: E402
from horovod_rs.common import arrays  # noqa: E402

hvd.init()
N, R = hvd.size(), hvd.rank()
tf.config.threading.set_intra_op_parallelism_threads(1)


def data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(16 * N, 3)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]], dtype="float32") + 0.3).astype("float32")
    return x, y


def model(seed):
    tf.keras.utils.set_random_seed(seed)
    m = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="tanh"),
                             tf.keras.layers.Dense(1)])
    return m


def test_allreduce_and_broadcast_of_tf_tensors():
    assert np.allclose(hvd.allreduce(tf.constant([float(R), 1.0]), name="k.ar").numpy(), [(N - 1) / 2, 1.0])
    assert np.allclose(hvd.broadcast(tf.constant([float(R)]), root_rank=N - 1, name="k.bc").numpy(), [N - 1.0])


def test_distributed_fit_matches_one_process_on_the_full_batch():
    x, y = data()
    shard = slice(16 * R, 16 * (R + 1))
    # Different seeds per rank: the broadcast callback must make them start equal.
    net = model(seed=100 + R)
    net.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.1)), loss="mse")
    history = net.fit(x[shard], y[shard], batch_size=16, epochs=5, shuffle=False, verbose=0,
                      callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                 hvd.callbacks.MetricAverageCallback()])
    weights = np.concatenate([w.reshape(-1) for w in net.get_weights()])
    everyone = arrays.allgather(weights[None, :], name="k.weights")
    assert all(np.array_equal(everyone[r], everyone[0]) for r in range(N)), "ranks differ"

    single = model(seed=100)  # rank 0's initial weights
    single.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    single.fit(x, y, batch_size=16 * N, epochs=5, shuffle=False, verbose=0)
    expected = np.concatenate([w.reshape(-1) for w in single.get_weights()])
    assert np.allclose(weights, expected, atol=1e-5)
    losses = arrays.allgather(np.array([history.history["loss"][-1]]), name="k.loss")
    assert np.allclose(losses, losses[0]), "MetricAverageCallback leaves every rank the same loss"


def test_a_model_without_input_shape_is_broadcast_after_its_first_batch():
    # Horovod's Keras examples: a Sequential without an Input has no weights before its first
    # batch (tf_keras raises when they are read), so the callback broadcasts them then; and
    # compile gets Keras 2's experimental_run_tf_function, which Keras 3 takes too once a
    # DistributedOptimizer was made.
    x, y = data()
    tf.keras.utils.set_random_seed(300 + R)
    net = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="tanh"), tf.keras.layers.Dense(1)])
    net.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.1)), loss="mse",
                experimental_run_tf_function=False)
    net.fit(x[16 * R:16 * (R + 1)], y[16 * R:16 * (R + 1)], batch_size=8, epochs=2, verbose=0,
            callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    weights = np.concatenate([w.reshape(-1) for w in net.get_weights()])
    everyone = arrays.allgather(weights[None, :], name="k.unbuilt.weights")
    assert all(np.array_equal(everyone[r], everyone[0]) for r in range(N)), "ranks differ"


def test_embedding_gradients_are_averaged_like_dense_ones():
    # An Embedding's gradient reaches the optimizer as IndexedSlices, not a dense tensor.
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 5, size=(8 * N, 1))
    y = rng.normal(size=(8 * N, 1)).astype("float32")

    def embedding_model(seed):
        tf.keras.utils.set_random_seed(seed)
        return tf.keras.Sequential([tf.keras.Input((1,), dtype="int32"), tf.keras.layers.Embedding(5, 2),
                                    tf.keras.layers.Flatten(), tf.keras.layers.Dense(1)])

    net = embedding_model(seed=200 + R)
    net.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.1)), loss="mse")
    shard = slice(8 * R, 8 * (R + 1))
    net.fit(ids[shard], y[shard], batch_size=8, epochs=3, shuffle=False, verbose=0,
            callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    weights = np.concatenate([w.reshape(-1) for w in net.get_weights()])
    everyone = arrays.allgather(weights[None, :], name="k.embedding.weights")
    assert all(np.array_equal(everyone[r], everyone[0]) for r in range(N)), "ranks differ"
    single = embedding_model(seed=200)
    single.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    single.fit(ids, y, batch_size=8 * N, epochs=3, shuffle=False, verbose=0)
    assert np.allclose(weights, np.concatenate([w.reshape(-1) for w in single.get_weights()]), atol=1e-5)


def test_fp16_compression_keeps_ranks_identical_and_close_to_uncompressed():
    x, y = data()
    shard = slice(16 * R, 16 * (R + 1))
    finals = []
    for compression in (hvd.Compression.none, hvd.Compression.fp16):
        net = model(seed=5)
        net.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.1),
                                                       compression=compression), loss="mse")
        net.fit(x[shard], y[shard], batch_size=16, epochs=3, shuffle=False, verbose=0)
        finals.append(np.concatenate([w.reshape(-1) for w in net.get_weights()]))
    everyone = arrays.allgather(finals[1][None, :], name="k.fp16.weights")
    assert all(np.array_equal(everyone[r], everyone[0]) for r in range(N)), "ranks differ"
    assert np.allclose(finals[0], finals[1], atol=2e-3)
    assert not np.array_equal(finals[0], finals[1]), "fp16 should round the exchanged gradients"


def test_backward_passes_per_step_applies_the_aggregated_gradients():
    x, y = data()
    shard = slice(16 * R, 16 * (R + 1))
    single = model(seed=11)  # one update per epoch on the full batch, learning rate 0.1
    single.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    single.fit(x, y, batch_size=16 * N, epochs=3, shuffle=False, verbose=0)
    expected = np.concatenate([w.reshape(-1) for w in single.get_weights()])
    # Two micro-batches of 8 per update: their mean at 0.1, or Horovod's default sum at 0.05.
    for average, rate in ((True, 0.1), (False, 0.05)):
        net = model(seed=11)
        optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=rate), backward_passes_per_step=2,
                                             average_aggregated_gradients=average)
        net.compile(optimizer=optimizer, loss="mse")
        net.fit(x[shard], y[shard], batch_size=8, epochs=3, shuffle=False, verbose=0)
        weights = np.concatenate([w.reshape(-1) for w in net.get_weights()])
        assert np.allclose(weights, expected, atol=1e-5), "average_aggregated_gradients=%s" % average


def test_learning_rate_warmup_reaches_the_initial_rate():
    x, y = data()
    net = model(seed=1)
    net.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.05)), loss="mse")
    net.fit(x[:16], y[:16], batch_size=8, epochs=2, verbose=0,
            callbacks=[hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.05, warmup_epochs=1)])
    assert np.isclose(float(net.optimizer.learning_rate.numpy()), 0.05)


def test_process_sets_reduce_among_their_ranks():
    evens, odds = hvd.add_process_set(list(range(0, N, 2))), hvd.add_process_set(list(range(1, N, 2)))
    mine = evens if R % 2 == 0 else odds
    total = hvd.allreduce(tf.constant([float(R)]), op=hvd.Sum, name="k.ps.sum", process_set=mine).numpy()
    assert total.tolist() == [float(sum(mine.ranks))]
    root = mine.ranks[-1]
    assert hvd.broadcast(tf.constant([R]), root_rank=root, name="k.ps.bc", process_set=mine).numpy().tolist() == [root]
    assert hvd.remove_process_set(evens) and hvd.remove_process_set(odds)


def test_broadcast_callback_leaves_local_variables_alone():
    root = N - 1
    tf.keras.utils.set_random_seed(3)
    constant = tf.keras.initializers.Constant(float(R))
    net = tf.keras.Sequential([tf.keras.Input((3,)),
                               tf.keras.layers.Dense(2, kernel_initializer=constant, bias_initializer=constant,
                                                     trainable=False),
                               tf.keras.layers.Dense(1, kernel_initializer=constant, bias_initializer=constant,
                                                     trainable=False)])
    net.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1)), loss="mse")
    local = net.layers[0].variables
    x, y = data()
    net.fit(x[:4], y[:4], epochs=1, verbose=0,
            callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(root, local_variables=local)])
    for layer, expected in ((net.layers[0], R), (net.layers[1], root)):
        for v in layer.variables:
            assert np.all(v.numpy() == expected), (v.path, v.numpy())
    try:
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[np.zeros(2)])
    except ValueError as e:
        assert "tf.Variable" in str(e)
    else:
        raise AssertionError("a non-variable local variable is refused")


def test_learning_rate_callbacks_follow_the_schedule():
    x, y = data()
    net = model(seed=2)
    net.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=1.0)), loss="mse")
    lr = 0.2
    history = net.fit(x[:16], y[:16], batch_size=4, epochs=6, verbose=0, callbacks=[
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=2),
        hvd.callbacks.LearningRateScheduleCallback(initial_lr=lr, multiplier=0.5, start_epoch=2, end_epoch=4),
        hvd.callbacks.LearningRateScheduleCallback(initial_lr=lr, multiplier=lambda epoch: epoch / 10, start_epoch=4,
                                                   staircase=False)])
    # Warmup: each epoch ends on lr/N * (1 + (N-1) * (epoch+1)/2); then 0.5 ** (epoch - 2); then
    # the last batch's fractional epoch (3 of 4 batches) over 10.
    expected = [lr / N * (1 + (N - 1) * 0.5), lr, lr, lr * 0.5, lr * 4.75 / 10, lr * 5.75 / 10]
    assert np.allclose(history.history["lr"], expected), history.history["lr"]


def test_best_model_checkpoint_saves_the_best_model_where_told(tmp_path):
    checkpoint = hvd.callbacks.BestModelCheckpoint(monitor="loss")
    assert checkpoint.filepath is None and checkpoint.save_best_only
    checkpoint.filepath = str(tmp_path / ("best-%d.keras" % R))
    x, y = data()
    net = model(seed=4)
    net.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    history = net.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[checkpoint])
    losses = history.history["loss"]
    assert losses == sorted(losses, reverse=True), "the last epoch is the best here"
    saved = tf.keras.models.load_model(checkpoint.filepath)
    assert all(np.array_equal(a, b) for a, b in zip(saved.get_weights(), net.get_weights()))
    weights_only = hvd.callbacks.BestModelCheckpoint(save_weights_only=True, mode="min", save_freq="epoch")
    assert weights_only.filepath is None and weights_only.save_weights_only


class CustomSGD(tf.keras.optimizers.SGD):
    """A custom optimizer class, for ``load_model``'s ``custom_optimizers``."""


def _optimizer_state(optimizer):
    variables = optimizer.variables() if callable(optimizer.variables) else optimizer.variables
    return [v.numpy() for v in variables]


def test_load_model_wraps_the_saved_optimizer_and_keeps_its_state(tmp_path):
    x, y = data()
    for optimizer, custom in ((tf.keras.optimizers.RMSprop(learning_rate=0.01), None),
                              (CustomSGD(learning_rate=0.05, momentum=0.9), [CustomSGD])):
        m = model(3)
        m.compile(optimizer=hvd.DistributedOptimizer(optimizer), loss="mse")
        m.fit(x, y, batch_size=8, epochs=1, verbose=0)
        path = str(tmp_path / ("saved-%s-%d.keras" % (type(optimizer).__name__, R)))
        m.save(path)

        loaded = hvd.load_model(path, custom_optimizers=custom)
        wrapped = loaded.optimizer
        assert type(wrapped).__name__ == type(optimizer).__name__
        assert isinstance(wrapped, type(optimizer)) and hasattr(wrapped, "register_local_var")  # Distributed
        saved, restored = _optimizer_state(m.optimizer), _optimizer_state(wrapped)
        assert len(saved) == len(restored) > 2  # the slots, not only the step and the rate
        for a, b in zip(saved, restored):
            np.testing.assert_array_equal(a, b)
        # The loaded model trains on with its gradients averaged over the ranks: one step from equal
        # weights on each rank's own rows leaves every rank's weights equal.
        loaded.fit(x[16 * R:16 * (R + 1)], y[16 * R:16 * (R + 1)], batch_size=16, epochs=1, verbose=0,
                   shuffle=False)
        weights = np.concatenate([w.ravel() for w in loaded.get_weights()])
        np.testing.assert_allclose(hvd.allgather(weights[None]).numpy(), np.repeat(weights[None], N, 0),
                                   rtol=1e-6)
