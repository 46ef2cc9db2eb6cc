"""Horovod's Lightning ``TorchEstimator`` and ``TorchModel`` for PyTorch Lightning 2.x (the
``lightning`` or the ``pytorch_lightning`` package) on horovod_rs."""

import copy
import importlib
import io
import sys

from pyspark import keyword_only

from horovod_rs.spark.common.estimator import HorovodEstimator
from horovod_rs.spark.common.params import EstimatorParams  # noqa: F401  (Horovod's API here too)
from horovod_rs.spark.common.params import declare
from horovod_rs.spark.lightning import remote
from horovod_rs.spark.torch import estimator as torch_estimator
from horovod_rs.spark.torch.estimator import _torch_param_serialize  # noqa: F401  (Horovod's API here too)
from horovod_rs.spark.torch import util

# The oldest Lightning this estimator runs on (Horovod's examples skip themselves below it).
MIN_PL_VERSION = "2.0.0"

# Import names of Lightning, in the order a plain torch module's training picks them.
PACKAGES = ("pytorch_lightning", "lightning.pytorch")

LIGHTNING_ESTIMATOR_PARAMS = [
    ("input_shapes", "InputShapes", None, None, "shape of each input tensor, for transform (and a plain torch model)"),
    ("loss_constructors", "LossConstructors", None, None, "functions that return the losses (a plain torch model)"),
    ("train_minibatch_fn", "TrainMinibatchFn", None, None, "Horovod's param; Lightning's training_step trains here"),
    ("num_gpus", "NumGPUs", None, None, "GPUs per process: None (one when the rank has a GPU) or 0 (the CPU)"),
    ("logger", "Logger", None, None, "a Lightning logger; default: TensorBoardLogger into the run's logs"),
    ("log_every_n_steps", "LogEveryNSteps", 50, None, "Lightning's logging frequency"),
    ("data_module", "DataModule", None, None, "Horovod's data module class; the data reaches the ranks as Arrow here"),
    ("loader_num_epochs", "LoaderNumEpochs", None, None,
     "Horovod's reader epochs; the loaders here cycle through the rows without end"),
    ("terminate_on_nan", "TerminateOnNan", False, None, "stop with an error when the training loss is NaN or inf"),
    ("profiler", "Profiler", None, None, "Lightning profiler ('simple', 'advanced', 'pytorch' or an instance)"),
    ("trainer_args", "TrainerArgs", None, None, "keyword arguments added to (or overriding) the Trainer's"),
    ("debug_data_loader", "DebugDataLoader", False, None, "print each rank's rows and steps"),
    ("train_async_data_loader_queue_size", "TrainAsyncDataLoaderQueueSize", None, None,
     "Horovod's async loader option; batches come from memory here"),
    ("val_async_data_loader_queue_size", "ValAsyncDataLoaderQueueSize", None, None,
     "Horovod's async loader option; batches come from memory here"),
]


def lightning_package(model):
    """The import name of the Lightning package ``model`` comes from (a plain torch module: the
    first one installed)."""
    for name in PACKAGES:
        module = sys.modules.get(name)
        if module is not None and isinstance(model, module.LightningModule):
            return name
    for name in PACKAGES:
        try:
            importlib.import_module(name)
            return name
        except ImportError:
            continue
    raise ImportError("the Lightning estimator needs PyTorch Lightning 2.x: pip install 'horovod_rs[lightning]' "
                      "(or pytorch-lightning)")


