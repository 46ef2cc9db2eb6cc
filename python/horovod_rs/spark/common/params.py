"""The estimators' and models' params: Horovod's names, defaults and accessors.

Each param is declared once in a table (name, accessor suffix, default, doc); the ``setX``/``getX``
methods Horovod's classes have are generated from it, so a param is never spelled twice.
"""

from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasOutputCols

_int, _float, _bool, _str = TypeConverters.toInt, TypeConverters.toFloat, TypeConverters.toBoolean, \
    TypeConverters.toString
_list_str = TypeConverters.toListString

# (name, accessor suffix, default, type converter or None, doc)
ESTIMATOR_PARAMS = [
    ("num_proc", "NumProc", None, None, "number of processes (Spark tasks); default: spark.default.parallelism"),
    ("backend", "Backend", None, None, "Backend that runs the ranks; default: SparkBackend(num_proc)"),
    ("store", "Store", None, None, "Store for checkpoints, logs and prepared data"),
    ("model", "Model", None, None, "the model to train"),
    ("optimizer", "Optimizer", None, None, "the optimizer (wrapped in hvd.DistributedOptimizer)"),
    ("loss", "Loss", None, None, "loss function, or a list of them (one per output)"),
    ("loss_weights", "LossWeights", None, None, "weight of each output's loss"),
    ("sample_weight_col", "SampleWeightCol", None, None, "column holding each row's weight"),
    ("gradient_compression", "GradientCompression", None, None, "Horovod gradient compression, e.g. fp16"),
    ("compress_sparse_cols", "CompressSparseCols", False, _bool, "Horovod's Petastorm option; no effect here"),
    ("metrics", "Metrics", [], None, "metrics to record"),
    ("feature_cols", "FeatureCols", None, _list_str, "feature columns, one per model input, in order"),
    ("label_cols", "LabelCols", None, _list_str, "label columns, one per model output, in order"),
    ("continuous_cols", "ContinuousCols", None, _list_str, "continuous columns (NVTabular's; informational)"),
    ("categorical_cols", "CategoricalCols", None, _list_str, "categorical columns (NVTabular's; informational)"),
    ("validation", "Validation", None, None,
     "validation rows: a column name (true/non-zero rows) or a fraction in [0, 1)"),
    ("callbacks", "Callbacks", [], None, "framework callbacks"),
    ("batch_size", "BatchSize", 32, _int, "rows per step on each rank"),
    ("val_batch_size", "ValBatchSize", None, None, "rows per validation step; default: batch_size"),
    ("epochs", "Epochs", 1, _int, "passes over the training data"),
    ("verbose", "Verbose", 1, _int, "0 silent, 1 progress, 2 one line per epoch"),
    ("random_seed", "RandomSeed", None, None, "seed of the framework, shuffling and the validation split"),
    ("shuffle_buffer_size", "ShufflingBufferSize", None, None,
     "rows shuffled together when a partition is spilled to disk (deprecated in Horovod)"),
    ("shuffle", "Shuffle", True, _bool, "shuffle the training rows each pass"),
    ("partitions_per_process", "PartitionsPerProcess", 10, _int, "Parquet files per process (prepare_data)"),
    ("run_id", "RunId", None, None, "the run's directory in the store; an existing run resumes"),
    ("train_steps_per_epoch", "TrainStepsPerEpoch", None, None, "steps per epoch; default: the rows' worth"),
    ("validation_steps_per_epoch", "ValidationStepsPerEpoch", None, None, "validation steps per epoch"),
    ("transformation_fn", "TransformationFn", None, None,
     "function applied to each batch of rows (a pandas DataFrame) as it is loaded"),
    ("transformation_edit_fields", "TransformationEditFields", None, None, "Petastorm TransformSpec option"),
    ("transformation_removed_fields", "TransformationRemovedFields", None, None, "Petastorm TransformSpec option"),
    ("train_reader_num_workers", "TrainReaderNumWorker", 2, _int, "Petastorm reader option; no effect here"),
    ("val_reader_num_workers", "ValReaderNumWorker", 2, _int, "Petastorm reader option; no effect here"),
    ("reader_pool_type", "ReaderPoolType", "thread", _str, "Petastorm reader option; no effect here"),
    ("label_shapes", "LabelShapes", None, None, "shape of each label column"),
    ("inmemory_cache_all", "InMemoryCacheAll", False, _bool,
     "Horovod's Petastorm option; data is always cached here (in memory or spilled to local disk)"),
    ("use_gpu", "UseGpu", True, _bool, "train on the GPU Spark assigned to each task, when there is one"),
    ("mp_start_method", "MpStartMethod", None, None, "multiprocessing start method inside the ranks"),
    ("backward_passes_per_step", "BackwardPassesPerStep", 1, _int, "gradient accumulation steps"),
    ("tensorflow_dataset_prefetch_buffer_size", "TensorflowDatasetPrefetchBufferSize", 0, _int,
     "Horovod's tf.data option; no effect here"),
    ("mlflow_tracking", "MlflowTracking", None, None,
     "log params, epoch metrics and the model to MLflow: None (default) when a run is active on the driver, "
     "True always (a run of its own if none is active), False never"),
]

