"""Horovod's tf.keras callbacks (``horovod.tensorflow.keras.callbacks``); horovod_rs._keras.callbacks
has what they do."""

import tensorflow as tf

from horovod_rs._keras import callbacks as _impl

keras = tf.keras


class BroadcastGlobalVariablesCallback(_impl.BroadcastGlobalVariablesCallbackImpl, keras.callbacks.Callback):
    """Broadcasts the model's and optimizer's variables from rank ``root_rank`` when training
    starts, so that every rank starts alike (random initial weights, or restored from a checkpoint
    on one rank). ``local_variables`` (a variable or a list) are left alone."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__(root_rank, device, local_variables)


class MetricAverageCallback(_impl.MetricAverageCallbackImpl, keras.callbacks.Callback):
    """Averages each epoch's metrics over all ranks. List it before ReduceLROnPlateau, TensorBoard
    and other callbacks that read the metrics."""

    def __init__(self, device=""):
        super().__init__(device)


class LearningRateScheduleCallback(_impl.LearningRateScheduleCallbackImpl, keras.callbacks.Callback):
    """Sets the learning rate to ``initial_lr * multiplier`` from ``start_epoch`` to ``end_epoch``
    (exclusive); ``multiplier`` is a constant (applied as ``multiplier ** (epoch - start_epoch)``)
    or a function of the epoch, called at each epoch's start (``staircase``) or at every batch with
    a fractional epoch."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__(initial_lr, multiplier, start_epoch, end_epoch, staircase, momentum_correction,
                         steps_per_epoch)


class LearningRateWarmupCallback(_impl.LearningRateWarmupCallbackImpl, keras.callbacks.Callback):
    """Gradual warmup: the learning rate rises from ``initial_lr / size()`` to ``initial_lr`` over
    ``warmup_epochs`` epochs (Goyal et al., "Accurate, Large Minibatch SGD")."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__(initial_lr, warmup_epochs, momentum_correction, steps_per_epoch, verbose)


class BestModelCheckpoint(_impl.BestModelCheckpointImpl, keras.callbacks.ModelCheckpoint):
    """A ``ModelCheckpoint`` that keeps the best model by ``monitor``, whose ``filepath`` the
    Spark estimator sets."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto", save_freq="epoch"):
        super().__init__(monitor, verbose, save_weights_only, mode, save_freq)
