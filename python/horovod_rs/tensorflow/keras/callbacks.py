"""Horovod's tf.keras callbacks."""

import numpy as np
import tensorflow as tf

from horovod_rs.common import arrays, basics


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Starts every rank from rank ``root_rank``'s weights."""

    def __init__(self, root_rank=0):
        super().__init__()
        self.root_rank = root_rank

    def on_train_begin(self, logs=None):
        for i, v in enumerate(self.model.weights):
            v.assign(arrays.broadcast(np.asarray(v.numpy()), self.root_rank, name="keras.broadcast.%d" % i))


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """Replaces each epoch's metrics by their average over all ranks (runs before the callbacks
    that read them, such as checkpoints and early stopping, if listed first)."""

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if np.isscalar(v) or np.ndim(v) == 0)
        values = arrays.allreduce(np.array([float(logs[k]) for k in names]), op="average",
                                  name="keras.metrics.%d" % epoch)
        for k, v in zip(names, values):
            logs[k] = float(v)


class LearningRateWarmupCallback(tf.keras.callbacks.Callback):
    """Raises the learning rate from ``initial_lr / size()`` to ``initial_lr`` over the first
    ``warmup_epochs`` epochs (Goyal et al.'s warmup, as Horovod's callback)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = initial_lr
        self.warmup_epochs = warmup_epochs
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self._epoch >= self.warmup_epochs:
            return
        steps = self.steps_per_epoch or self.params.get("steps") or 1
        progress = (self._epoch + batch / steps) / self.warmup_epochs
        n = basics.size()
        self.model.optimizer.learning_rate.assign(self.initial_lr / n * (progress * (n - 1) + 1))

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.warmup_epochs - 1:
            self.model.optimizer.learning_rate.assign(self.initial_lr)
            if self.verbose and basics.rank() == 0:
                print("Epoch %d: finished gradual learning rate warmup to %g." % (epoch + 1, self.initial_lr))
