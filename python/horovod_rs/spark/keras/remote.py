"""What each rank of a KerasEstimator fit runs: join the job (done by the task), load its share of
the rows, build and compile the model with horovod_rs's DistributedOptimizer, and ``model.fit`` on
endless batch streams with the same steps per epoch on every rank. Rank 0 checkpoints every epoch
to the store (and TensorBoard logs), and returns the history and the final model.

As Horovod's: the learning rate is multiplied by the number of ranks for training and divided
back in the returned model; the initial weights are rank 0's (broadcast); metrics are averaged
over the ranks after every epoch; the returned model is the checkpoint callback's (the best one
with ``BestModelCheckpoint``), else the last epoch's.
"""

import dataclasses
import io
import itertools
import os
import typing

import cloudpickle
import numpy as np

from horovod_rs.spark.common import frameworks
from horovod_rs.spark.common import remote as common
from horovod_rs.spark.keras import util


def make_trainer(settings):
    """``train(rank, batches)`` for the ranks of a fit with ``settings`` (``KerasSettings``)."""
    return common.trainer(Keras(), settings)


@dataclasses.dataclass
class KerasSettings(common.TrainingSettings):
    """A KerasEstimator fit's settings: the shared ones and Keras's (serialized on the driver)."""

    model: bytes
    optimizer: typing.Any
    custom_objects: bytes
    loss: typing.Any
    loss_weights: typing.Optional[list]
    metrics: typing.Any
    callbacks: bytes
    checkpoint_callback: typing.Optional[bytes]
    gradient_compression: typing.Optional[bytes]
    backward_passes_per_step: int
    floatx: str


class Keras(common.Framework):
    """Keras on the rank runner: Horovod's steps (``ceil``), ``model.fit`` with horovod_rs's
    DistributedOptimizer and callbacks."""

    train_rounding = val_rounding = "ceil"
    checkpoint_extension = ".npz"

    def start(self, s, rank):
        tf = frameworks.tensorflow()

        import horovod_rs.tensorflow.keras as hvd

        k = tf.keras
        _limit_threads(tf)
        if s.floatx:
            k.backend.set_floatx(s.floatx)
        _pin_gpu(tf, s.use_gpu, s.verbose if rank == 0 else 0)
        if s.random_seed is not None:
            k.utils.set_random_seed(s.random_seed)
        custom_objects = common.received("custom_objects", lambda: cloudpickle.loads(s.custom_objects))
        user = _user_objects(s, custom_objects)
        model = common.received("the model", lambda: util.deserialize_model(s.model, custom_objects, compile=False))
        _check_shapes(model, s.data)
        return hvd, (hvd, k, model, custom_objects, user)

    def fit(self, run, started):
        hvd, k, model, custom_objects, user = started
        return _fit(run, hvd, k, model, custom_objects, user)


def _user_objects(s, custom_objects):
    """The user's losses, metrics, callbacks and compression, unpickled (naming any that fail)."""
    load = common.received
    return {
        "loss": load("loss", lambda: util.restore(s.loss, custom_objects)),
        "metrics": load("metrics", lambda: util.restore(s.metrics, custom_objects)),
        "callbacks": load("callbacks", lambda: cloudpickle.loads(s.callbacks)),
        "checkpoint_callback": load("checkpoint_callback", lambda: cloudpickle.loads(s.checkpoint_callback))
        if s.checkpoint_callback else None,
        "compression": load("gradient_compression", lambda: cloudpickle.loads(s.gradient_compression))
        if s.gradient_compression else None,
    }


