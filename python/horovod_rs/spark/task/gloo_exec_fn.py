"""Horovod's ``horovod.spark.task.gloo_exec_fn``, by name only (see ``horovod_rs.spark.driver``)."""

from horovod_rs.spark.driver import launcher_function

main = launcher_function("gloo_exec_fn.main")
