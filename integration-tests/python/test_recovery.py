"""A fit that loses an executor (kill -9 of its JVM) in the middle of training still finishes:
the job runs again and resumes from the store's last checkpoint, on the rank left when
``spark.horovod.rs.fitMinProcesses`` allows it, and on both again once Spark restarted the
executor. Also the Run API's ``max_attempts``, whose next
job waits for the executor local-cluster's worker starts instead of the one that died."""

import os
import sys

import cloudpickle
import pytest

tf = pytest.importorskip("tensorflow")

from horovod_rs.spark.common.store import Store  # noqa: E402
from horovod_rs.spark.keras import KerasEstimator  # noqa: E402
from horovod_rs.spark.run_api import HorovodRunError, run  # noqa: E402


# The executors cannot import this module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def kill_my_executor_once(marker):
    """Kills this Python worker's executor JVM with SIGKILL, then this worker, unless ``marker``
    exists (it is created first, so a job run again does not kill again). The worker goes at
    once, as with a lost node: left running, it could train on with the other rank until Spark
    aborts the stage, and where the next attempt resumes would depend on how long that took."""
    import signal

    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    pid = os.getpid()
    while pid > 1:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                os.kill(pid, signal.SIGKILL)
                os._exit(137)
        with open("/proc/%d/stat" % pid) as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])  # the parent's pid
    raise RuntimeError("no executor JVM among this process's parents")


@pytest.fixture
def fits_may_shrink_to_one_rank(spark):
    spark.conf.set("spark.horovod.rs.fitMinProcesses", "1")
    yield
    spark.conf.unset("spark.horovod.rs.fitMinProcesses")


