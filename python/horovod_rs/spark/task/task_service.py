"""Horovod's ``horovod.spark.task.task_service``, by name only (see ``horovod_rs.spark.driver``)."""

from horovod_rs.spark.driver import launcher_service

SparkTaskService = launcher_service("SparkTaskService")
SparkTaskClient = launcher_service("SparkTaskClient")
