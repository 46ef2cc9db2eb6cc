"""What lets Horovod's Lightning scripts, written for Lightning 1.x, run on Lightning 2.x:

- a plain ``torch.nn.Module`` with an optimizer and a loss (Horovod's "legacy" estimator use)
  becomes a ``LightningModule`` whose steps compute the TorchEstimator's loss;
- a module's ``training_epoch_end(outputs)`` / ``validation_epoch_end(outputs)`` (removed in
  Lightning 2.0, which refuses modules that define them) are called from the 2.x hooks with the
  steps' outputs, as 1.x did;
- callbacks' ``on_init_start``/``on_init_end`` and ``on_epoch_end`` (removed in 1.8; 2.x never
  calls them) are called: the first two once the Trainer exists, the last after every training
  and validation epoch, as 1.x did.
"""

from horovod_rs.spark.torch import remote as torch_remote
from horovod_rs.spark.torch import util

LEGACY_EPOCH_END = {"training_epoch_end": ("train", "training_step", "on_train_epoch_end"),
                    "validation_epoch_end": ("val", "validation_step", "on_validation_epoch_end")}


def to_lightning_module(model, optimizer, loss_fns, loss_weights, feature_cols, label_cols, sample_weights_col,
                        validation):
    """Horovod's: ``model`` (a plain torch module) inside a LightningModule whose steps compute the
    TorchEstimator's loss of batches of ``feature_cols`` and ``label_cols`` (weighted by
    ``sample_weights_col``), and whose optimizer is a copy of ``optimizer`` over its parameters.
    ``loss_weights`` defaults to equal weights; ``validation`` is accepted (every module here
    validates when it is given validation data)."""
    import importlib
    import types

    from horovod_rs.spark.lightning.estimator import lightning_package

    pl = importlib.import_module(lightning_package(model))
    spec = types.SimpleNamespace(feature_cols=list(feature_cols), label_cols=list(label_cols),
                                 sample_weight_col=sample_weights_col or None)
    return legacy_module(pl, model, lambda module: util.copy_optimizer(optimizer, module), loss_fns, loss_weights,
                         spec, None, None)


def legacy_module(pl, model, make_optimizer, loss_fns, loss_weights, spec, input_shapes, label_shapes):
    """``model`` inside a LightningModule that trains it as the TorchEstimator would, with the
    optimizer ``make_optimizer(model)`` returns. ``loss_fns``: one for every label, or a list;
    ``loss_weights``: equal by default."""
    labels = len(spec.label_cols)
    loss_fns = util.to_list(loss_fns, labels)
    loss_weights = loss_weights or [1.0 / labels] * labels
    transform_outputs = torch_remote._transform_outputs_fn(label_shapes)
    calculate_loss = torch_remote._calculate_loss_fn()
    shapes = list(input_shapes) if input_shapes else [None] * len(spec.feature_cols)

    class LegacyModule(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self._model = model

        def forward(self, *inputs):
            return self._model(*inputs)

        def configure_optimizers(self):
            return make_optimizer(self._model)

        def _calculate_loss(self, outputs, labels, sample_weights=None):
            """Horovod's name: the weighted sum of the outputs' losses (per sample, times
            ``sample_weights``, when given)."""
            return calculate_loss(outputs, labels, loss_weights, loss_fns, sample_weights)

        def _loss(self, batch):
            inputs = [torch_remote.shaped(batch[c].float(), shape, c) for c, shape in zip(spec.feature_cols, shapes)]
            labels = [batch[c].float() for c in spec.label_cols]
            weights = batch[spec.sample_weight_col].float().reshape(-1) if spec.sample_weight_col else None
            outputs, labels = transform_outputs(self(*inputs), labels)
            return self._calculate_loss(outputs, labels, weights)

        def training_step(self, batch, batch_idx):
            loss = self._loss(batch)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            loss = self._loss(batch)
            self.log("val_loss", loss)
            return loss

    return LegacyModule()


def adapt_epoch_end_hooks(module):
    """Gives ``module`` a subclass that hides its Lightning 1.x ``*_epoch_end(outputs)`` hooks from
    Lightning 2.x and calls them at each epoch's end with the outputs its steps returned."""
    cls = type(module)
    legacy = {name: getattr(cls, name) for name in LEGACY_EPOCH_END if callable(getattr(cls, name, None))}
    if not legacy:
        return module
    namespace = {name: None for name in LEGACY_EPOCH_END}
    for name, hook in legacy.items():
        stage, step_name, end_name = LEGACY_EPOCH_END[name]
        namespace[step_name] = _recording_step(getattr(cls, step_name), stage)
        namespace[end_name] = _calling_epoch_end(hook, getattr(cls, end_name), stage)
    module.__class__ = type(cls.__name__, (cls,), namespace)
    module._horovod_rs_step_outputs = {}
    return module


def _recording_step(step, stage):
    def recorded(self, *args, **kwargs):
        output = step(self, *args, **kwargs)
        if output is not None:  # Lightning 1.x left out steps that returned nothing
            self._horovod_rs_step_outputs.setdefault(stage, []).append(_detached(output))
        return output

    return recorded


def _calling_epoch_end(legacy_hook, epoch_end, stage):
    def on_epoch_end(self):
        legacy_hook(self, self._horovod_rs_step_outputs.pop(stage, []))
        epoch_end(self)

    return on_epoch_end


def _detached(output):
    import torch

    if isinstance(output, torch.Tensor):
        return output.detach()
    if isinstance(output, dict):
        return {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in output.items()}
    return output


def callback_hooks(pl, callbacks):
    """A callback calling the user's callbacks' ``on_epoch_end`` after every training and validation
    epoch (None when no callback has one)."""
    targets = [c for c in callbacks if callable(getattr(c, "on_epoch_end", None))]
    if not targets:
        return None

    class LegacyEpochEnd(pl.Callback):
        def on_train_epoch_end(self, trainer, module):
            for callback in targets:
                callback.on_epoch_end(trainer, module)

        def on_validation_epoch_end(self, trainer, module):
            for callback in targets:
                callback.on_epoch_end(trainer, module)

    return LegacyEpochEnd()


def call_init_hooks(callbacks, trainer):
    """``on_init_start`` then ``on_init_end`` of the callbacks that still define them, once the
    Trainer exists (1.x called them while building it)."""
    for hook in ("on_init_start", "on_init_end"):
        for callback in callbacks:
            method = getattr(callback, hook, None)
            if callable(method):
                method(trainer)