def test_a_fit_goes_on_with_the_rank_left_and_grows_back_when_the_executor_returns(spark, tmp_path,
                                                                                 fits_may_shrink_to_one_rank):
    marker = str(tmp_path / "killed")
    k = tf.keras

    class KillsRankOneInEpochTwo(k.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            import horovod_rs.tensorflow.keras as hvd

            if self.epoch == 1 and batch == 3 and hvd.rank() == 1:
                kill_my_executor_once(marker)

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

    class AloneWaitsForTheSlotsBack(k.callbacks.Callback):
        """On the one rank left, epoch 2 ends only once the driver saw the restarted executor
        (its request is what stops the attempt), so the test does not race the restart."""

        def on_epoch_end(self, epoch, logs=None):
            import time

            import horovod_rs.tensorflow.keras as hvd
            from horovod_rs.spark.common import output

            deadline = time.time() + 300
            while hvd.size() == 1 and not output.asked(output.REGROW):
                assert time.time() < deadline, "Spark did not restart the executor within 300 s"
                time.sleep(0.2)

    df = spark.range(0, 3000, numPartitions=2).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2") \
        .selectExpr("x1", "x2", "2 * x1 - 3 * x2 + 0.5 AS y")
    x1, x2 = k.Input(shape=(1,), name="x1"), k.Input(shape=(1,), name="x2")
    model = k.Model([x1, x2], k.layers.Dense(1)(k.layers.Dense(16, activation="relu")(k.layers.Concatenate()([x1, x2]))))
    fitted = KerasEstimator(num_proc=2, store=Store.create(str(tmp_path / "store")), model=model,
                            optimizer=k.optimizers.Adam(0.01), loss="mse", feature_cols=["x1", "x2"],
                            label_cols=["y"], batch_size=64, epochs=4, random_seed=1, verbose=0,
                            callbacks=[KillsRankOneInEpochTwo(), AloneWaitsForTheSlotsBack()]).fit(df)

    assert os.path.exists(marker), "the executor was never killed: the test did not test recovery"
    retries = fitted.getRetries()
    # Attempt 2 did not wait for the executor Spark restarts: it ran epoch 2 on the slot left,
    # then stopped for attempt 3 to run epochs 3 and 4 on both slots.
    assert [(r["attempt"], r["reason"], r["resumed_after_epoch"], r["num_proc"]) for r in retries] == \
        [(2, "rank lost", 1, 1), (3, "slots back", 2, 2)], retries
    assert "ExecutorLostFailure" in retries[0]["error"] and retries[1]["error"] is None
    assert len(fitted.getHistory()["loss"]) == 4
    assert fitted.transform(df).selectExpr("avg(abs(y__output - y))").first()[0] < 0.5


def kill_then_wait_alone(marker, steps):
    """Rank 1 of two kills its executor at its 30th training step; a rank alone waits at its first
    step for the driver to have seen the restarted executor (``AloneWaitsForTheSlotsBack``)."""
    import time

    import horovod_rs.torch as hvd
    from horovod_rs.spark.common import output

    if hvd.size() == 2 and hvd.rank() == 1 and steps == 30:
        kill_my_executor_once(marker)
    deadline = time.time() + 300
    while hvd.size() == 1 and steps == 1 and not output.asked(output.REGROW):
        assert time.time() < deadline, "Spark did not restart the executor within 300 s"
        time.sleep(0.2)


@pytest.mark.slow  # (60 s: make pyspark-slow-test; the Keras fit above takes the same driver path)
@pytest.mark.parametrize("family", ["torch", "lightning"])
def test_torch_and_lightning_fits_go_on_with_the_rank_left_and_grow_back(spark, tmp_path, fits_may_shrink_to_one_rank,
                                                                        family):
    import pytorch_lightning as pl
    import torch
    from pyspark.ml.feature import VectorAssembler
    from torch import nn

    from horovod_rs.spark.lightning import TorchEstimator as LightningEstimator
    from horovod_rs.spark.torch import TorchEstimator

    marker = str(tmp_path / "killed")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.steps = nn.Linear(2, 1), 0

        def forward(self, features):
            if self.training:
                self.steps += 1
                kill_then_wait_alone(marker, self.steps)
            return self.layer(features.float())

    class Lit(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer, self.steps = nn.Linear(2, 1), 0

        def forward(self, features):
            return self.layer(features.float())

        def training_step(self, batch, batch_idx):
            self.steps += 1
            kill_then_wait_alone(marker, self.steps)
            loss = nn.functional.mse_loss(self(batch["features"]).reshape(-1), batch["y"].float())
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    df = spark.range(0, 3000, numPartitions=2).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2") \
        .selectExpr("x1", "x2", "2 * x1 - 3 * x2 + 0.5 AS y")
    df = VectorAssembler(inputCols=["x1", "x2"], outputCol="features").transform(df)
    common = dict(num_proc=2, store=Store.create(str(tmp_path / "store")), feature_cols=["features"],
                  label_cols=["y"], input_shapes=[[-1, 2]], batch_size=64, epochs=4, verbose=0)
    if family == "torch":
        net = Net()
        estimator = TorchEstimator(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), loss=nn.MSELoss(),
                                   **common)
    else:
        estimator = LightningEstimator(model=Lit(), **common)
    fitted = estimator.fit(df)

    assert os.path.exists(marker), "the executor was never killed: the test did not test recovery"
    retries = fitted.getRetries()
    assert [(r["attempt"], r["reason"], r["resumed_after_epoch"], r["num_proc"]) for r in retries] == \
        [(2, "rank lost", 1, 1), (3, "slots back", 2, 2)], retries
    assert fitted.transform(df).selectExpr("avg(abs(y__output - y))").first()[0] < 0.5


# make faults' spark-executor-killed kind kills an executor under the same job; the JVM's Run API
# has HorovodRunnerIT.aLostExecutorRunsTheJobAgainWhenAsked in make test.
@pytest.mark.slow
def test_run_api_runs_again_when_asked_and_not_after_the_functions_own_error(spark, tmp_path):
    marker = str(tmp_path / "killed")

    def train():
        import horovod_rs.torch as hvd

        if hvd.rank() == 1:
            kill_my_executor_once(marker)
        return hvd.rank()

    assert run(train, num_proc=2, max_attempts=2) == [0, 1]
    assert os.path.exists(marker)

    calls = str(tmp_path / "calls")

    def fails():
        with open(calls, "a") as f:
            f.write("x")
        raise ValueError("the function's own error")

    with pytest.raises(HorovodRunError, match="the function's own error"):
        run(fails, num_proc=2, max_attempts=3)
    assert len(open(calls).read()) == 2  # one attempt, two ranks
