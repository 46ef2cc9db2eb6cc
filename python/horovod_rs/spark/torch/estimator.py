"""Horovod's ``TorchEstimator`` and ``TorchModel`` (PyTorch) on horovod_rs."""

import copy
import functools
import io

from pyspark import keyword_only

from horovod_rs.spark.common import tracking
from horovod_rs.spark.common.estimator import HorovodEstimator, HorovodModel
from horovod_rs.spark.common.params import EstimatorParams  # noqa: F401  (Horovod's API here too)
from horovod_rs.spark.common.params import declare, serialize_param
from horovod_rs.spark.torch import remote, util

TORCH_ESTIMATOR_PARAMS = [
    ("data_module", "DataModule", None, None, "Horovod's data module class; the data reaches the ranks as Arrow here"),
    ("input_shapes", "InputShapes", None, None,
     "shape of each input tensor (a whole batch, e.g. [-1, 1, 28, 28], or one row); default: as the column"),
    ("loss_constructors", "LossConstructors", None, None,
     "functions called in each rank (with keyword arguments) that return the losses; instead of loss"),
    ("train_minibatch_fn", "TrainMinibatchFn", None, None,
     "train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights, "
     "backward_passes_per_step, batch_idx) -> (outputs, loss); default: one step of gradient descent"),
]

TORCH_MODEL_PARAMS = [
    ("optimizer", "Optimizer", None, None, "the optimizer, with its state after training"),
    ("input_shapes", "InputShapes", None, None, "shape of each input tensor"),
    ("loss", "Loss", None, None, "the loss(es) used in training"),
    ("loss_constructors", "LossConstructors", None, None, "the loss constructors used in training"),
]


def _torch_param_serialize(param_name, param_val):
    """A param's value as Horovod's Torch and Lightning writers serialize it."""
    return serialize_param(param_name, param_val, util.serialize_model)


class TorchEstimator(HorovodEstimator):
    """Fits a PyTorch model on a DataFrame with horovod_rs across Spark executors.

    Horovod's parameters and defaults; see docs/estimators.md for the few that work differently
    (the Petastorm reader options have no effect: rows reach the ranks as Arrow batches)."""

    run_id_prefix = "pytorch"
    model_file_extension = ".pt"

    @keyword_only
    def __init__(self, num_proc=None, data_module=None, model=None, backend=None, store=None, optimizer=None,
                 loss=None, loss_constructors=None, metrics=None, loss_weights=None, sample_weight_col=None,
                 gradient_compression=None, feature_cols=None, continuous_cols=None, categorical_cols=None,
                 input_shapes=None, validation=None, label_cols=None, callbacks=None, batch_size=None,
                 val_batch_size=None, epochs=None, verbose=1, random_seed=None, shuffle_buffer_size=None,
                 shuffle=True, partitions_per_process=None, run_id=None, train_minibatch_fn=None,
                 train_steps_per_epoch=None, validation_steps_per_epoch=None, transformation_fn=None,
                 train_reader_num_workers=None, val_reader_num_workers=None, reader_pool_type="thread",
                 label_shapes=None, inmemory_cache_all=False, use_gpu=True, mp_start_method=None,
                 backward_passes_per_step=1, mlflow_tracking=None):
        super().__init__()
        kwargs = self._input_kwargs
        if kwargs.get("loss") is not None and kwargs.get("loss_constructors") is not None:
            raise ValueError("only one of loss_constructors and loss parameters can be specified.")
        if backward_passes_per_step is None or backward_passes_per_step <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        self.setParams(**{k: v for k, v in kwargs.items() if v is not None})

    def _get_optimizer(self):
        return self.getOrDefault(self.optimizer)

    def getOptimizer(self):
        """A new optimizer of the given one's class and state, bound to the model's parameters."""
        model, optimizer = self.getModel(), self._get_optimizer()
        if model is None or optimizer is None:
            return optimizer
        return util.copy_optimizer(optimizer, model)

    def _check_model(self):
        import torch

        model = self.getModel()
        if not isinstance(model, torch.nn.Module):
            raise ValueError("model has to be a torch.nn.Module, not %s" % type(model).__name__)
        if self._get_optimizer() is None:
            raise ValueError("optimizer is required: a torch.optim optimizer over model.parameters()")
        if not isinstance(self._get_optimizer(), torch.optim.Optimizer):
            raise ValueError("optimizer has to be a torch.optim.Optimizer, not %s"
                             % type(self._get_optimizer()).__name__)
        util.parameter_order(self._get_optimizer(), model)
        if self.getLoss() is None and self.getLossConstructors() is None:
            raise ValueError("loss (or loss_constructors) is required")
        if self.getLoss() is not None and self.getLossConstructors() is not None:
            raise ValueError("only one of loss_constructors and loss parameters can be specified.")
        labels = len(self.getLabelCols())
        util.to_list(self.getLoss(), labels)
        util.to_list(self.getLossConstructors(), labels)
        shapes = self.getInputShapes()
        if shapes is not None and len(shapes) != len(self.getFeatureCols()):
            raise ValueError("input_shapes has %d shapes for %d feature columns (%s): one shape per column, in order"
                             % (len(shapes), len(self.getFeatureCols()), self.getFeatureCols()))
        if self.getBackwardPassesPerStep() < 1:
            raise ValueError("backward_passes_per_step must be > 0")

    def _remote_trainer(self, run_id, data_spec, resume):
        import torch

        model, optimizer = self.getModel(), self._get_optimizer()
        state = io.BytesIO()
        torch.save(optimizer.state_dict(), state)
        compression = self.getGradientCompression()
        settings = remote.TorchSettings(
            **self._shared_settings(run_id, data_spec, resume),
            model=util.serialize_model(model),
            optimizer_cls=util.dumps(type(optimizer), "the optimizer's class"),
            optimizer_state=state.getvalue(),
            parameter_order=util.parameter_order(optimizer, model),
            loss=util.dumps(self.getLoss(), "loss"),
            loss_constructors=util.dumps(self.getLossConstructors(), "loss_constructors"),
            loss_weights=self.getLossWeights(),
            metrics=util.dumps(self.getMetrics() or [], "metrics"),
            train_minibatch_fn=util.dumps(self.getTrainMinibatchFn(), "train_minibatch_fn"),
            gradient_compression=util.dumps(compression, "gradient_compression") if compression is not None else None,
            input_shapes=self.getInputShapes(),
            label_shapes=self.getLabelShapes(),
            backward_passes_per_step=self.getBackwardPassesPerStep(),
        )
        return remote.make_trainer(settings)

    def _mlflow_model(self, model):
        # Pickled (cloudpickle): the module needs no input example, as MLflow's traced format would.
        return "mlflow.pytorch", {"pytorch_model": model, "serialization_format": "pickle",
                                  "pip_requirements": functools.partial(tracking.pinned_requirements, model, "torch",
                                                                        "cloudpickle")}

    def _create_model(self, result, run_id, infos):
        import torch

        checkpoint = torch.load(io.BytesIO(result["checkpoint"]), map_location="cpu", weights_only=False)
        model = copy.deepcopy(self.getModel())
        model.load_state_dict(checkpoint["model"])
        model.eval()
        given = self._get_optimizer()
        order = util.parameter_order(given, self.getModel())
        optimizer = util.rebuild_optimizer(type(given), checkpoint["optimizer"], order, model)
        return TorchModel(history=result["history"], model=model, optimizer=optimizer,
                          feature_columns=self.getFeatureCols(), input_shapes=self.getInputShapes(),
                          label_columns=self.getLabelCols(), run_id=run_id, _metadata=infos, loss=self.getLoss(),
                          loss_constructors=self.getLossConstructors())

    def _model_to_bytes(self, model):
        return util.serialize_model(model)

    def _model_from_bytes(self, data, values):
        return util.deserialize_model(data)


