"""The elastic tests' cluster: a driver and three executors (``local-cluster[3,1,1024]``), so that
a job that loses one still has two; its own Spark application (one per pytest process), apart
from the PySpark suite's two-executor cluster."""

import os

import pytest
from pyspark.sql import SparkSession

MASTER = "local-cluster[3,1,1024]"


@pytest.fixture(scope="session")
def spark():
    session = (SparkSession.builder.master(MASTER)
               .config("spark.jars", os.environ["HOROVOD_RS_JAR"])
               .config("spark.plugins", "horovod.rs.spark.HorovodPlugin")
               .config("spark.ui.enabled", "false")
               .getOrCreate())
    yield session
    session.stop()
