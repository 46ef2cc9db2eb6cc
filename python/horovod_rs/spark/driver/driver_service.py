"""Horovod's ``horovod.spark.driver.driver_service``, by name only (see ``horovod_rs.spark.driver``)."""

from horovod_rs.spark.driver import launcher_service

SparkDriverService = launcher_service("SparkDriverService")
SparkDriverClient = launcher_service("SparkDriverClient")
