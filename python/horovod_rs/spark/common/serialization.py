"""Spark ML persistence of the estimators and models (``save``/``load``, also inside a
``Pipeline``): Spark's metadata file (so ``PipelineModel.load`` finds the Python class) with the
JSON-valued params, and beside it ``data/params.pkl`` (the other params, cloudpickled, as Horovod
stores them) and ``data/model.<ext>`` (the framework's own file, loadable without horovod_rs).
Everything goes through Spark's Hadoop FileSystem, so any URI Spark can write works.
"""

import json
import time

import cloudpickle
from pyspark.ml.util import MLReader, MLWriter

_NOT_SAVED = ("backend",)  # as Horovod's writers: a backend is re-supplied after loading


def _jvm_path(sc, path):
    jvm = sc._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path, hadoop_path.getFileSystem(sc._jsc.hadoopConfiguration())


def write_bytes(sc, path, data):
    hadoop_path, fs = _jvm_path(sc, path)
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


def read_bytes(sc, path):
    hadoop_path, fs = _jvm_path(sc, path)
    stream = fs.open(hadoop_path)
    try:
        # A byte[] returned by Java arrives as bytes (one filled in place through py4j does not).
        return bytes(sc._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def exists(sc, path):
    hadoop_path, fs = _jvm_path(sc, path)
    return fs.exists(hadoop_path)


def _json_value(value):
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


class ParamsWriter(MLWriter):
    """Writes a horovod_rs estimator or model to a directory."""

    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def saveImpl(self, path):
        sc = self.sparkSession.sparkContext
        if exists(sc, path + "/metadata") and not self.shouldOverwrite:
            raise IOError("path %s already exists; use write().overwrite().save(path) to replace it" % path)
        instance = self.instance
        values = {p.name: instance.getOrDefault(p) for p in instance.params if instance.isDefined(p)}
        json_params = {k: v for k, v in values.items() if _json_value(v) and k not in _NOT_SAVED}
        other = {k: instance._portable_param(k, v) for k, v in values.items()
                 if k not in json_params and k not in _NOT_SAVED and k != "model"}
        metadata = {"class": type(instance).__module__ + "." + type(instance).__name__,
                    "timestamp": int(round(time.time() * 1000)), "sparkVersion": sc.version, "uid": instance.uid,
                    "paramMap": json_params, "defaultParamMap": {}, "language": "Python"}
        spark = self.sparkSession
        spark.createDataFrame([(json.dumps(metadata),)], schema=["value"]).coalesce(1).write.mode(
            "overwrite").text(path + "/metadata")
        write_bytes(sc, path + "/data/params.pkl", cloudpickle.dumps(other))
        model = values.get("model")
        if model is not None:
            write_bytes(sc, path + "/data/model" + instance.model_file_extension, instance._model_to_bytes(model))


class ParamsReader(MLReader):
    """Reads what ``ParamsWriter`` wrote."""

    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path):
        from pyspark.ml.util import DefaultParamsReader

        sc = self.sparkSession.sparkContext
        metadata = DefaultParamsReader.loadMetadata(path, sc)
        instance = self.cls()
        instance._resetUid(metadata["uid"])
        values = dict(metadata["paramMap"])
        pickled = cloudpickle.loads(read_bytes(sc, path + "/data/params.pkl"))
        values.update({k: instance._restored_param(k, v, pickled) for k, v in pickled.items()})
        model_path = path + "/data/model" + instance.model_file_extension
        if exists(sc, model_path):
            values["model"] = instance._model_from_bytes(read_bytes(sc, model_path), values)
        instance._set(**{k: v for k, v in values.items() if instance.hasParam(k)})
        return instance
