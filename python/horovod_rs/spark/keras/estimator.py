"""Horovod's ``KerasEstimator`` and ``KerasModel`` (tf.keras / Keras 3 on TensorFlow)."""

import functools

import cloudpickle
import numpy as np
from pyspark import keyword_only

from horovod_rs.spark.common import frameworks, tracking
from horovod_rs.spark.common.estimator import HorovodEstimator, HorovodModel
from horovod_rs.spark.common.params import EstimatorParams  # noqa: F401  (Horovod's API here too)
from horovod_rs.spark.common.params import declare
from horovod_rs.spark.keras import remote, util

KERAS_ESTIMATOR_PARAMS = [
    ("custom_objects", "CustomObjects", {}, None, "custom objects (functions, classes) the model needs to load"),
    ("checkpoint_callback", "CheckpointCallback", None, None,
     "a ModelCheckpoint (e.g. BestModelCheckpoint) whose saved model fit returns"),
    ("data_module", "DataModule", None, None, "Horovod's data module class; the data reaches the ranks as Arrow here"),
    ("backend_env", "BackendEnv", {}, None, "environment variables set in the ranks while they train"),
]


class KerasEstimator(HorovodEstimator):
    """Fits a tf.keras model on a DataFrame with horovod_rs across Spark executors.

    Horovod's parameters and defaults; see docs/estimators.md for the few that work differently
    (the Petastorm reader options have no effect: rows reach the ranks as Arrow batches)."""

    run_id_prefix = "keras"
    model_file_extension = ".keras"

    @keyword_only
    def __init__(self, num_proc=None, data_module=None, model=None, backend=None, store=None, custom_objects=None,
                 optimizer=None, loss=None, loss_weights=None, sample_weight_col=None, gradient_compression=None,
                 metrics=None, feature_cols=None, label_cols=None, continuous_cols=None, categorical_cols=None,
                 validation=None, callbacks=None, batch_size=None, val_batch_size=None, epochs=None, verbose=None,
                 random_seed=None, shuffle_buffer_size=None, shuffle=True, partitions_per_process=None, run_id=None,
                 train_steps_per_epoch=None, validation_steps_per_epoch=None, transformation_fn=None,
                 train_reader_num_workers=None, val_reader_num_workers=None, reader_pool_type="thread",
                 label_shapes=None, checkpoint_callback=None, inmemory_cache_all=False, backend_env=None,
                 use_gpu=True, mp_start_method=None, tensorflow_dataset_prefetch_buffer_size=0, mlflow_tracking=None):
        super().__init__()
        self.setParams(**{k: v for k, v in self._input_kwargs.items() if v is not None})

    @property
    def float_type(self):
        return "double" if util.keras().backend.floatx() == "float64" else "float"

    def _check_model(self):
        k = util.keras()
        model = self.getModel()
        if not isinstance(model, k.Model):
            raise ValueError("model has to be an instance of tensorflow.keras.Model, not %s" % type(model).__name__)
        if not self.getLoss():
            raise ValueError("Loss parameter is required for the model to compile")
        if self.getOptimizer() is None and getattr(model, "optimizer", None) is None:
            raise ValueError("Optimizer must be provided either as a parameter or as part of a compiled model")
        features, labels = self.getFeatureCols(), self.getLabelCols()
        if len(model.inputs) != len(features):
            raise ValueError("the model has %d inputs (%s) but %d feature columns are given (%s): each feature "
                             "column feeds one input, in order" % (len(model.inputs), _names(model.inputs),
                                                                    len(features), features))
        if len(model.outputs) != len(labels):
            raise ValueError("the model has %d outputs (%s) but %d label columns are given (%s): each label "
                             "column is one output's target, in order" % (len(model.outputs), _names(model.outputs),
                                                                          len(labels), labels))

    def _remote_trainer(self, run_id, data_spec, resume):
        model = self.getModel()
        optimizer = self.getOptimizer() or model.optimizer
        checkpoint, compression = self.getCheckpointCallback(), self.getGradientCompression()
        settings = remote.KerasSettings(
            **self._shared_settings(run_id, data_spec, resume),
            model=util.serialize_model(model),
            optimizer=util.serialize_optimizer(optimizer),
            custom_objects=_dumps(self.getCustomObjects() or {}, "custom_objects"),
            loss=util.portable(self.getLoss()),
            loss_weights=self.getLossWeights(),
            metrics=util.portable(self.getMetrics() or []),
            callbacks=_dumps(list(self.getCallbacks() or []), "callbacks"),
            checkpoint_callback=_dumps(checkpoint, "checkpoint_callback") if checkpoint is not None else None,
            gradient_compression=_dumps(compression, "gradient_compression") if compression is not None else None,
            backward_passes_per_step=self.getBackwardPassesPerStep(),
            floatx=util.keras().backend.floatx(),
        )
        return remote.make_trainer(settings)

    def _backend_env(self):
        return dict(self.getBackendEnv() or {})

    def _mlflow_model(self, model):
        # Keras 3's models are MLflow's keras flavor; Keras 2's (tf_keras) its tensorflow flavor.
        legacy = type(model).__module__.startswith("tf_keras")
        requirements = functools.partial(tracking.pinned_requirements, model, "tensorflow",
                                         "tf_keras" if legacy else "keras")
        return ("mlflow.tensorflow" if legacy else "mlflow.keras"), {"model": model, "pip_requirements": requirements}

    def _create_model(self, result, run_id, infos):
        model = util.deserialize_model(result["model"], self.getCustomObjects())
        return KerasModel(history=result["history"], model=model, feature_columns=self.getFeatureCols(),
                          label_columns=self.getLabelCols(), custom_objects=self.getCustomObjects(), run_id=run_id,
                          _metadata=infos, _floatx=util.keras().backend.floatx())

    def _model_to_bytes(self, model):
        return util.serialize_model(model)

    def _model_from_bytes(self, data, values):
        return util.deserialize_model(data, values.get("custom_objects"))

    def _portable_param(self, name, value):
        if name == "optimizer" and value is not None:
            return ("keras-optimizer", util.serialize_optimizer(value))
        if name in ("loss", "metrics") and value is not None:
            return ("keras-portable", util.portable(value))
        return value

    def _restored_param(self, name, value, saved):
        if isinstance(value, tuple) and len(value) == 2 and value[0] == "keras-optimizer":
            return util.deserialize_optimizer(value[1], saved.get("custom_objects"))
        if isinstance(value, tuple) and len(value) == 2 and value[0] == "keras-portable":
            return util.restore(value[1], saved.get("custom_objects"))
        return value


