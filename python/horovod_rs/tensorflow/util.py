"""Helpers of ``horovod.tensorflow.util`` that scripts and Horovod's tests import."""

import tensorflow as tf


def _executing_eagerly():
    """Whether TensorFlow runs eagerly here (not while tracing a tf.function or in a v1 graph)."""
    return tf.executing_eagerly()


def vars_to_refs(vars):
    """Variables as hashable references (a list of lists stays one)."""
    if isinstance(vars, list):
        return tuple(vars_to_refs(v) for v in vars)
    return vars.ref()


def refs_to_vars(refs):
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