def _fit(run, hvd, k, model, custom_objects, user):
    s, rank, size, verbose = run.settings, run.rank, run.size, run.verbose
    spec = s.data
    optimizer = util.deserialize_optimizer(s.optimizer, custom_objects)
    base_lr = _learning_rate(optimizer)
    if base_lr is not None:
        optimizer.learning_rate = base_lr * size
    distributed_args = {"backward_passes_per_step": s.backward_passes_per_step}
    if user["compression"] is not None:
        distributed_args["compression"] = user["compression"]
    distributed = hvd.DistributedOptimizer(optimizer, **distributed_args)
    model.compile(optimizer=distributed, loss=user["loss"], loss_weights=s.loss_weights, metrics=user["metrics"])

    epochs_done, history = 0, {}
    if s.resume is not None:
        state, data = s.resume
        epochs_done, history = state["epochs_done"], state["history"]
        _restore(model, distributed, data)
        if base_lr is not None:  # the checkpoint holds the run's unscaled rate
            distributed.learning_rate = state["extra"]["learning_rate"] * size

    train_stream = _keras_data(run.train_rows(), run.train_stream, model, spec)
    val_stream = _keras_data(run.val_rows(), run.val_stream, model, spec) if run.val_steps else None

    user_callbacks = user["callbacks"]
    for callback in user_callbacks:
        if hasattr(callback, "initial_lr") and type(callback).__module__.startswith("horovod_rs"):
            callback.initial_lr = callback.initial_lr * size if base_lr is None else base_lr * size
    callbacks = [_Laps(run.timer), hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=0),
                 hvd.callbacks.MetricAverageCallback()]
    callbacks += user_callbacks
    with run.run_dir() as run_dir:
        checkpoint_file = None
        writer = run.writer(run_dir)
        if writer is not None:
            user_checkpoint = user["checkpoint_callback"]
            if user_checkpoint is not None:
                suffix = ".weights.h5" if getattr(user_checkpoint, "save_weights_only", False) else ".keras"
                checkpoint_file = os.path.join(run_dir, "checkpoint" + suffix)
                user_checkpoint.filepath = checkpoint_file
                callbacks.append(user_checkpoint)
            if run.saving:
                _log_to_tensorboard(k, callbacks, run.logs_dir(run_dir), verbose)
            callbacks.append(_RunCheckpoint(writer, distributed, history, base_lr))
        callbacks.append(_Events(run.events, run.timer))  # it reports the epoch's averaged logs
        callbacks.append(_Regrow(run))  # last: the epoch is checkpointed and reported
        if verbose:
            print(run.describe())
        run.events.start(s.epochs, epochs_done, run.steps, run.val_steps)
        fitted = model.fit(train_stream, steps_per_epoch=run.steps, epochs=s.epochs, initial_epoch=epochs_done,
                           validation_data=val_stream, validation_steps=run.val_steps or None, callbacks=callbacks,
                           verbose=verbose, shuffle=False)  # the streams shuffle
        if rank != 0 or run.regrown:
            return None
        # _RunCheckpoint recorded each epoch's (averaged) logs into ``history``, after earlier runs'.
        del fitted
        if checkpoint_file is not None and os.path.exists(checkpoint_file):
            model.load_weights(checkpoint_file)
        return {"history": history, "model": _final_model_bytes(model, distributed, base_lr, s, custom_objects),
                "size": size}


def _log_to_tensorboard(k, callbacks, logs_dir, verbose):
    """Rank 0's TensorBoard events go to the run's logs (the user's TensorBoard callback, or a new
    one); without the tensorboard package there are none."""
    import importlib.util

    boards = [c for c in callbacks if isinstance(c, k.callbacks.TensorBoard)]
    if boards:
        boards[0].log_dir = logs_dir
    elif importlib.util.find_spec("tensorboard") is not None:
        callbacks.append(k.callbacks.TensorBoard(logs_dir))
    elif verbose:
        print("horovod_rs: no TensorBoard logs in the store (pip install tensorboard to have them)")


class _RunCheckpoint:
    """Rank 0, after every epoch: weights and optimizer state to the run's next checkpoint slot,
    then the run's state (epochs done, history) to the store."""

    def __new__(cls, *args, **kwargs):
        tf = frameworks.tensorflow()

        class RunCheckpoint(tf.keras.callbacks.Callback):
            def __init__(self, writer, optimizer, history, base_lr):
                super().__init__()
                self.writer, self.optimizer, self.history, self.base_lr = writer, optimizer, history, base_lr

            def on_epoch_end(self, epoch, logs=None):
                for key, value in (logs or {}).items():
                    if np.ndim(value) == 0:
                        self.history.setdefault(key, []).append(float(value))
                arrays = {"w%d" % i: np.asarray(w) for i, w in enumerate(self.model.get_weights())}
                arrays.update({"o%d" % i: v.numpy() for i, v in enumerate(self.optimizer.variables)})
                np.savez(self.writer.next_path(), **arrays)
                self.writer.commit(epoch + 1, self.history, {"learning_rate": self.base_lr})

        return RunCheckpoint(*args, **kwargs)


class _Regrow:
    """Every rank's last callback: stops the fit after an epoch when the driver asks it to run
    again on more ranks (``RankFit.regrow_after``)."""

    def __new__(cls, *args, **kwargs):
        tf = frameworks.tensorflow()

        class Regrow(tf.keras.callbacks.Callback):
            def __init__(self, run):
                super().__init__()
                self.run = run

            def on_epoch_end(self, epoch, logs=None):
                if self.run.regrow_after(epoch + 1):
                    self.model.stop_training = True

        return Regrow(*args, **kwargs)