class KerasModel(HorovodModel):
    """A trained Keras model: ``transform`` predicts in the executors; ``getModel()`` (or
    ``keras()``) is the tf.keras model itself."""

    model_file_extension = ".keras"

    @keyword_only
    def __init__(self, history=None, model=None, feature_columns=None, label_columns=None, custom_objects=None,
                 run_id=None, _metadata=None, _floatx=None):
        super().__init__()
        if label_columns:
            self.setOutputCols([col + "__output" for col in label_columns])
        self.setParams(**{k: v for k, v in self._input_kwargs.items() if v is not None})

    @property
    def float_type(self):
        return "double" if self.getOrDefault(self._floatx) == "float64" else "float"

    def keras(self):
        """The trained tf.keras model."""
        return self.getModel()

    def _output_widths(self, sample_inputs):
        return [int(np.prod([d for d in shape[1:] if d != -1])) for shape in util.shapes(self.getModel().outputs)]

    def _predictor_factory(self):
        data = util.serialize_model(self.getModel())
        custom_objects = _dumps(self.getCustomObjects() or {}, "custom_objects")
        floatx = self.getOrDefault(self._floatx)

        def factory():
            tf = frameworks.tensorflow()

            if floatx:
                tf.keras.backend.set_floatx(floatx)
            model = util.deserialize_model(data, cloudpickle.loads(custom_objects), compile=False)
            inputs = [tuple(-1 if d is None else d for d in t.shape) for t in model.inputs]

            def predict(arrays):
                x = [a.reshape((a.shape[0],) + s[1:]) if -1 not in s[1:] else a for a, s in zip(arrays, inputs)]
                out = model.predict_on_batch(x[0] if len(x) == 1 else x)
                return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]

            return predict

        return factory

    def _model_to_bytes(self, model):
        return util.serialize_model(model)

    def _model_from_bytes(self, data, values):
        return util.deserialize_model(data, values.get("custom_objects"))


declare(KerasEstimator, KERAS_ESTIMATOR_PARAMS)
declare(KerasModel, [("custom_objects", "CustomObjects", {}, None, "custom objects the model needs to load"),
                     ("_floatx", "_Floatx", None, None, "Keras's float type when the model was trained")])


def _names(tensors):
    return [getattr(t, "name", "?") for t in tensors]


def _dumps(value, what):
    try:
        return cloudpickle.dumps(value)
    except Exception as e:
        raise ValueError("%s cannot be sent to the executors (pickling failed: %s)" % (what, e)) from None
