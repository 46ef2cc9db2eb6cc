"""Spark ML persistence of the estimators and models (``save``/``load``, also inside a
``Pipeline``): Spark's metadata file (so ``PipelineModel.load`` finds the Python class) with the
JSON-valued params, and beside it ``data/params.pkl`` (the other params, cloudpickled, as Horovod
stores them) and ``data/model.<ext>`` (the framework's own file, loadable without horovod_rs).

The metadata goes through Spark (a text file, as pyspark's own stages write it); the two data
files through fsspec from this process (``Store``'s filesystems: local paths, ``file://``,
``hdfs://``, ``s3://``, ``gs://``, ``dbfs:/`` on Databricks, ...). Neither needs a
``SparkContext``, so saving and loading work from a Spark Connect session too; there the path must
be one that both this client and the cluster reach (a shared or distributed filesystem).
"""

import json
import posixpath
import time

import cloudpickle
from pyspark.ml.util import MLReader, MLWriter

_NOT_SAVED = ("backend",)  # as Horovod's writers: a backend is re-supplied after loading


def _files(path):
    """The store (filesystem) a saved stage's data files under ``path`` live in."""
    from horovod_rs.spark.common.store import Store

    return Store.create(path)


def _data_path(path, name):
    return posixpath.join(path.rstrip("/"), "data", name)


def _metadata_exists(spark, path):
    try:
        spark.read.text(posixpath.join(path.rstrip("/"), "metadata")).limit(1).collect()
        return True
    except Exception:  # Spark's "path does not exist"
        return False


def _json_value(value):
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


class _Session:
    """The session a reader or writer was given, else the active one (classic or Connect)."""

    @property
    def sparkSession(self):
        from horovod_rs.spark.common.session import active_session

        if self._sparkSession is None:
            self._sparkSession = active_session()
        return self._sparkSession


class ParamsWriter(_Session, MLWriter):
    """Writes a horovod_rs estimator or model to a directory."""

    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def save(self, path):
        """Saves to ``path``; with ``overwrite()`` whatever was there goes first."""
        if self.shouldOverwrite:
            _files(path).delete(path)
        self.saveImpl(path)

    def saveImpl(self, path):
        spark = self.sparkSession
        if not self.shouldOverwrite and _metadata_exists(spark, path):
            raise IOError("path %s already exists; use write().overwrite().save(path) to replace it" % path)
        instance = self.instance
        values = {p.name: instance.getOrDefault(p) for p in instance.params if instance.isDefined(p)}
        json_params = {k: v for k, v in values.items() if _json_value(v) and k not in _NOT_SAVED}
        other = {k: instance._portable_param(k, v) for k, v in values.items()
                 if k not in json_params and k not in _NOT_SAVED and k != "model"}
        metadata = {"class": type(instance).__module__ + "." + type(instance).__name__,
                    "timestamp": int(round(time.time() * 1000)), "sparkVersion": spark.version, "uid": instance.uid,
                    "paramMap": json_params, "defaultParamMap": {}, "language": "Python"}
        spark.createDataFrame([(json.dumps(metadata),)], schema=["value"]).coalesce(1).write.mode(
            "overwrite").text(posixpath.join(path.rstrip("/"), "metadata"))
        files = _files(path)
        files.write(_data_path(path, "params.pkl"), cloudpickle.dumps(other))
        model = values.get("model")
        if model is not None:
            files.write(_data_path(path, "model" + instance.model_file_extension), instance._model_to_bytes(model))


class ParamsReader(_Session, MLReader):
    """Reads what ``ParamsWriter`` wrote."""

    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path):
        text = self.sparkSession.read.text(posixpath.join(path.rstrip("/"), "metadata")).first()
        if text is None:
            raise IOError("no saved stage at %s: its metadata file is empty" % path)
        metadata = json.loads(text[0])
        instance = self.cls()
        instance._resetUid(metadata["uid"])
        values = dict(metadata["paramMap"])
        files = _files(path)
        pickled = cloudpickle.loads(files.read(_data_path(path, "params.pkl")))
        values.update({k: instance._restored_param(k, v, pickled) for k, v in pickled.items()})
        model_path = _data_path(path, "model" + instance.model_file_extension)
        if files.exists(model_path):
            values["model"] = instance._model_from_bytes(files.read(model_path), values)
        instance._set(**{k: v for k, v in values.items() if instance.hasParam(k)})
        return instance
