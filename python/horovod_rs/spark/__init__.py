"""Spark integration of horovod-rs: ``run`` and ``run_elastic`` (Horovod's Run API) and ``ml`` (the
estimator); ``jar_path`` and ``configure_builder`` put the package's jar on a session (``jars``)."""

from horovod_rs.spark.jars import configure_builder, jar_path  # noqa: F401


def run(*args, **kwargs):
    """horovod_rs.spark.run_api.run, imported lazily so ``horovod_rs.spark.ml`` needs no native module."""
    from horovod_rs.spark.run_api import run as _run

    return _run(*args, **kwargs)


def run_elastic(*args, **kwargs):
    """horovod_rs.spark.run_api.run_elastic, imported lazily as ``run`` is."""
    from horovod_rs.spark.run_api import run_elastic as _run_elastic

    return _run_elastic(*args, **kwargs)