class _Laps:
    """The first callback: the fit's phases up to the end of each epoch's steps (``RankTimer``)."""

    def __new__(cls, *args, **kwargs):
        tf = frameworks.tensorflow()

        class Laps(tf.keras.callbacks.Callback):
            def __init__(self, timer):
                super().__init__()
                self.timer = timer

            def on_train_begin(self, logs=None):
                self.timer.lap("setup")

            def on_test_begin(self, logs=None):
                self.timer.lap("train")

            def on_test_end(self, logs=None):
                self.timer.lap("validation")

            def on_epoch_end(self, epoch, logs=None):
                self.timer.lap("train")

        return Laps(*args, **kwargs)


class _Events:
    """The last callback: rank 0's progress events (each epoch's logs, running logs while it
    trains); the time since ``_Laps`` ended the epoch's steps was the epoch's ``checkpoint``."""

    def __new__(cls, *args, **kwargs):
        tf = frameworks.tensorflow()

        class Events(tf.keras.callbacks.Callback):
            def __init__(self, events, timer):
                super().__init__()
                self._supports_tf_logs = True  # logs converted only when an event goes out
                self.events, self.epoch, self.timer = events, 0, timer

            def on_epoch_begin(self, epoch, logs=None):
                self.epoch = epoch

            def on_train_batch_end(self, batch, logs=None):
                self.events.step(self.epoch, batch + 1, lambda: logs)

            def on_epoch_end(self, epoch, logs=None):
                self.timer.lap("checkpoint")
                self.events.epoch(epoch, logs)

        return Events(*args, **kwargs)


def _restore(model, optimizer, data):
    """Weights and optimizer state from a ``_RunCheckpoint`` file."""
    arrays = np.load(io.BytesIO(data), allow_pickle=False)
    weights = [arrays["w%d" % i] for i in range(len(model.weights))]
    model.set_weights(weights)
    optimizer.build(model.trainable_variables)
    for i, variable in enumerate(optimizer.variables):
        if "o%d" % i in arrays:
            variable.assign(arrays["o%d" % i])


def _final_model_bytes(model, distributed, base_lr, s, custom_objects):
    """The trained model compiled with the user's own optimizer class (not the distributed wrapper),
    its state copied and its learning rate divided back by the number of ranks."""
    plain = util.deserialize_optimizer(s.optimizer, custom_objects)
    model.compile(optimizer=plain, loss=util.restore(s.loss, custom_objects), loss_weights=s.loss_weights,
                  metrics=util.restore(s.metrics, custom_objects))
    plain.build(model.trainable_variables)
    for target, source in zip(plain.variables, distributed.variables):
        target.assign(source)
    if base_lr is not None:
        plain.learning_rate = base_lr
    return util.serialize_model(model)


def _learning_rate(optimizer):
    """The optimizer's learning rate as a float, or None when it is a schedule."""
    tf = frameworks.tensorflow()

    rate = optimizer.learning_rate
    if isinstance(rate, tf.keras.optimizers.schedules.LearningRateSchedule) or callable(rate):
        return None
    return float(rate.numpy() if hasattr(rate, "numpy") else rate)


def _keras_data(rows, stream, model, spec):
    """What ``model.fit`` takes for a split, as a tf.data pipeline: rows held in memory
    (``InMemoryRows``) gathered batch by batch, else ``stream()``'s numpy batches through a
    generator. TensorFlow runs a step fed by a Python generator (tf.data's ``from_generator``) at
    about 1.5 times the CPU of the same step fed by tf.data alone (Horovod's MNIST conv net, one
    thread)."""
    tf = frameworks.tensorflow()
    count = len(rows.arrays[spec.feature_cols[0]]) if rows is not None else 0
    if count == 0:  # (the stream says what is wrong with no rows)
        return _generator_dataset(tf, _keras_batches(stream(), model, spec))

    columns = {c: tf.convert_to_tensor(a) for c, a in rows.arrays.items()}
    shapes = _model_shapes(model)
    trailing = {c: _trailing_shape(rows.arrays[c].shape, shape, c)
                for names, model_shapes in zip((spec.feature_cols, spec.label_cols), shapes)
                for c, shape in zip(names, model_shapes)}

    def batch(indices):
        def take(column):
            values = tf.gather(columns[column], indices)
            shape = trailing.get(column)  # (a sample weight column is not the model's)
            return values if shape is None else tf.reshape(values, (rows.batch_size,) + shape)

        return _structure([take(c) for c in spec.feature_cols], [take(c) for c in spec.label_cols],
                          tf.reshape(take(spec.sample_weight_col), [-1]) if spec.sample_weight_col else None)

    order = tf.data.Dataset.range(count)
    if rows.shuffle:
        order = order.shuffle(count, seed=rows.seed, reshuffle_each_iteration=True)
    return _untuned(tf, order.repeat().batch(rows.batch_size, drop_remainder=True).map(batch))


