"""Helpers of ``horovod.tensorflow.util`` that scripts and Horovod's tests import."""

import tensorflow as tf


def _executing_eagerly():
    """Whether TensorFlow runs eagerly here (not while tracing a tf.function or in a v1 graph)."""
    return tf.executing_eagerly()

