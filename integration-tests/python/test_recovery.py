"""A fit that loses an executor (kill -9 of its JVM) in the middle of training still finishes:
the job runs again and resumes from the store's last checkpoint, on the rank left when
``spark.horovod.rs.fitMinProcesses`` allows it. Also the Run API's ``max_attempts``, whose next
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
    """Kills this Python worker's executor JVM with SIGKILL, unless ``marker`` exists (it is
    created first, so a job run again does not kill again)."""
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
                return
        with open("/proc/%d/stat" % pid) as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])  # the parent's pid
    raise RuntimeError("no executor JVM among this process's parents")


@pytest.fixture
def fits_may_shrink_to_one_rank(spark):
    spark.conf.set("spark.horovod.rs.fitMinProcesses", "1")
    yield
    spark.conf.unset("spark.horovod.rs.fitMinProcesses")


@pytest.mark.slow  # (30 s: make pyspark-slow-test; make faults kills executors under fits too)
def test_fit_survives_an_executor_killed_in_epoch_two_and_resumes_from_its_checkpoint(spark, tmp_path,
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

    df = spark.range(0, 3000, numPartitions=2).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2") \
        .selectExpr("x1", "x2", "2 * x1 - 3 * x2 + 0.5 AS y")
    x1, x2 = k.Input(shape=(1,), name="x1"), k.Input(shape=(1,), name="x2")
    model = k.Model([x1, x2], k.layers.Dense(1)(k.layers.Dense(16, activation="relu")(k.layers.Concatenate()([x1, x2]))))
    fitted = KerasEstimator(num_proc=2, store=Store.create(str(tmp_path / "store")), model=model,
                            optimizer=k.optimizers.Adam(0.01), loss="mse", feature_cols=["x1", "x2"],
                            label_cols=["y"], batch_size=64, epochs=4, random_seed=1, verbose=0,
                            callbacks=[KillsRankOneInEpochTwo()]).fit(df)

    assert os.path.exists(marker), "the executor was never killed: the test did not test recovery"
    retries = fitted.getRetries()
    # The second attempt did not wait for the executor Spark restarts: it ran on the slot left.
    assert [(r["attempt"], r["resumed_after_epoch"], r["num_proc"]) for r in retries] == [(2, 1, 1)], retries
    assert "ExecutorLostFailure" in retries[0]["error"]
    assert len(fitted.getHistory()["loss"]) == 4
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
