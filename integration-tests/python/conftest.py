"""One real Spark cluster for the PySpark tests: a driver (this process) and two executors
(``local-cluster[2,1,1024]``) with horovod-rs.jar and its plugin, as a user would start them."""

import os

import pytest
from pyspark.sql import SparkSession

from horovod_rs.spark.common.frameworks import triton_before_tensorflow

# The Keras and the Lightning tests share this process: TensorFlow must not load before Triton.
triton_before_tensorflow()


@pytest.fixture(scope="session")
def spark():
    session = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .config("spark.jars", os.environ["HOROVOD_RS_JAR"])
        .config("spark.plugins", "horovod.rs.spark.HorovodPlugin")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    yield session
    session.stop()
