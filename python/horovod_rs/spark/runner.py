"""Horovod's ``horovod.spark.runner``: ``run`` and ``run_elastic`` (``horovod_rs.spark.run_api``),
and by name only the task function of Horovod's launcher (see ``horovod_rs.spark.driver``)."""

from horovod_rs.spark.driver import launcher_function
from horovod_rs.spark.run_api import run, run_elastic  # noqa: F401

_task_fn = launcher_function("_task_fn")