def _generator_dataset(tf, batches):
    """The generator's batches as the tf.data pipeline Keras would make of it (every iterator
    continues the same generator, the batches' first dimension left open), but untuned."""
    first = next(batches)
    signature = tf.nest.map_structure(lambda a: tf.TensorSpec((None,) + a.shape[1:], tf.as_dtype(a.dtype)), first)
    rest = itertools.chain([first], batches)

    def continued():
        for batch in rest:  # (not ``yield from``: a dropped iterator would close the stream)
            yield batch

    return _untuned(tf, tf.data.Dataset.from_generator(continued, output_signature=signature))


def _untuned(tf, dataset):
    """``dataset`` prefetched, with no autotuning model: the pipelines here have no knob it would
    turn (the prefetch buffer tunes itself), and an iterator with one waits for the model's thread
    when Keras drops it, at every epoch's validation and at the end of fit, for up to the thread's
    optimization period (seconds, growing over a fit: 20 s were seen at the end of a Rossmann fit)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(options)


def _keras_batches(stream, model, spec):
    """Numpy batches in the structure ``model.fit`` takes: inputs in ``feature_cols`` order, labels
    in ``label_cols`` order, each reshaped to its model input's or output's shape."""
    inputs, outputs = _model_shapes(model)
    for batch in stream:
        x = [_reshape(batch[c], shape, c) for c, shape in zip(spec.feature_cols, inputs)]
        y = [_reshape(batch[c], shape, c) for c, shape in zip(spec.label_cols, outputs)]
        yield _structure(x, y, batch[spec.sample_weight_col].reshape(-1) if spec.sample_weight_col else None)


def _model_shapes(model):
    """The model's input shapes and output shapes (-1 for a dimension it leaves open)."""
    return ([tuple(-1 if d is None else d for d in t.shape) for t in model.inputs],
            [tuple(-1 if d is None else d for d in t.shape) for t in model.outputs])


def _structure(x, y, weights):
    """``(x, y[, weights])`` as ``model.fit`` takes them: a lone input or label unwrapped."""
    x = x[0] if len(x) == 1 else tuple(x)
    y = y[0] if len(y) == 1 else tuple(y)
    return (x, y) if weights is None else (x, y, weights)


def _reshape(values, shape, column):
    """``values`` (one column's rows) in the model input's or output's shape (rows first)."""
    trailing = _trailing_shape(values.shape, shape, column)
    return values if trailing is None else values.reshape((values.shape[0],) + trailing)


def _trailing_shape(values_shape, shape, column):
    """The shape after the rows that a column with ``values_shape`` takes for a model input or output
    of ``shape``; None to leave the values as they are (more than one open dimension)."""
    trailing = tuple(shape[1:])
    if -1 in trailing:
        return None if trailing.count(-1) > 1 else trailing
    if int(np.prod(trailing)) != int(np.prod(values_shape[1:])):
        raise ValueError("column '%s' has %d values per row but the model's matching input or output takes "
                         "shape %s" % (column, int(np.prod(values_shape[1:])), trailing))
    return trailing


def _check_shapes(model, spec):
    if len(model.inputs) != len(spec.feature_cols):
        raise ValueError("the model has %d inputs but %d feature columns are given (%s)"
                         % (len(model.inputs), len(spec.feature_cols), spec.feature_cols))
    if len(model.outputs) != len(spec.label_cols):
        raise ValueError("the model has %d outputs but %d label columns are given (%s)"
                         % (len(model.outputs), len(spec.label_cols), spec.label_cols))


def _limit_threads(tf):
    """TensorFlow uses the task's cores (Spark's OMP_NUM_THREADS), not the whole host's."""
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(max(1, threads))
        except RuntimeError:
            pass  # TensorFlow already started in this (reused) worker


def _pin_gpu(tf, use_gpu, verbose):
    """One GPU per rank: the one Spark assigned to the task, else none (as Horovod's estimators)."""
    from horovod_rs.spark.task import get_available_devices

    gpus = tf.config.list_physical_devices("GPU")
    if not use_gpu or not gpus:
        if use_gpu and verbose:
            print("horovod_rs: no GPU visible to this rank (use_gpu=True): training on the CPU")
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        return
    assigned = get_available_devices()
    index = int(assigned[0]) if assigned else 0
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus[index], "GPU")