class TorchEstimator(HorovodEstimator):
    """Fits a PyTorch Lightning module (or a plain torch module with an optimizer and a loss) on a
    DataFrame with horovod_rs across Spark executors.

    Horovod's parameters and defaults; see docs/estimators.md for the few that work differently."""

    run_id_prefix = "pytorch"
    model_file_extension = ".pt"

    @keyword_only
    def __init__(self, num_proc=None, model=None, backend=None, store=None, optimizer=None, loss=None,
                 loss_constructors=None, metrics=None, loss_weights=None, sample_weight_col=None,
                 gradient_compression=None, feature_cols=None, input_shapes=None, validation=None, label_cols=None,
                 callbacks=None, batch_size=None, val_batch_size=None, epochs=None, verbose=1, random_seed=None,
                 shuffle_buffer_size=None, shuffle=True, partitions_per_process=None, run_id=None,
                 train_minibatch_fn=None, train_steps_per_epoch=None, validation_steps_per_epoch=None,
                 transformation_fn=None, transformation_edit_fields=None, transformation_removed_fields=None,
                 train_reader_num_workers=None, trainer_args=None, val_reader_num_workers=None, reader_pool_type=None,
                 label_shapes=None, inmemory_cache_all=False, num_gpus=None, logger=None, log_every_n_steps=50,
                 data_module=None, loader_num_epochs=None, terminate_on_nan=False, profiler=None,
                 debug_data_loader=False, train_async_data_loader_queue_size=None,
                 val_async_data_loader_queue_size=None, use_gpu=True, mp_start_method=None, mlflow_tracking=None):
        super().__init__()
        kwargs = self._input_kwargs
        if kwargs.get("loss") is not None and kwargs.get("loss_constructors") is not None:
            raise ValueError("only one of loss_constructors and loss parameters can be specified.")
        self.setParams(**{k: v for k, v in kwargs.items() if v is not None})

    def _get_optimizer(self):
        return self.getOrDefault(self.optimizer)

    def getOptimizer(self):
        """A new optimizer of the given one's class and state, bound to the model's parameters."""
        model, optimizer = self.getModel(), self._get_optimizer()
        if model is None or optimizer is None:
            return optimizer
        return util.copy_optimizer(optimizer, model)

    def _is_lightning_module(self):
        model = self.getModel()
        return any(name in sys.modules and isinstance(model, sys.modules[name].LightningModule) for name in PACKAGES)

    def _check_model(self):
        import torch

        model = self.getModel()
        if not isinstance(model, torch.nn.Module):
            raise ValueError("model has to be a LightningModule (or a torch.nn.Module), not %s" % type(model).__name__)
        lightning_package(model)
        if self._is_lightning_module():
            for name, what in (("optimizer", "Implement `LightningModule.configure_optimizers` instead."),
                               ("loss", "Implement `LightningModule.training_step` instead."),
                               ("loss_weights", "Implement `LightningModule.training_step` instead.")):
                if self.getOrDefault(name):
                    raise ValueError("Parameter `%s` cannot be specified with a `LightningModule`. %s" % (name, what))
            return
        if self._get_optimizer() is None or self.getLoss() is None:
            raise ValueError("a plain torch.nn.Module needs optimizer and loss (or pass a LightningModule)")
        util.parameter_order(self._get_optimizer(), model)
        util.to_list(self.getLoss(), len(self.getLabelCols()))

    def _remote_trainer(self, run_id, data_spec, resume):
        import torch

        model = self.getModel()
        legacy = None
        if not self._is_lightning_module():
            optimizer = self._get_optimizer()
            state = io.BytesIO()
            torch.save(optimizer.state_dict(), state)
            legacy = {"optimizer_cls": util.dumps(type(optimizer), "the optimizer's class"),
                      "optimizer_state": state.getvalue(),
                      "parameter_order": util.parameter_order(optimizer, model),
                      "loss": util.dumps(self.getLoss(), "loss")}
        settings = remote.LightningSettings(
            **self._shared_settings(run_id, data_spec, resume),
            package=lightning_package(model),
            model=util.serialize_model(model),
            legacy=legacy,
            loss_weights=self.getLossWeights(),
            input_shapes=self.getInputShapes(),
            label_shapes=self.getLabelShapes(),
            callbacks=util.dumps(list(self.getCallbacks() or []), "callbacks"),
            logger=util.dumps(self.getLogger(), "logger"),
            gradient_compression=util.dumps(self.getGradientCompression(), "gradient_compression"),
            profiler=self.getProfiler(),
            trainer_args=self.getTrainerArgs(),
            log_every_n_steps=self.getLogEveryNSteps(),
            terminate_on_nan=self.getTerminateOnNan(),
            debug_data_loader=self.getDebugDataLoader(),
            num_gpus=self.getNumGPUs(),
        )
        return remote.make_trainer(settings)

    def _load_checkpoint(self, run_id):
        return self._read_checkpoint(run_id)

    def _read_checkpoint(self, run_id):
        """The run's state and last Lightning checkpoint in the store, or None: Horovod's Lightning
        name for ``_load_checkpoint``, which its tests watch."""
        return HorovodEstimator._load_checkpoint(self, run_id)

    def _create_model(self, result, run_id, infos):
        import torch

        model = copy.deepcopy(self.getModel())
        model.load_state_dict(torch.load(io.BytesIO(result["model"]), map_location="cpu", weights_only=False))
        model.eval()
        history = {name: torch.tensor(value) for name, value in result["history"].items()}
        return TorchModel(history=history, model=model, feature_columns=self.getFeatureCols(),
                          input_shapes=self.getInputShapes(), label_columns=self.getLabelCols(), run_id=run_id,
                          _metadata=infos, loss=self.getLoss(), loss_constructors=self.getLossConstructors())

    def _mlflow_model(self, model):
        return torch_estimator.TorchEstimator._mlflow_model(self, model)

    def _model_to_bytes(self, model):
        return util.serialize_model(model)

    def _model_from_bytes(self, data, values):
        return util.deserialize_model(data)


class TorchModel(torch_estimator.TorchModel):
    """A trained Lightning (or plain torch) module: ``transform`` predicts in the executors;
    ``getModel()`` is the module itself, in eval mode; ``getHistory()`` the last epoch's logged
    metrics, averaged over the ranks (Horovod's ``logged_metrics``)."""


declare(TorchEstimator, LIGHTNING_ESTIMATOR_PARAMS)
