"""HorovodEstimator and HorovodModel for PySpark: thin wrappers over the JVM classes.

The training runs in the JVM and the native trainer (no Python on the executors): these classes
only carry params across py4j, as pyspark.ml's own wrappers do. Needs horovod-rs.jar on the
session (``--jars horovod-rs.jar``)::

    from horovod_rs.spark.ml import HorovodEstimator
    model = HorovodEstimator(modelSpec=spec, labelCols=["y"], numProc=2, epochs=5).fit(df)
    model.transform(df)

``modelSpec`` takes the model-spec JSON (docs/model-spec.md) as a string or a dict.

Saved models and pipelines load from Python as well (``HorovodModel.load``,
``PipelineModel.load``): pyspark finds a JVM stage's Python class under the JVM class's name
(``horovod.rs.spark.ml``), which this module answers to once imported.
"""

import json
import sys

from pyspark import keyword_only
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.util import JavaMLReadable, JavaMLReader, JavaMLWritable
from pyspark.ml.wrapper import JavaEstimator, JavaModel

_ESTIMATOR_CLASS = "horovod.rs.spark.ml.HorovodEstimator"
_MODEL_CLASS = "horovod.rs.spark.ml.HorovodModel"


class _Reader(JavaMLReader):
    """Loads through the JVM class, whose package is not pyspark's."""

    @classmethod
    def _java_loader_class(cls, clazz):
        return clazz._java_class


def _spec_json(value):
    """A model spec as JSON text, from text or a dict."""
    return value if isinstance(value, str) else json.dumps(value)


def _param(name, converter, doc):
    return Param(Params._dummy(), name, doc, typeConverter=converter)


_lists = TypeConverters.toListString
_str = TypeConverters.toString
_int = TypeConverters.toInt
_float = TypeConverters.toFloat
_bool = TypeConverters.toBoolean

# Shared with the model: (name, converter, doc); docs as on the JVM class.
_MODEL_PARAMS = [
    ("featureCols", _lists, "feature columns; empty: the columns the model spec's inputs name"),
    ("outputCols", _lists, "columns transform adds, one per model output"),
    ("modelSpec", _str, "the model, as model-spec JSON"),
]
_ESTIMATOR_PARAMS = _MODEL_PARAMS + [
    ("labelCols", _lists, "label columns, one per model output, in order"),
    ("numProc", _int, "ranks (barrier tasks); 0: Spark's default parallelism"),
    ("validation", _str, "validation rows: a column name, or a fraction such as 0.1"),
    ("store", _str, "Hadoop FileSystem URI for checkpoints, the model and the history"),
    ("runId", _str, "the run's directory in the store; an existing run id resumes"),
    ("dropInvalidRows", _bool, "drop rows with nulls, NaN labels or ragged arrays"),
    ("useGpu", _bool, "reserve a GPU for every rank (a task resource request); the native trainer "
               "still trains on the CPU: for GPU training use the Python estimators"),
    ("verbose", _int, "0: quiet, 1: one line per epoch on the driver"),
    ("batchSize", _int, "training rows per step on each rank"),
    ("valBatchSize", _int, "validation rows per step; 0: batchSize"),
    ("epochs", _int, "passes over the training data"),
    ("trainStepsPerEpoch", _int, "steps per epoch on every rank; 0: automatic"),
    ("optimizer", _str, "sgd, adam or adamw"),
    ("learningRate", _float, "the optimizer's learning rate"),
    ("momentum", _float, "sgd's momentum"),
    ("weightDecay", _float, "adamw's decoupled weight decay"),
    ("epsilon", _float, "adam's and adamw's epsilon"),
    ("loss", _str, "mse, mae, binary_crossentropy, categorical_crossentropy, sparse_categorical_crossentropy"),
    ("metrics", _lists, "metrics reported per epoch"),
    ("monitor", _str, "metric that picks the best epoch"),
    ("earlyStoppingPatience", _int, "epochs without improvement before stopping; 0: never"),
    ("shuffleBufferSize", _int, "rows in each rank's shuffle buffer"),
    ("seed", _int, "seed of weight init, dropout, shuffling and validation split"),
]


def _declare(cls, params):
    """Declares each param as a class attribute, as pyspark.ml's classes do."""
    for name, converter, doc in params:
        setattr(cls, name, _param(name, converter, doc))
    return cls


class HorovodEstimator(JavaEstimator, JavaMLReadable, JavaMLWritable):
    """Fits a deep model on a DataFrame across executors (see docs/estimator.md)."""

    _java_class = _ESTIMATOR_CLASS

    @classmethod
    def read(cls):
        return _Reader(cls)

    @keyword_only
    def __init__(self, **kwargs):
        super().__init__()
        self._java_obj = self._new_java_obj(_ESTIMATOR_CLASS, self.uid)
        unknown = set(kwargs) - {name for name, _, _ in _ESTIMATOR_PARAMS}
        if unknown:
            raise TypeError(f"unknown HorovodEstimator params: {sorted(unknown)}")
        if "validation" in kwargs and not isinstance(kwargs["validation"], str):
            kwargs["validation"] = repr(float(kwargs["validation"]))
        if "modelSpec" in kwargs:
            kwargs["modelSpec"] = _spec_json(kwargs["modelSpec"])
        self._set(**kwargs)

    def setParams(self, **kwargs):
        """Sets any of the params by name."""
        if "modelSpec" in kwargs:
            kwargs["modelSpec"] = _spec_json(kwargs["modelSpec"])
        return self._set(**kwargs)

    def _create_model(self, java_model):
        return HorovodModel(java_model)


class HorovodModel(JavaModel, JavaMLReadable, JavaMLWritable):
    """A fitted model: transform appends one column per model output."""

    _java_class = _MODEL_CLASS

    @classmethod
    def read(cls):
        return _Reader(cls)

    def __init__(self, java_model=None):
        super().__init__(java_model)
        if java_model is not None:
            self._resetUid(java_model.uid())
            self._transfer_params_from_java()

    def getHistory(self):
        """Per-epoch metrics: a list of dicts (epoch, loss, val_loss, ...)."""
        return [dict(epoch.items()) for epoch in self._java_obj.getHistory()]

    def setOutputCols(self, value):
        """Names the output columns, one per model output."""
        return self._set(outputCols=value)


_declare(HorovodEstimator, _ESTIMATOR_PARAMS)
_declare(HorovodModel, _MODEL_PARAMS)

# pyspark loads a saved JVM stage through the Python class named like the JVM class.
sys.modules.setdefault("horovod.rs.spark.ml", sys.modules[__name__])
