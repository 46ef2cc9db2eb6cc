"""Horovod's ``SyncBatchNormalization`` for Keras 3: batch statistics over every rank's batch."""

import keras
import tensorflow as tf

from horovod_rs.tensorflow.mpi_ops import Sum, _allreduce, size


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """``BatchNormalization`` whose training-time mean and variance are those of the batches of
    all ranks together (each rank's batch of the same size), as if one process saw them all.
    ``fused`` is Horovod's argument: only ``False`` is accepted (Keras 3 has no fused kernel)."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        super().__init__(**kwargs)

    def _moments(self, inputs, mask):
        mean, variance = super()._moments(inputs, mask)
        if size() == 1:
            return mean, variance
        # Var[X] = E[X^2] - E[X]^2, each expectation averaged over the ranks.
        stacked = tf.stack([mean, variance + tf.math.square(mean)])
        group_mean, group_mean_of_square = tf.unstack(_allreduce(stacked, op=Sum) / size())
        return group_mean, group_mean_of_square - tf.math.square(group_mean)
