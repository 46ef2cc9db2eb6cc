"""Horovod's tf.keras API on the horovod-rs engine: ``import horovod_rs.tensorflow.keras as hvd``.

``DistributedOptimizer`` averages the gradients of every step across ranks before the wrapped
optimizer applies them; inside ``model.fit``'s compiled step the exchange runs through
``tf.py_function``. ``callbacks`` has Horovod's callbacks (broadcast, metric average,
learning-rate schedule and warmup, best-model checkpoint).
"""

import numpy as np
import tensorflow as tf

from horovod_rs.common import arrays
from horovod_rs.common.process_sets import (  # noqa: F401  (re-exported: Horovod's API)
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
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


class Compression:
    """Horovod's gradient compression: ``fp16`` sends float gradients as float16 (half the bytes)
    and restores their type after the reduction."""

    class none:
        @staticmethod
        def compress(array):
            return array, None

        @staticmethod
        def decompress(array, ctx):
            return array

    class fp16:
        @staticmethod
        def compress(array):
            if array.dtype in (np.float32, np.float64):
                return array.astype(np.float16), array.dtype
            return array, None

        @staticmethod
        def decompress(array, ctx):
            return array if ctx is None else array.astype(ctx)


def allreduce(value, name=None, average=True, op=None, process_set=None):
    """The element-wise average (or ``op``) of ``value`` over all ranks (of ``process_set``), as a
    tf tensor."""
    op = op or (Average if average else Sum)
    return tf.convert_to_tensor(arrays.allreduce(np.asarray(value), op=op, name=name, process_set=process_set))


def broadcast(value, root_rank, name=None, process_set=None):
    """Rank ``root_rank``'s ``value`` on every rank (of ``process_set``), as a tf tensor."""
    return tf.convert_to_tensor(arrays.broadcast(np.asarray(value), root_rank, name=name, process_set=process_set))


def _average_gradients(grads, op, compression, process_set):
    def exchange(*tensors):
        pairs = [compression.compress(t.numpy()) for t in tensors]
        names = ["keras.gradient.%d" % i for i in range(len(pairs))]
        reduced = arrays.allreduce_many([p[0] for p in pairs], names, op=op, process_set=process_set)
        return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, pairs)]

    # An embedding's gradient is IndexedSlices (rows and their indices): averaged as a dense
    # tensor, as Horovod's sparse_as_dense=True does, which gives the same values.
    present = [(i, tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g)
               for i, g in enumerate(grads) if g is not None]
    reduced = tf.py_function(exchange, [g for _, g in present], Tout=[g.dtype for _, g in present])
    out = list(grads)
    for (i, g), r in zip(present, reduced):
        r.set_shape(g.shape)
        out[i] = r
    return out


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, process_set=None):
    """``optimizer``, with every step's gradients averaged over all ranks before they are applied
    (Horovod's signature; ``device_*`` and ``sparse_as_dense`` are accepted and have no effect on
    CPU). All gradients of a step are submitted together, so the engine fuses them.

    ``backward_passes_per_step`` > 1 applies the variables every that many steps, with the sum of
    the steps' averaged gradients (their mean with ``average_aggregated_gradients``), as Horovod
    does; it rides on Keras's ``gradient_accumulation_steps``. Unlike Horovod, the gradients are
    exchanged every step, not once per application (the result is the same: averaging is linear).
    """
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be at least 1, not %d" % backward_passes_per_step)
    if gradient_predivide_factor != 1.0:
        raise ValueError("gradient_predivide_factor other than 1 is not supported yet")
    base = optimizer.__class__
    config = optimizer.get_config()
    # Keras averages what it accumulates; Horovod sums unless asked to average.
    scale = 1.0
    if backward_passes_per_step > 1:
        if config.get("gradient_accumulation_steps"):
            raise ValueError("give backward_passes_per_step or the optimizer's gradient_accumulation_steps, not both")
        config["gradient_accumulation_steps"] = backward_passes_per_step
        scale = 1.0 if average_aggregated_gradients else float(backward_passes_per_step)

    class _Distributed(base):
        def apply(self, grads, trainable_variables=None):
            reduced = _average_gradients(list(grads), op, compression, process_set)
            if scale != 1.0:
                reduced = [None if g is None else g * scale for g in reduced]
            return super().apply(reduced, trainable_variables)

    _Distributed.__name__ = base.__name__
    return _Distributed.from_config(config)
