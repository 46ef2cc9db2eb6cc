"""Horovod's ``horovod.tensorflow.keras.elastic``: the Keras state and the callbacks that keep
it current during ``model.fit``."""

import tensorflow as tf

from horovod_rs.tensorflow.elastic import TensorFlowKerasState, run  # noqa: F401  (Horovod's API)


class KerasState(TensorFlowKerasState):
    """The state of a Keras model and its optimizer, plus ``kwargs`` as attributes."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=tf.keras.backend, **kwargs)


class CommitStateCallback(tf.keras.callbacks.Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at every epoch's end."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state, self.batches_per_commit = state, batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(tf.keras.callbacks.Callback):
    """Keeps ``state.batch`` at the last finished batch (0 after an epoch); with
    ``steps_per_epoch`` the first epoch after a reset runs only the batches left."""

    def __init__(self, state):
        super().__init__()
        self.state, self.steps_per_epoch = state, None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(tf.keras.callbacks.Callback):
    """Keeps ``state.epoch`` at the number of epochs done, counted across resets."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1
