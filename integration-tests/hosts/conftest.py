"""What both host tests share: the project's standalone cluster, and a session on it for a 4-rank job
(two executors of two cores)."""

import os
import sys

from pyspark.sql import SparkSession

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from fault_spark_driver import StandaloneCluster  # noqa: E402,F401 (the tests' cluster)


def four_rank_session(cluster, driver_host):
    """A session on ``cluster`` whose driver listens on ``driver_host`` (set, not inherited from an
    earlier session of this process)."""
    return (SparkSession.builder.master(cluster.url)
            .config("spark.driver.host", driver_host).config("spark.driver.bindAddress", driver_host)
            .config("spark.executor.cores", "2").config("spark.executor.memory", "1g")
            .config("spark.cores.max", "4").config("spark.ui.enabled", "false")
            .getOrCreate())
