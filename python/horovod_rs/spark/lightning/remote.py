"""What each rank of a Lightning TorchEstimator fit runs: load its share of the rows, and run a
Lightning ``Trainer`` with the horovod_rs strategy over data loaders that give every rank the
same number of batches per epoch (dicts of column tensors, as Horovod's Petastorm loaders gave).

After every epoch (training and validation) the ranks average the metrics the module logged;
rank 0 prints them, writes a Lightning checkpoint through ``RunWriter`` (so ``run_id`` resumes
with the optimizer, loops and callbacks as they were) and syncs the run (TensorBoard logs,
the user's ``ModelCheckpoint`` files) to the store. Rank 0 returns the model's final weights
(the best checkpoint's, with a ``ModelCheckpoint``) and the last epoch's averaged metrics.
"""

import dataclasses
import importlib
import io
import os
import typing

import cloudpickle

from horovod_rs.spark.common import remote as common
from horovod_rs.spark.lightning import legacy
from horovod_rs.spark.lightning.strategy import strategy_class
from horovod_rs.spark.torch import device as devices
from horovod_rs.spark.torch import util


def make_trainer(settings):
    """``train(rank, batches)`` for the ranks of a fit with ``settings`` (``LightningSettings``)."""
    return common.trainer(Lightning(), settings)


@dataclasses.dataclass
class LightningSettings(common.TrainingSettings):
    """A Lightning TorchEstimator fit's settings: the shared ones and Lightning's."""

    package: str  # "lightning" or "pytorch_lightning", the model's
    model: bytes
    # A plain torch.nn.Module's optimizer and loss (Horovod's legacy path), or None.
    legacy: typing.Optional[dict]
    loss_weights: typing.Optional[list]
    input_shapes: typing.Optional[list]
    label_shapes: typing.Optional[list]
    callbacks: bytes
    logger: bytes
    gradient_compression: bytes
    profiler: typing.Any
    trainer_args: typing.Optional[dict]
    log_every_n_steps: int
    terminate_on_nan: bool
    debug_data_loader: bool
    num_gpus: typing.Optional[int]


class Lightning(common.Framework):
    """Lightning on the rank runner: a ``Trainer`` with the horovod_rs strategy over loaders of
    Horovod's steps (``floor``)."""

    train_rounding = val_rounding = "floor"
    checkpoint_extension = ".ckpt"

    def start(self, s, rank):
        import horovod_rs.torch as hvd

        pl = importlib.import_module(s.package)
        devices.limit_threads()
        if s.random_seed is not None:
            pl.seed_everything(s.random_seed, verbose=False)
        device = devices.training_device(hvd, s.use_gpu and s.num_gpus != 0, s.verbose if rank == 0 else 0)
        return hvd, (hvd, pl, device)

    def fit(self, run, started):
        hvd, pl, device = started
        return _fit(run, hvd, pl, device)