MODEL_PARAMS = [
    ("history", "History", None, None, "the training history"),
    ("model", "Model", None, None, "the trained model"),
    ("feature_columns", "FeatureColumns", None, None, "feature columns"),
    ("label_columns", "LabelColumns", None, None, "label columns"),
    ("run_id", "RunId", None, None, "the run that trained the model"),
    ("retries", "Retries", [], None, "the fit's retries after a rank was lost outside the model's code (an "
     "executor died): per retry, its attempt number, the epochs it resumed after (the next one ran again), its "
     "ranks (num_proc), the error"),
    ("timings", "Timings", None, None, "seconds the fit spent in each phase (driver, launch, join, framework, data, "
     "setup, train, validation, checkpoint, finish, return, model, other) and in all (wall); see "
     "horovod_rs.spark.common.timings"),
    ("_metadata", "_Metadata", None, None, "the training columns' types"),
]


def declare(cls, table, defaults=True):
    """Adds each param of ``table`` to ``cls`` with its ``setX``/``getX`` (skipping accessors the class
    defines itself) and returns ``cls``; ``cls.__init__`` calls ``set_defaults``."""
    for name, suffix, _, converter, doc in table:
        setattr(cls, name, Param(Params._dummy(), name, doc, typeConverter=converter))
        getter, setter = "get" + suffix, "set" + suffix
        if getter not in cls.__dict__:
            setattr(cls, getter, _getter(name))
        if setter not in cls.__dict__:
            setattr(cls, setter, _setter(name))
    cls._param_table = list(getattr(cls, "_param_table", [])) + list(table)
    return cls


def _getter(name):
    def get(self):
        return self.getOrDefault(getattr(self, name))

    get.__name__ = "get_" + name
    return get


def _setter(name):
    def set_(self, value):
        return self._set(**{name: value})

    set_.__name__ = "set_" + name
    return set_


def set_defaults(instance):
    instance._setDefault(**{name: default for name, _, default, _, _ in instance._param_table})


class EstimatorParams(Params):
    """Horovod's ``EstimatorParams``."""

    def __init__(self):
        super().__init__()
        set_defaults(self)

    def setParams(self, **kwargs):
        unknown = sorted(k for k in kwargs if not self.hasParam(k))
        if unknown:
            raise TypeError("%s got unknown params: %s" % (type(self).__name__, ", ".join(unknown)))
        return self._set(**{k: v for k, v in kwargs.items()})


class ModelParams(HasOutputCols):
    """Horovod's ``ModelParams``."""

    def __init__(self):
        super().__init__()
        set_defaults(self)

    def setParams(self, **kwargs):
        return self._set(**kwargs)

    def setLabelColoumns(self, value):  # sic: Horovod's spelling
        return self._set(label_columns=value)

    def setOutputCols(self, value):
        return self._set(outputCols=value)

    def _get_metadata(self):
        return self.getOrDefault(self._metadata)


declare(EstimatorParams, ESTIMATOR_PARAMS)
declare(ModelParams, MODEL_PARAMS)


def serialize_param(param_name, param_val, serialize_model, serialize_optimizer=None):
    """A param's value as Horovod's estimator writers serialize it: nothing for an unset value,
    the backend or the store (they are given again for each run), the model (and, given a
    function for it, the optimizer) through the framework's function, else the value as base64
    text. Horovod's ``_torch_param_serialize`` and Keras ``_serialize_param_value``."""
    from horovod_rs.runner.common.util import codec

    if param_val is None or param_name in (EstimatorParams.backend.name, EstimatorParams.store.name):
        return None
    if param_name == EstimatorParams.model.name:
        return serialize_model(param_val)
    if serialize_optimizer is not None and param_name == EstimatorParams.optimizer.name:
        return serialize_optimizer(param_val)
    return codec.dumps_base64(param_val)
