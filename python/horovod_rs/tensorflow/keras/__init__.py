"""Horovod's tf.keras API on the horovod-rs engine: ``import horovod_rs.tensorflow.keras as hvd``.

``DistributedOptimizer`` averages the gradients of every step across ranks before the wrapped
optimizer applies them; inside ``model.fit``'s compiled step the exchange runs through
``tf.py_function``. ``callbacks`` has Horovod's BroadcastGlobalVariablesCallback,
MetricAverageCallback and LearningRateWarmupCallback.
"""

import numpy as np
import tensorflow as tf

from horovod_rs.common import arrays
from horovod_rs.common.basics import (  # noqa: F401  (re-exported: Horovod's API)
    init,
    is_initialized,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)
from horovod_rs.tensorflow.keras import callbacks  # noqa: F401

Average = "average"
Sum = "sum"


def allreduce(value, name=None, average=True, op=None):
    """The element-wise average (or ``op``) of ``value`` over all ranks, as a tf tensor."""
    op = op or (Average if average else Sum)
    return tf.convert_to_tensor(arrays.allreduce(np.asarray(value), op=op, name=name))


def broadcast(value, root_rank, name=None):
    """Rank ``root_rank``'s ``value`` on every rank, as a tf tensor."""
    return tf.convert_to_tensor(arrays.broadcast(np.asarray(value), root_rank, name=name))


def _average_gradients(grads, op):
    def exchange(*tensors):
        return [arrays.allreduce(t.numpy(), op=op, name="keras.gradient.%d" % i) for i, t in enumerate(tensors)]

    present = [(i, g) for i, g in enumerate(grads) if g is not None]
    reduced = tf.py_function(exchange, [g for _, g in present], Tout=[g.dtype for _, g in present])
    out = list(grads)
    for (i, g), r in zip(present, reduced):
        r.set_shape(g.shape)
        out[i] = r
    return out


def DistributedOptimizer(optimizer, name=None, op=Average, backward_passes_per_step=1):
    """``optimizer``, with every step's gradients averaged over all ranks before they are applied."""
    if backward_passes_per_step != 1:
        raise ValueError("backward_passes_per_step other than 1 is not supported yet")
    base = optimizer.__class__

    class _Distributed(base):
        def apply(self, grads, trainable_variables=None):
            return super().apply(_average_gradients(list(grads), op), trainable_variables)

    _Distributed.__name__ = base.__name__
    return _Distributed.from_config(optimizer.get_config())
