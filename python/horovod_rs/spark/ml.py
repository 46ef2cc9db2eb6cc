"""HorovodEstimator and HorovodModel for PySpark: thin wrappers over the JVM classes.

The training runs in the JVM and the native trainer (no Python on the executors): these classes
only carry params to the JVM stages, as pyspark.ml's own wrappers do. Needs horovod-rs.jar on the
session (``--jars horovod-rs.jar``)::

    from horovod_rs.spark.ml import HorovodEstimator
    model = HorovodEstimator(modelSpec=spec, labelCols=["y"], numProc=2, epochs=5).fit(df)
    model.transform(df)

``modelSpec`` takes the model-spec JSON (docs/model-spec.md) as a string or a dict.

From a classic session the params reach the JVM over py4j. From a Spark Connect session (PySpark
4.0 or newer) the Connect server builds the JVM stages itself (Spark ML on Connect): the jar must
be on the server, which finds the two classes registered in it (META-INF/services). PySpark 3.5's
Connect client has no Spark ML; there both classes say what to use instead.

Saved models and pipelines load from Python as well (``HorovodModel.load``,
``PipelineModel.load``). PySpark finds a JVM stage's Python class by the JVM class's name, and,
under Connect, names the JVM class by the Python class's module: so both classes are declared in
``horovod.rs.spark.ml``, the JVM package, a module name this module answers to once imported.
"""

import json
import os
import posixpath
import sys
import uuid
import warnings
from functools import wraps

import pyspark
from pyspark import keyword_only
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.util import JavaMLReadable, JavaMLWritable
from pyspark.ml.wrapper import JavaEstimator, JavaModel
from pyspark.sql.utils import is_remote

_JVM_PACKAGE = "horovod.rs.spark.ml"
_ESTIMATOR_CLASS = _JVM_PACKAGE + ".HorovodEstimator"
_MODEL_CLASS = _JVM_PACKAGE + ".HorovodModel"
# Where getHistory from a Spark Connect client has the server save a model's temporary copy: the
# directory PySpark's own Spark ML on Connect keeps temporary files in, else /tmp, both on the
# server's default file system.
_TEMP_DIR_VARIABLE = "SPARKML_TEMP_DFS_PATH"


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


def _require_spark_ml_on_connect():
    """Fails a Spark Connect session of PySpark 3.5, whose client has no Spark ML, before the
    wrappers reach for a JVM it does not have."""
    if is_remote() and int(pyspark.__version__.split(".")[0]) < 4:
        raise RuntimeError(
            f"HorovodEstimator and HorovodModel cannot run from a Spark Connect session of PySpark "
            f"{pyspark.__version__}: its Connect client has no Spark ML (Spark ML on Connect came with "
            "Spark 4.0). Use a classic SparkSession (on Databricks, a cluster in dedicated access mode), "
            "PySpark 4 with a Spark 4 Connect server, or the Python estimators (horovod_rs.spark.keras, "
            "horovod_rs.spark.torch, horovod_rs.spark.lightning)."
        )


