"""Horovod's ``horovod.spark.driver.host_discovery``, by name only (see ``horovod_rs.spark.driver``):
elastic jobs learn their hosts from Spark's task slots instead."""

from horovod_rs.spark.driver import launcher_service

SparkDriverHostDiscovery = launcher_service("SparkDriverHostDiscovery")
