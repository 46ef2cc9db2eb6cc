"""What Horovod's Keras callbacks do, for whichever Keras they are mixed into (``tf.keras``,
``keras``; Keras 3 or tf_keras): horovod_rs.tensorflow.keras.callbacks and
horovod_rs.keras.callbacks make the public classes from these and their Keras's ``Callback``.

The learning-rate callbacks read and set the optimizer's learning rate (and momentum) through
``optimizer_value``/``set_optimizer_value``: Keras 3 keeps the rate in a variable and SGD's
momentum in a plain float, tf_keras keeps both in variables.
"""

import numpy as np

from horovod_rs.common import arrays, basics


def _key(variable):
    # Keras 3's variables have no ``ref()``; identity is what Horovod's ``ref()`` keys on.
    return id(variable)


def model_and_optimizer_variables(model):
    """The model's variables, then its optimizer's (a property in Keras 3, a method in tf_keras).
    A model given no input shape has no weights before its first batch (tf_keras raises when
    asked): none yet."""
    variables = list(getattr(model, "variables", None) or model.weights) if getattr(model, "built", True) else []
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        extra = optimizer.variables
        variables += list(extra() if callable(extra) else extra)
    return variables


def broadcast_values(variables, root_rank, name):
    """Assigns rank ``root_rank``'s values to ``variables`` on every rank: one broadcast per
    variable, all submitted before any is waited on."""
    values = arrays.broadcast_many([np.asarray(v.numpy()) for v in variables], root_rank,
                                   ["%s.%d" % (name, i) for i in range(len(variables))])
    for variable, value in zip(variables, values):
        variable.assign(value)


