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