class TorchModel(HorovodModel):
    """A trained PyTorch model: ``transform`` predicts in the executors; ``getModel()`` is the
    ``torch.nn.Module`` itself (in eval mode), ``getOptimizer()`` its optimizer after training."""

    model_file_extension = ".pt"

    @keyword_only
    def __init__(self, history=None, model=None, feature_columns=None, input_shapes=None, label_columns=None,
                 optimizer=None, run_id=None, _metadata=None, loss=None, loss_constructors=None):
        super().__init__()
        if label_columns:
            self.setOutputCols([col + "__output" for col in label_columns])
        self.setParams(**{k: v for k, v in self._input_kwargs.items() if v is not None})

    def _get_optimizer(self):
        return self.getOrDefault(self.optimizer)

    def getOptimizer(self):
        """The optimizer's class and trained state, bound to this model's parameters."""
        model, optimizer = self.getModel(), self._get_optimizer()
        if model is None or optimizer is None:
            return optimizer
        return util.copy_optimizer(optimizer, model)

    def _predictor_factory(self):
        data = util.serialize_model(self.getModel())
        features = list(self.getFeatureColumns())
        shapes = self.getInputShapes() or [None] * len(features)

        def factory():
            import torch

            from horovod_rs.spark.torch.device import limit_threads

            limit_threads()
            model = util.deserialize_model(data)
            model.eval()

            def predict(arrays):
                inputs = [remote.shaped(torch.tensor(a, dtype=torch.float32), shape, column, rows_first=True)
                          for a, shape, column in zip(arrays, shapes, features)]
                with torch.no_grad():
                    out = model(*inputs)
                outs = out if isinstance(out, (list, tuple)) else [out]
                return [o.detach().cpu().float().numpy() for o in outs]

            return predict

        return factory

    def _model_to_bytes(self, model):
        return util.serialize_model(model)

    def _model_from_bytes(self, data, values):
        return util.deserialize_model(data)


declare(TorchEstimator, TORCH_ESTIMATOR_PARAMS)
declare(TorchModel, TORCH_MODEL_PARAMS)
