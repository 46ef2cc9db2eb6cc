"""Horovod's TensorFlow helpers (``horovod.tensorflow.functions``): variables and Python objects
sent between ranks."""

import tensorflow as tf

from horovod_rs.common import arrays
from horovod_rs.tensorflow.mpi_ops import broadcast_, global_process_set


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns rank ``root_rank``'s values to ``variables`` on every rank (of ``process_set``), all
    in one group. ``inplace`` is accepted for Horovod's signature: the assignment is in place
    either way. Returns the assignments as one operation (None when run eagerly)."""
    variables = list(variables)
    if not variables:
        return tf.no_op() if not tf.executing_eagerly() else None
    values = broadcast_(variables, root_rank, process_set=process_set)
    return None if tf.executing_eagerly() else tf.group(*values)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """``obj`` from ``root_rank`` on every rank (serialized with cloudpickle when installed, so
    functions travel too)."""
    return arrays.broadcast_object(obj, root_rank, name, process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument from ``root_rank`` (Horovod's TF1 form of
    ``broadcast_object``); each call uses the next name."""
    name = name or "broadcast_object_fn"
    calls = [0]

    def broadcast_object_from_root(obj):
        calls[0] += 1
        return arrays.broadcast_object(obj, root_rank, "%s.%d" % (name, calls[0]), process_set)

    return broadcast_object_from_root


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's ``obj``, in rank order."""
    return arrays.allgather_object(obj, name, process_set)