def _fit(run, hvd, pl, device):
    import torch

    s, rank, size, verbose, share = run.settings, run.rank, run.size, run.verbose, run.share
    spec = s.data
    model = util.deserialize_model(s.model)
    if s.legacy is not None:
        model = _legacy_module(pl, model, s.legacy, spec, s)
    else:
        model = legacy.adapt_epoch_end_hooks(model)

    train_loader = _loader(run.train_stream(), run.steps)
    val_loader = _loader(run.val_stream(), run.val_steps) if run.val_steps else None
    if s.debug_data_loader or verbose:
        print("horovod_rs: rank %d of %d: %d training rows (%d steps of %d per epoch)%s" % (
            rank, size, share.train_rows, run.steps, s.batch_size,
            ", %d validation rows (%d steps of %d)" % (share.val_rows, run.val_steps, run.val_batch_size)
            if run.val_steps else ""))

    with run.run_dir() as run_dir:
        logs_dir = run.logs_dir(run_dir)
        user_callbacks = cloudpickle.loads(s.callbacks) or []
        checkpoint_callback = _user_checkpoint(pl, user_callbacks, run_dir)
        writer = run.writer(run_dir)
        history = dict(s.resume[0]["history"]) if s.resume is not None else {}
        callbacks = list(user_callbacks) + [_epoch_end(pl, hvd, writer, run_dir, history, verbose, run.events,
                                                           run.timer, run.regrow_after)]
        legacy_hooks = legacy.callback_hooks(pl, user_callbacks)
        if legacy_hooks is not None:
            callbacks.append(legacy_hooks)
        if s.terminate_on_nan:
            callbacks.append(_terminate_on_nan(pl))
        kwargs = {
            "strategy": strategy_class(s.package)(device, compression=cloudpickle.loads(s.gradient_compression)),
            "accelerator": "gpu" if device.type == "cuda" else "cpu",
            "devices": 1,
            "callbacks": callbacks,
            "max_epochs": s.epochs,
            "logger": _logger(pl, s, logs_dir, verbose),
            "log_every_n_steps": s.log_every_n_steps,
            "num_sanity_val_steps": 0,
            "enable_progress_bar": False,
            "enable_model_summary": bool(verbose),
            "enable_checkpointing": checkpoint_callback is not None,
            "default_root_dir": run_dir,
            "profiler": s.profiler,
            "use_distributed_sampler": False,
        }
        trainer_args = dict(s.trainer_args or {})
        swa = trainer_args.pop("stochastic_weight_avg", False)  # Lightning 1's, which Lightning 2 removed
        kwargs.update(trainer_args)
        if swa:  # (also beside callbacks the trainer_args give)
            kwargs["callbacks"] = list(kwargs["callbacks"]) + [_lightning_one_swa(pl)]
        if verbose:
            print("horovod_rs: %s %s Trainer(%s)" % (s.package, pl.__version__,
                                                     ", ".join("%s=%r" % kv for kv in sorted(kwargs.items())
                                                               if kv[0] not in ("callbacks", "strategy"))))
        trainer = pl.Trainer(**kwargs)
        legacy.call_init_hooks(user_callbacks, trainer)
        if s.profiler not in (None, "simple") and trainer.profiler is not None:
            trainer.profiler.dirpath, trainer.profiler.filename = logs_dir, "profile"
        resume_path = None
        if s.resume is not None:
            resume_path = os.path.join(run_dir, "resume" + Lightning.checkpoint_extension)
            with open(resume_path, "wb") as f:
                f.write(s.resume[1])
        run.events.start(s.epochs, s.resume[0]["epochs_done"] if s.resume is not None else 0, run.steps,
                         run.val_steps)
        trainer.fit(model, train_dataloaders=train_loader, val_dataloaders=val_loader, ckpt_path=resume_path)
        if rank != 0 or run.regrown:
            return None
        if run.saving:
            s.store.sync(run_dir)  # the profiler's report, the last logs
        weights = model.state_dict()
        if checkpoint_callback is not None and checkpoint_callback.best_model_path:
            weights = torch.load(checkpoint_callback.best_model_path, map_location="cpu",
                                 weights_only=False)["state_dict"]
        if s.legacy is not None:  # the user's own module's weights, without the wrapper's prefix
            weights = {k[len("_model."):]: v for k, v in weights.items() if k.startswith("_model.")}
        buffer = io.BytesIO()
        torch.save({k: v.cpu() for k, v in weights.items()}, buffer)
        return {"history": history, "model": buffer.getvalue()}


def _legacy_module(pl, model, settings, spec, s):
    optimizer_cls, order = cloudpickle.loads(settings["optimizer_cls"]), settings["parameter_order"]

    def make_optimizer(module):
        import torch

        state = torch.load(io.BytesIO(settings["optimizer_state"]), weights_only=False)
        return util.rebuild_optimizer(optimizer_cls, state, order, module)

    return legacy.legacy_module(pl, model, make_optimizer, cloudpickle.loads(settings["loss"]), s.loss_weights, spec,
                                s.input_shapes, s.label_shapes)


def _loader(stream, steps):
    """A DataLoader giving ``steps`` batches per epoch from an endless stream of numpy batches, as
    dicts of tensors (each column's own dtype)."""
    import torch

    class Steps(torch.utils.data.IterableDataset):
        def __len__(self):
            return steps

        def __iter__(self):
            for _ in range(steps):
                yield {column: torch.tensor(values) for column, values in next(stream).items()}

    return torch.utils.data.DataLoader(Steps(), batch_size=None, num_workers=0)


def _user_checkpoint(pl, callbacks, run_dir):
    """The user's ``ModelCheckpoint``, writing into the run's directory (synced to the store)."""
    for callback in callbacks:
        if isinstance(callback, pl.callbacks.ModelCheckpoint):
            callback.dirpath = os.path.join(run_dir, "checkpoints")
            return callback
    return None