class BroadcastGlobalVariablesCallbackImpl:
    """Starts every rank from rank ``root_rank``'s model and optimizer variables.

    Unlike Horovod, which broadcasts after the first batch (so each rank's first gradients come
    from its own initial weights), the variables are broadcast before the first batch; variables
    that only the first step creates (tf_keras builds optimizer slots lazily) are broadcast after
    it, as Horovod does."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device  # accepted for Horovod's signature: variables live on the CPU here
        self.broadcast_done = False
        self._local_vars = set()
        self._broadcast_vars = set()
        if local_variables is None:
            local_variables = []
        elif _is_variable(local_variables):
            local_variables = [local_variables]
        elif not all(_is_variable(v) for v in local_variables):
            raise ValueError("All local variables must be of tf.Variable type.")
        for variable in local_variables:
            self.register_local_var(variable)

    def register_local_var(self, var):
        """Registers a variable as worker-local: it is not broadcast."""
        self._local_vars.add(_key(var))

    def _broadcast_new_variables(self):
        fresh = [v for v in model_and_optimizer_variables(self.model)
                 if _key(v) not in self._local_vars and _key(v) not in self._broadcast_vars]
        # Every rank must agree on whether there is anything to broadcast: the count decides.
        counts = arrays.allgather(np.array([len(fresh)], dtype=np.int64),
                                  name=basics.next_name("BroadcastGlobalVariablesCallback.count"))
        if len(set(counts.tolist())) != 1:
            raise ValueError("BroadcastGlobalVariablesCallback: the ranks have different numbers of variables "
                             "to broadcast (%s); every rank must build the same model and optimizer"
                             % counts.tolist())
        if fresh:
            broadcast_values(fresh, self.root_rank, basics.next_name("BroadcastGlobalVariablesCallback"))
            self._broadcast_vars.update(_key(v) for v in fresh)

    def on_train_begin(self, logs=None):
        self._broadcast_new_variables()

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        self._broadcast_new_variables()
        self.broadcast_done = True


def _is_variable(value):
    import tensorflow as tf

    if isinstance(value, tf.Variable):
        return True
    try:
        import keras

        return isinstance(value, keras.Variable)
    except (ImportError, AttributeError):
        return False


class MetricAverageCallbackImpl:
    """Replaces each epoch's metrics by their average over all ranks. List it before the callbacks
    that read the metrics (ReduceLROnPlateau, checkpoints, early stopping, TensorBoard)."""

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def _average_metrics_in_place(self, logs):
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and np.issubdtype(np.asarray(v).dtype, np.number))
        averaged = arrays.allreduce(np.array([float(logs[k]) for k in names], dtype=np.float64), op="average",
                                    name=basics.next_name("MetricAverageCallback"))
        for name, value in zip(names, averaged):
            logs[name] = float(value)

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


def optimizer_value(optimizer, attribute):
    value = getattr(optimizer, attribute)
    return float(value.numpy()) if hasattr(value, "numpy") else float(value)


def set_optimizer_value(optimizer, attribute, value):
    current = getattr(optimizer, attribute)
    if hasattr(current, "assign"):
        current.assign(value)
    elif attribute == "learning_rate" and not isinstance(current, (int, float)):
        raise ValueError("the optimizer's learning rate is a schedule (%s); the learning-rate callbacks set a "
                         "constant rate: give the optimizer a float learning rate" % type(current).__name__)
    else:
        setattr(optimizer, attribute, value)


def _adjustable_momentum(optimizer):
    # A float momentum (Keras 3's SGD) is baked into the compiled step: changing it would not
    # reach the training step, so only a momentum kept in a variable is corrected.
    return hasattr(getattr(optimizer, "momentum", None), "assign")


class LearningRateScheduleCallbackImpl:
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` between ``start_epoch`` and
    ``end_epoch`` (exclusive): at each epoch's first batch (``staircase``), or at every batch with
    a fractional epoch. A constant ``multiplier`` m means ``m ** (epoch - start_epoch)``.
    ``momentum_correction`` scales a momentum kept in a variable by new_lr / old_lr for the batch
    (Goyal et al.), as Horovod does."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.initial_lr = initial_lr
        self.restore_momentum = None
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)

    def _autodetect_steps_per_epoch(self):
        if self.params.get("steps"):
            return self.params["steps"]
        if self.params.get("samples") and self.params.get("batch_size"):
            return self.params["samples"] // self.params["batch_size"]
        raise ValueError("Could not autodetect the number of steps per epoch. Please specify the steps_per_epoch "
                         "parameter to the %s()." % self.__class__.__name__)

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = optimizer_value(optimizer, "learning_rate")
        new_lr = self.initial_lr * self.multiplier(epoch)
        set_optimizer_value(optimizer, "learning_rate", new_lr)
        if self.momentum_correction and _adjustable_momentum(optimizer) and old_lr:
            self.restore_momentum = optimizer_value(optimizer, "momentum")
            set_optimizer_value(optimizer, "momentum", self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum:
            set_optimizer_value(self.model.optimizer, "momentum", self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if self.current_epoch < self.start_epoch or (self.end_epoch is not None
                                                     and self.current_epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = optimizer_value(self.model.optimizer, "learning_rate")


class LearningRateWarmupCallbackImpl(LearningRateScheduleCallbackImpl):
    """Raises the learning rate from ``initial_lr / size()`` to ``initial_lr`` over the first
    ``warmup_epochs`` epochs, batch by batch (Goyal et al.'s gradual warmup)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Shifted by one batch so that each epoch ends on a round value, as in Horovod.
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / basics.size() * (epoch * (basics.size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and basics.rank() == 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g."
                  % (epoch + 1, optimizer_value(self.model.optimizer, "learning_rate")))


class BestModelCheckpointImpl:
    """A ModelCheckpoint with ``save_best_only=True`` and no file path yet (the Spark estimators
    fill ``filepath`` in). Keras 3 checks the path's suffix when the checkpoint is built, so it is
    built with a stand-in path, then cleared."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto", save_freq="epoch"):
        stand_in = "best.weights.h5" if save_weights_only else "best.keras"
        super().__init__(filepath=stand_in, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
        self.filepath = None
