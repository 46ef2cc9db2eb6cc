"""Horovod's ``horovod.spark.driver.rsh``, by name only (see ``horovod_rs.spark.driver``)."""

from horovod_rs.spark.driver import launcher_function

rsh = launcher_function("rsh")