def _epoch_end(pl, hvd, writer, run_dir, history, verbose, events, timer, regrow_after):
    """Every rank, after every epoch: the logged metrics averaged over the ranks into ``history``;
    rank 0 prints them, reports them (``events``, with its running metrics while it trains) and
    commits a checkpoint of the whole run; then the fit stops if ``regrow_after`` says so (the
    driver asked it to run again on more ranks). ``timer`` gets the fit's phases."""

    class EpochEnd(pl.Callback):
        def on_train_start(self, trainer, module):
            timer.lap("setup")

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            events.step(trainer.current_epoch, batch_idx + 1, lambda: trainer.progress_bar_metrics)

        def on_validation_start(self, trainer, module):
            timer.lap("train")

        def on_validation_end(self, trainer, module):
            timer.lap("validation")

        def on_train_epoch_end(self, trainer, module):
            timer.lap("train")
            local = {k: float(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
            everyone = hvd.allgather_object(local, name="horovod_rs.lightning.metrics")
            names = sorted(set().union(*everyone))
            averaged = {k: sum(m[k] for m in everyone if k in m) / sum(1 for m in everyone if k in m) for k in names}
            history.clear()
            history.update(averaged)
            events.epoch(trainer.current_epoch, averaged)
            if verbose:
                print("horovod_rs: epoch %d: %s" % (trainer.current_epoch,
                                                     ", ".join("%s=%.6g" % kv for kv in averaged.items())))
            path = writer.next_path() if writer is not None else os.path.join(run_dir, "not-written.ckpt")
            trainer.save_checkpoint(path)  # every rank: it waits for the others
            if writer is not None:
                writer.commit(trainer.current_epoch + 1, history)
            timer.lap("checkpoint")
            if regrow_after(trainer.current_epoch + 1):
                trainer.should_stop = True

    return EpochEnd()


def _terminate_on_nan(pl):
    import torch

    class TerminateOnNan(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if isinstance(loss, torch.Tensor) and not torch.isfinite(loss).all():
                raise ValueError("the loss is %s at epoch %d, step %d (terminate_on_nan=True)"
                                 % (loss.item() if loss.numel() == 1 else loss, trainer.current_epoch, batch_idx))

    return TerminateOnNan()


def _lightning_one_swa(pl):
    """What Lightning 1's ``Trainer(stochastic_weight_avg=True)`` added (Horovod's scripts pass it
    in ``trainer_args``): Stochastic Weight Averaging with its defaults, the SWA learning rates
    being the optimizer's when SWA starts (Lightning 2's callback needs them given)."""

    class StochasticWeightAveraging(pl.callbacks.StochasticWeightAveraging):
        def __init__(self):
            super().__init__(swa_lrs=1.0)  # replaced as SWA starts

        def on_train_epoch_start(self, trainer, pl_module):
            if not self._initialized and self.swa_start <= trainer.current_epoch <= self.swa_end:
                self._swa_lrs = [group["lr"] for group in trainer.optimizers[0].param_groups]
            super().on_train_epoch_start(trainer, pl_module)

    return StochasticWeightAveraging()


def _logger(pl, s, logs_dir, verbose):
    """The user's logger writing into the run's logs, else TensorBoard's when installed, else none."""
    logger = cloudpickle.loads(s.logger)
    if logger is not None:
        if hasattr(logger, "_root_dir"):
            logger._root_dir = logs_dir
        return logger
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None and importlib.util.find_spec("tensorboardX") is None:
        if verbose:
            print("horovod_rs: no TensorBoard logs in the store (pip install tensorboard to have them)")
        return False
    return pl.loggers.TensorBoardLogger(logs_dir)


def _prepare_data_fn(metadata):
    """Horovod's Lightning decoder of a column's rows (``prepare_data(col_name, rows)``): as
    torch's ``_prepare_np_data_fn``; a column missing from ``metadata`` is returned as it is."""
    from horovod_rs.spark.common.constants import CUSTOM_SPARSE
    from horovod_rs.spark.torch.remote import _custom_sparse_to_dense

    def prepare_data(col_name, rows):
        import torch

        if col_name not in metadata or metadata[col_name]["intermediate_format"] != CUSTOM_SPARSE:
            return rows
        return _custom_sparse_to_dense(torch, rows, metadata[col_name]["shape"])

    return prepare_data