def _naming_a_missing_jar(call, java_class):
    """``call``, with a Spark Connect server's "unsupported ML operator" for ``java_class`` (the
    server has no such class registered) turned into what to do about it."""

    @wraps(call)
    def checked(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        except Exception as error:
            condition = getattr(error, "getCondition", getattr(error, "getErrorClass", lambda: None))()
            if condition == "CONNECT_ML.UNSUPPORTED_EXCEPTION" and java_class in str(error):
                raise RuntimeError(
                    f"the Spark Connect server cannot find {java_class}: the horovod-rs jar of its Spark "
                    "line must be on the server (spark-submit --jars or spark.jars when the server starts, "
                    "or a cluster library)"
                ) from error
            raise

    return checked


def _epochs(history_json):
    """Per-epoch metrics from the trainer's history JSON, as HorovodModel.getHistory gives them on
    the JVM: epoch (from 1), samples_per_second, the training metrics, the validation ones
    prefixed ``val_``; JSON's null (a NaN) as NaN."""

    def number(value):
        return float("nan") if value is None else float(value)

    epochs = []
    for report in json.loads(history_json):
        epoch = {"epoch": number(report.get("epoch", 0)) + 1,
                 "samples_per_second": number(report.get("samples_per_second", 0))}
        epoch.update((name, number(value)) for name, value in report.get("train", {}).items())
        epoch.update(("val_" + name, number(value)) for name, value in report.get("val", {}).items())
        epochs.append(epoch)
    return epochs


def _history_json_on_server(model):
    """A Spark Connect server's model's history JSON. Spark ML on Connect lets a client call only
    Spark's own models' methods, so the server saves a copy of the model (its history is a file
    of the copy), the history is read as a DataFrame, and the copy is deleted."""
    from pyspark.ml.util import invoke_helper_attr
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    path = posixpath.join(os.environ.get(_TEMP_DIR_VARIABLE, "/tmp"), "horovod-rs-model-" + uuid.uuid4().hex)
    try:
        model.write().save(path)
        return spark.read.text(path + "/data/history.json", wholetext=True).first()[0]
    except Exception as error:
        reason = str(error).splitlines()[0]  # the server's stack trace stays on the chained error
        raise RuntimeError(
            f"could not read the model's history from a copy saved at {path} on the Spark Connect server's "
            f"file system (set {_TEMP_DIR_VARIABLE} to a directory the cluster can write): {reason}"
        ) from error
    finally:
        try:
            invoke_helper_attr("handleOverwrite", path, True)  # deletes the copy
        except Exception as error:
            warnings.warn(f"could not delete the model's temporary copy at {path}: {str(error).splitlines()[0]}")


class _JvmPersistence(JavaMLReadable, JavaMLWritable):
    """Saving and loading through the JVM class (``_java_class``): over py4j from a classic
    session, by the server from a Spark Connect one."""

    _java_class = None

    @classmethod
    def read(cls):
        _require_spark_ml_on_connect()
        reader = super().read()
        if is_remote():
            reader.load = _naming_a_missing_jar(reader.load, cls._java_class)
        return reader

    def write(self):
        writer = super().write()
        if is_remote():
            writer.save = _naming_a_missing_jar(writer.save, self._java_class)
        return writer


class HorovodEstimator(JavaEstimator, _JvmPersistence):
    """Fits a deep model on a DataFrame across executors (see docs/estimator.md)."""

    _java_class = _ESTIMATOR_CLASS

    @keyword_only
    def __init__(self, **kwargs):
        _require_spark_ml_on_connect()
        super().__init__()
        self._java_obj = self._new_java_obj(self._java_class, self.uid)
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

    def _fit(self, dataset):
        model = _naming_a_missing_jar(super()._fit, self._java_class)(dataset)
        if is_remote():
            # Spark Connect names the model after its estimator; the JVM model (FitJob) and so a
            # classic session's model are named with "_model" after it.
            model._resetUid(self.uid + "_model")
        _track(self, model)
        return model

    def _create_model(self, java_model):
        return HorovodModel(java_model)


def _track(estimator, model):
    """An MLflow run active on the driver gets the fit's params and its history's metrics (step:
    the epoch, from 0), as the Python estimators log them (``horovod_rs.spark.common.tracking``)."""
    from horovod_rs.spark.common import tracking

    tracker = tracking.tracker_for(None, None)
    if tracker is None:
        return
    try:
        tracker.log_params(tracking.loggable_params(estimator))
        for epoch in model.getHistory():
            tracker.log_metrics(int(epoch["epoch"]) - 1, {k: v for k, v in epoch.items() if k != "epoch"})
    finally:
        tracker.close()


class HorovodModel(JavaModel, _JvmPersistence):
    """A fitted model: transform appends one column per model output."""

    _java_class = _MODEL_CLASS

    def __init__(self, java_model=None):
        super().__init__(java_model)
        self._history_json = None  # read once from a Spark Connect server
        if java_model is not None and not is_remote():
            self._transfer_params_from_java()

    def getHistory(self):
        """Per-epoch metrics: a list of dicts (epoch, loss, val_loss, ...).

        From a Spark Connect client the first call has the server save a temporary copy of the
        model (under ``$SPARKML_TEMP_DFS_PATH``, else ``/tmp``, on its default file system) to
        read the history from; later calls reuse what it read."""
        if not is_remote():
            return _epochs(self._java_obj.getHistoryJson())
        if self._history_json is None:
            self._history_json = _history_json_on_server(self)
        return _epochs(self._history_json)

    def setOutputCols(self, value):
        """Names the output columns, one per model output."""
        return self._set(outputCols=value)


_declare(HorovodEstimator, _ESTIMATOR_PARAMS)
_declare(HorovodModel, _MODEL_PARAMS)

# Both classes live in the JVM package's module (see the module doc).
HorovodEstimator.__module__ = HorovodModel.__module__ = _JVM_PACKAGE
sys.modules.setdefault(_JVM_PACKAGE, sys.modules[__name__])
