"""One real Spark cluster for the PySpark tests: a driver and two executors
(``local-cluster[2,1,1024]``) with horovod-rs.jar and its plugin, as a user would start them.

Classic by default: the driver is this process. With ``HOROVOD_RS_TEST_CONNECT=1`` the same tests
run from a Spark Connect session instead: a Connect server (the driver of the same kind of
cluster) is started once for the suite and this process is only its client, as a Spark 4 client,
Databricks standard access mode or Databricks Connect would be. Tests that need a classic session
are marked ``classic_only``.
"""

import os

import pytest
from pyspark.sql import SparkSession

from connect_server import ConnectServer
from horovod_rs.spark.common.frameworks import triton_before_tensorflow

# The Keras and the Lightning tests share this process: TensorFlow must not load before Triton.
triton_before_tensorflow()

MASTER = "local-cluster[2,1,1024]"
CONNECT = os.environ.get("HOROVOD_RS_TEST_CONNECT") == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "classic_only: needs a classic SparkSession (skipped under Connect)")
    config.addinivalue_line("markers", "slow: an example script run as its own Spark application (make pyspark-slow-test, "
                                       "not make test)")


def pytest_collection_modifyitems(config, items):
    if CONNECT:
        skip = pytest.mark.skip(reason="needs a classic SparkSession")
        for item in items:
            if "classic_only" in item.keywords:
                item.add_marker(skip)


def cluster_conf():
    """What both kinds of session start their cluster with."""
    return {
        "spark.jars": os.environ["HOROVOD_RS_JAR"],
        "spark.plugins": "horovod.rs.spark.HorovodPlugin",
        "spark.ui.enabled": "false",
    }


# The suite's Connect server abandons (and interrupts) an execution whose client went away after
# this long (Spark's default: 5 minutes), so that a test can see a job stop without its client. A
# server notices a silent client's absence only when its response stream ends and is not
# reattached: it ends every STREAM_S here (Spark's default: 2 minutes).
DETACHED_TIMEOUT_S = 10
STREAM_S = 5


def connect_only(test):
    return pytest.mark.skipif(not CONNECT, reason="needs a Spark Connect session")(test)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    if CONNECT:
        conf = dict(cluster_conf(), **{"spark.connect.execute.manager.detachedTimeout": "%ds" % DETACHED_TIMEOUT_S,
                                       "spark.connect.execute.manager.maintenanceInterval": "1s",
                                       "spark.connect.execute.reattachable.senderMaxStreamDuration": "%ds" % STREAM_S})
        with ConnectServer(MASTER, conf, tmp_path_factory.mktemp("connect-server")) as server:
            session = SparkSession.builder.remote(server.url).getOrCreate()
            yield session
            session.stop()
        return
    builder = SparkSession.builder.master(MASTER)
    for key, value in cluster_conf().items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()


@pytest.fixture
def mlflow_run(tmp_path, monkeypatch):
    """An MLflow run active on the driver, tracked in a local file store (MLflow 3 keeps its file
    store only when asked to); yields the run's id."""
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    with mlflow.start_run() as run:
        yield run.info.run_id
