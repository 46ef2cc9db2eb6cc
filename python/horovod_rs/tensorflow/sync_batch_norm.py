"""Horovod's ``SyncBatchNormalization``: batch statistics over every rank's batch."""

import tensorflow as tf

from horovod_rs.tensorflow.mpi_ops import Sum, _allreduce, size

# tf.keras: Keras 3, or Keras 2 (tf_keras) with TF_USE_LEGACY_KERAS=1; the layer follows it.
_KERAS_2 = not str(getattr(tf.keras, "__version__", None) or "").startswith("3.")


class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """``BatchNormalization`` whose training-time mean and variance are those of the batches of
    all ranks together (each rank's batch of the same size), as if one process saw them all.
    ``fused`` is Horovod's argument: only ``False`` is accepted (the fused kernel computes the
    statistics where they cannot be synchronized). ``super`` is spelled out: autograph converts
    ``_moments`` inside a traced model."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if _KERAS_2:
            kwargs["fused"] = False
        super(SyncBatchNormalization, self).__init__(**kwargs)

    def _moments(self, *args, **kwargs):
        # Keras 2 passes (inputs, reduction_axes, keep_dims), Keras 3 (inputs, mask).
        mean, variance = super(SyncBatchNormalization, self)._moments(*args, **kwargs)
        if size() == 1:
            return mean, variance
        # Var[X] = E[X^2] - E[X]^2, each expectation averaged over the ranks.
        stacked = tf.stack([mean, variance + tf.math.square(mean)])
        group_mean, group_mean_of_square = tf.unstack(_allreduce(stacked, op=Sum) / size())
        return group_mean, group_mean_of_square - tf.math.square(group_mean)
