"""What a KerasEstimator rank feeds ``model.fit``, without Spark: rows held in memory gathered by
tf.data, spilled rows through the stream's generator, both batching and shaping alike
(horovod_rs.spark.keras.remote._keras_data)."""

import types

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from horovod_rs.spark.common.remote import InMemoryRows  # noqa: E402
from horovod_rs.spark.keras import remote  # noqa: E402

from test_data import load  # noqa: E402

SPEC = types.SimpleNamespace(feature_cols=["v"], label_cols=["id"], sample_weight_col=None)


def model(input_shape=(3,)):
    inputs = tf.keras.Input(shape=input_shape)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1)(tf.keras.layers.Flatten()(inputs)))


def take(data, batches):
    """``batches`` (x, y) pairs of the Keras data as numpy."""
    iterator = iter(data)
    return [tuple(np.asarray(part) for part in next(iterator)) for _ in range(batches)]


@pytest.mark.parametrize("spill", [False, True])
def test_a_pass_gives_every_row_once_in_the_models_shapes(spill, tmp_path):
    data = load(250, budget=1000 if spill else 1 << 30, tmp_path=tmp_path)
    rows = InMemoryRows.of(data, 50, True, 7)
    assert (rows is None) == spill
    keras_data = remote._keras_data(rows, lambda: data.stream(50, True, 7), model(), SPEC)
    # Either way a pipeline with no autotuning thread for Keras to wait for when it drops an iterator.
    assert keras_data.options().autotune.enabled is False
    batches = take(keras_data, 10)  # two passes
    for x, y in batches:
        assert x.shape == (50, 3) and y.shape == (50, 1)  # the label reshaped to the model's output
        assert (x[:, 0] == y[:, 0]).all()  # rows stay whole
    ids = np.concatenate([y[:, 0] for _, y in batches]).astype(np.int64)
    assert sorted(ids[:250].tolist()) == list(range(250)) and sorted(ids[250:].tolist()) == list(range(250))
    assert ids[:250].tolist() != list(range(250))  # shuffled
    assert ids[:250].tolist() != ids[250:].tolist()  # reshuffled every pass
    # Keras makes an iterator per epoch of validation: a dropped one leaves the rows flowing.
    assert [x.shape for x, _ in take(keras_data, 2)] == [(50, 3)] * 2
    data.close()


def test_in_order_batches_straddle_passes():
    data = load(120)
    keras_data = remote._keras_data(InMemoryRows.of(data, 50, False, None), None, model(), SPEC)
    ids = np.concatenate([y[:, 0] for _, y in take(keras_data, 5)]).astype(np.int64)
    assert ids.tolist() == list(range(120)) + list(range(120)) + list(range(10))


def test_values_are_reshaped_for_the_model_and_a_mismatch_names_the_column():
    data = load(100)
    rows = InMemoryRows.of(data, 10, False, None)
    x, _ = take(remote._keras_data(rows, None, model(input_shape=(3, 1)), SPEC), 1)[0]
    assert x.shape == (10, 3, 1)
    with pytest.raises(ValueError, match="column 'v' has 3 values per row .* shape \\(4,\\)"):
        remote._keras_data(rows, None, model(input_shape=(4,)), SPEC)


def test_sample_weights_come_as_the_third_element():
    arrays = {"v": np.arange(30, dtype=np.float32).reshape(10, 3), "id": np.arange(10, dtype=np.int64),
              "w": np.linspace(0, 1, 10)}
    spec = types.SimpleNamespace(feature_cols=["v"], label_cols=["id"], sample_weight_col="w")
    x, y, weights = take(remote._keras_data(InMemoryRows(arrays, 5, False, None), None, model(), spec), 1)[0]
    assert x.shape == (5, 3) and y.shape == (5, 1) and weights.tolist() == arrays["w"][:5].tolist()
