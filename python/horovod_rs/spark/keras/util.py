"""Keras models, optimizers, losses and metrics as bytes and back, the same on the driver and
in the ranks. Models travel in Keras's own ``.keras`` format; losses and metrics that are Keras
objects travel as their Keras config, functions and strings by value (cloudpickle), so a custom
metric defined in the user's script reaches the executors."""

import os
import tempfile

import cloudpickle

from horovod_rs.spark.common import frameworks


def keras():
    tf = frameworks.tensorflow()

    return tf.keras


def serialize_model(model):
    """The model as ``.keras`` file bytes."""
    with tempfile.TemporaryDirectory(prefix="horovod_rs-keras-") as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        with open(path, "rb") as f:
            return f.read()


def deserialize_model(data, custom_objects=None, compile=True):
    """A model from ``serialize_model``'s bytes (the user's own model: its Lambda layers load too)."""
    k = keras()
    with tempfile.TemporaryDirectory(prefix="horovod_rs-keras-") as tmp:
        path = os.path.join(tmp, "model.keras")
        with open(path, "wb") as f:
            f.write(data)
        with k.utils.custom_object_scope(custom_objects or {}):
            return k.models.load_model(path, custom_objects=custom_objects or {}, compile=compile,
                                       safe_mode=False)


def portable(value):
    """``value`` (a loss, a metric, or lists/dicts of them) in a form that pickles anywhere."""
    k = keras()
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    if isinstance(value, dict):
        return {key: portable(v) for key, v in value.items()}
    if isinstance(value, (k.losses.Loss, k.metrics.Metric)):
        return ("keras", k.saving.serialize_keras_object(value))
    return ("pickle", cloudpickle.dumps(value))


def restore(value, custom_objects=None):
    """The inverse of ``portable``."""
    if isinstance(value, list):
        return [restore(v, custom_objects) for v in value]
    if isinstance(value, dict):
        return {key: restore(v, custom_objects) for key, v in value.items()}
    kind, payload = value
    if kind == "keras":
        return keras().saving.deserialize_keras_object(payload, custom_objects=custom_objects)
    return cloudpickle.loads(payload)


def serialize_optimizer(optimizer):
    return keras().optimizers.serialize(optimizer)


def deserialize_optimizer(config, custom_objects=None):
    return keras().optimizers.deserialize(config, custom_objects=custom_objects)


def shapes(tensors):
    """Each tensor's shape as a list, -1 for unknown dimensions."""
    return [[-1 if d is None else int(d) for d in t.shape] for t in tensors]


def _serialize_param_value(param_name, param_val, serialize_model_fn, serialize_opt_fn):
    """A param's value as Horovod's Keras writer serializes it."""
    from horovod_rs.spark.common.params import serialize_param

    return serialize_param(param_name, param_val, serialize_model_fn, serialize_opt_fn)


def _custom_sparse_to_dense_fn():
    """Horovod's decoder of its custom sparse format, a 1-D tensor ``[n, i_1..i_n, v_1..v_n]``
    (``n`` non-zero values at indices ``i``), into a dense ``[1, dense_shape]`` tensor.
    The Arrow data path sends sparse vectors dense; this is for code that made the format itself."""
    tf = frameworks.tensorflow()

    def custom_sparse_to_dense(custom_sparse_vec, dense_shape):
        count = tf.cast(custom_sparse_vec[0], tf.int32)
        indices = tf.cast(custom_sparse_vec[1:1 + count], tf.int64)
        values = custom_sparse_vec[1 + count:1 + 2 * count]
        return tf.scatter_nd(tf.stack([tf.zeros_like(indices), indices], 1), values, [1, dense_shape])

    return custom_sparse_to_dense


class TFKerasUtil:
    """Horovod's Keras helpers under their ``TFKerasUtil`` names."""

    type = "tf_keras"

    @staticmethod
    def keras():
        return keras()

    @staticmethod
    def keras_fn():
        return keras

    @staticmethod
    def get_horovod():
        import horovod_rs.tensorflow.keras as hvd

        return hvd

    @staticmethod
    def horovod_fn():
        return TFKerasUtil.get_horovod

    serialize_model = staticmethod(serialize_model)
    deserialize_model = staticmethod(deserialize_model)
    serialize_optimizer = staticmethod(serialize_optimizer)
    deserialize_optimizer = staticmethod(deserialize_optimizer)

    @staticmethod
    def serialize_param_value(param_name, param_val):
        return _serialize_param_value(param_name, param_val, serialize_model, serialize_optimizer)

    @staticmethod
    def _reshape_fn(sample_weight_col, feature_columns, label_columns, metadata):
        """Horovod's per-row step of its Petastorm path: a dict of the row's columns (named tuple
        fields), custom sparse columns (``to_petastorm_fn``) made dense. The Arrow path shapes
        batches itself; this is for code that built the format."""
        import tensorflow as tf

        from horovod_rs.spark.common.constants import CUSTOM_SPARSE

        to_dense = _custom_sparse_to_dense_fn()

        def reshape(row):
            new_row = {sample_weight_col: getattr(row, sample_weight_col)} if sample_weight_col else {}
            for col in feature_columns + label_columns:
                value = getattr(row, col)
                if metadata[col]["intermediate_format"] == CUSTOM_SPARSE:
                    value = to_dense(tf.reshape(value, [metadata[col]["max_size"] * 2 + 1]), metadata[col]["shape"])
                new_row[col] = value
            return new_row

        return reshape

    @staticmethod
    def _prep_data_fn(has_sparse_col, sample_weight_col, feature_columns, label_columns, input_shapes,
                      label_shapes, output_names):
        """Horovod's Keras ``(inputs, labels[, sample weights by output])`` of a row: a dict when
        ``has_sparse_col`` (``_reshape_fn``'s rows), else a named tuple; each column reshaped to
        its shape, one label unwrapped from its tuple."""
        import tensorflow as tf

        def column(row, col):
            return row[col] if has_sparse_col else getattr(row, col)

        def prep(row):
            inputs = tuple(tf.reshape(column(row, col), shape) for col, shape in zip(feature_columns, input_shapes))
            labels = [tf.reshape(column(row, col), shape) for col, shape in zip(label_columns, label_shapes)]
            labels = tuple(labels) if len(labels) > 1 else labels[0]
            if not sample_weight_col:
                return inputs, labels
            weight = tf.reshape(column(row, sample_weight_col), [-1])
            return inputs, labels, {name: weight for name in output_names}

        return prep
