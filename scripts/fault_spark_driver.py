"""The driver of the fault suite's Spark trials (scripts/faults.py), a PySpark application on
``local-cluster[2,1,1024]`` (two executor JVMs) with 2 ranks:

    fault_spark_driver.py forever RESULT_DIR   a Run API job allreducing until the trial kills
                                               this driver; each rank writes ``started-<rank>``
                                               once it is in the job's collectives
    fault_spark_driver.py run RESULT_DIR       a Run API job of a fixed number of allreduces with
                                               ``max_attempts=2``; ``started-<rank>`` as above
    fault_spark_driver.py fit RESULT_DIR       a KerasEstimator fit of 4 epochs with a store in
                                               ``RESULT_DIR/store`` (its checkpoints are written
                                               there, temp file then rename); rank 0, the writer,
                                               leaves its pid in ``writer.pid``
    fault_spark_driver.py fit-worker RESULT_DIR
                                               the same fit on a standalone cluster of 2 one-core
                                               workers with ``spark.horovod.rs.fitMinProcesses``
                                               1: after its second epoch rank 1 kills its worker
                                               and executor JVMs, so the slot never comes back
    fault_spark_driver.py elastic-KIND RESULT_DIR
                                               a run_elastic job of 3 ranks on
                                               ``local-cluster[3,1,1024]`` counting committed
                                               steps (hvd.elastic.run, an ObjectState): ``kill``:
                                               the last rank kills its executor JVM at step 5;
                                               ``commit``: it does so inside ``commit()``, halfway
                                               through saving the state; ``grow``: another job
                                               holds a slot, so the job starts with 2 ranks
                                               (max_num_proc=3) and grows when that slot frees;
                                               ``worker``: on a standalone cluster of 3 workers
                                               (started through bin/spark-class), the last rank
                                               kills its worker and executor JVMs at step 5, so
                                               the slot never comes back; ``cluster``: ``kill``
                                               with the job's coordinator in the cluster
                                               (``spark.horovod.rs.driverRendezvous`` false)

``run``, ``fit``, ``fit-worker`` and ``elastic-*`` write ``result.json`` when they end: what came back, or the error."""

import json
import os
import signal
import sys
import threading
import time
import traceback

import cloudpickle

from pyspark.sql import SparkSession

import horovod_rs.spark

# Long enough (seconds) that the trial's kill lands while the first attempt runs.
RUN_STEPS = 5000
FIT_EPOCHS = 4
# The elastic job's committed steps; the step its victim dies at.
ELASTIC_STEPS = 40
ELASTIC_KILL_AT = 5

# The elastic job's function runs on the executors, which cannot import this script.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def allreduce_steps(result_dir, steps):
    import numpy as np

    from horovod_rs.common import arrays, basics

    basics.init()
    arrays.allreduce(np.ones(1024, dtype=np.float32), name="fault.first")
    open(os.path.join(result_dir, "started-%d" % basics.rank()), "w").close()
    step = 0
    while steps is None or step < steps:
        step += 1
        total = arrays.allreduce(np.ones(1 << 16, dtype=np.float32), name="fault.step.%d" % step, op="sum")
    return float(total[0]) if steps else None


def fit(spark, result_dir, lose_worker=False, lose_executor=False):
    """``lose_worker``: rank 1 loses its standalone worker after epoch 2 (the fit goes on with 1
    rank). ``lose_executor``: rank 1 kills its executor early in epoch 2, which local-cluster
    restarts: the fit goes on with 1 rank, then with 2 again."""
    import tensorflow as tf

    from horovod_rs.spark.common.store import Store
    from horovod_rs.spark.keras import KerasEstimator

    k = tf.keras
    df = spark.range(0, 4000, numPartitions=2).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2") \
        .selectExpr("x1", "x2", "2 * x1 - 3 * x2 + 0.5 AS y")
    x1, x2 = k.Input(shape=(1,), name="x1"), k.Input(shape=(1,), name="x2")
    hidden = k.layers.Dense(32, activation="relu")(k.layers.Concatenate()([x1, x2]))
    # Wide enough that writing a checkpoint (weights and Adam's state, ~12 MB) takes a while: the
    # trial kills an executor while one is being written.
    hidden = k.layers.Dense(1024, activation="relu")(k.layers.Dense(1024, activation="relu")(hidden))
    model = k.Model([x1, x2], k.layers.Dense(1)(hidden))

    class NamesTheWriter(k.callbacks.Callback):
        """Rank 0 writes the checkpoints: it leaves its pid for the trial, which kills its executor."""

        def on_train_begin(self, logs=None):
            import horovod_rs.tensorflow.keras as hvd

            if hvd.rank() == 0 and not os.path.exists(os.path.join(result_dir, "writer.pid")):
                with open(os.path.join(result_dir, "writer.pid.tmp"), "w") as f:
                    f.write(str(os.getpid()))
                os.rename(os.path.join(result_dir, "writer.pid.tmp"), os.path.join(result_dir, "writer.pid"))

    class LosesItsWorker(k.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            import horovod_rs.tensorflow.keras as hvd

            if epoch == 1 and hvd.size() == 2 and hvd.rank() == 1:
                kill_worker_and_executor(os.path.join(result_dir, "killed"))

    class LosesItsExecutor(k.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            import horovod_rs.tensorflow.keras as hvd

            if self.epoch == 1 and batch == 3 and hvd.size() == 2 and hvd.rank() == 1:
                kill_executor(os.path.join(result_dir, "killed"))

    class AloneWaitsForTheSlotsBack(k.callbacks.Callback):
        """The one rank left ends its epochs once the driver saw the restarted executor, so the
        fit's end does not race the restart (300 s at most)."""

        def on_epoch_end(self, epoch, logs=None):
            import horovod_rs.tensorflow.keras as hvd
            from horovod_rs.spark.common import output

            deadline = time.time() + 300
            while hvd.size() == 1 and not output.asked(output.REGROW) and time.time() < deadline:
                time.sleep(0.2)

    callbacks = [NamesTheWriter()] + ([LosesItsWorker()] if lose_worker else []) + \
        ([LosesItsExecutor(), AloneWaitsForTheSlotsBack()] if lose_executor else [])
    fitted = KerasEstimator(num_proc=2, store=Store.create(os.path.join(result_dir, "store")), model=model,
                            optimizer=k.optimizers.Adam(0.001), loss="mse", feature_cols=["x1", "x2"],
                            label_cols=["y"], batch_size=100, epochs=FIT_EPOCHS, random_seed=1,
                            verbose=0, callbacks=callbacks).fit(df)
    error = fitted.transform(df).selectExpr("avg(abs(y__output - y))").first()[0]
    return {"epochs": len(fitted.getHistory()["loss"]), "retries": fitted.getRetries(), "mean_abs_error": error}


def parent_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def executor_of(pid):
    """The executor JVM among ``pid``'s ancestors (a rank runs in its executor's Python worker)."""
    while pid > 1:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    return pid
            pid = parent_of(pid)
        except OSError:
            return None
    return None


def kill_executor(marker):
    """Kills the executor JVM this rank runs under (SIGKILL), after noting when in ``marker``."""
    with open(marker, "w") as f:
        f.write(str(time.time()))
    os.kill(executor_of(os.getpid()), signal.SIGKILL)
    time.sleep(120)  # this worker dies with its executor


def kill_worker_and_executor(marker):
    """A lost node of a standalone cluster: its worker JVM first, so nothing restarts the executor."""
    os.kill(parent_of(executor_of(os.getpid())), signal.SIGKILL)
    kill_executor(marker)


def log_step(result_dir, step, size):
    """Rank 0 notes when each step was committed (``steps.log``: time, step, size)."""
    import horovod_rs.torch as hvd

    if hvd.rank() == 0:
        with open(os.path.join(result_dir, "steps.log"), "a") as f:
            f.write("%f %d %d\n" % (time.time(), step, size))


def elastic_counting(result_dir, victim, until_size):
    """Counts committed steps, each allreducing a 1 from every rank (the world's size, kept in the
    state). ``victim``: "kill" or "commit" (the last rank kills its executor at step
    ELASTIC_KILL_AT, once), or None. ``until_size``: go on past ELASTIC_STEPS until the world
    has that size (again) (bounded)."""
    import torch

    import horovod_rs.torch as hvd

    hvd.init()
    marker = os.path.join(result_dir, "killed")

    def victim_now(kind, state):
        return (victim == kind and state.step == ELASTIC_KILL_AT and hvd.rank() == hvd.size() - 1
                and not os.path.exists(marker))

    class CountingState(hvd.elastic.ObjectState):
        def save(self):
            if victim_now("commit", self):
                self._saved_state["step"] = self.step  # halfway: the sizes are not saved yet
                kill_executor(marker)
            super().save()

    state = CountingState(bcast_object=hvd.broadcast_object, get_rank=hvd.rank, step=0, sizes=[])

    @hvd.elastic.run
    def train(state):
        while state.step < ELASTIC_STEPS or (until_size and state.sizes[-1] != until_size
                                             and state.step < 100 * ELASTIC_STEPS):
            if victim_now("kill", state):
                kill_executor(marker)  # before the step's allreduce: no rank commits the step after it
            if victim_now("worker", state):
                kill_worker_and_executor(marker)
            size = int(hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item())
            state.sizes.append(size)
            state.step += 1
            state.commit()
            log_step(result_dir, state.step, size)
            time.sleep(0.05)
        return {"step": state.step, "sizes": state.sizes}

    return train(state)


def elastic(spark, result_dir, kind):
    """An elastic job of 3 ranks (``grow``: 2, growing to 3 once another job frees a slot)."""
    if kind != "grow":
        victim = "kill" if kind == "cluster" else kind
        return horovod_rs.spark.run_elastic(elastic_counting, args=(result_dir, victim, None), num_proc=3,
                                            min_num_proc=2)
    def hold(batches):
        open(os.path.join(result_dir, "holding"), "w").close()
        time.sleep(20)
        yield from batches

    def blocker():
        spark.range(1, numPartitions=1).mapInArrow(hold, "id long").collect()

    threading.Thread(target=blocker, daemon=True).start()
    while not os.path.exists(os.path.join(result_dir, "holding")):
        time.sleep(0.1)
    return horovod_rs.spark.run_elastic(elastic_counting, args=(result_dir, None, 3), num_proc=2, max_num_proc=3)


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers of ``cores`` cores each, started through
    bin/spark-class (pip's pyspark has no sbin/start-master.sh), stopped when the block ends.
    ``worker_env(number)``: variables added to that worker's environment, which its executors
    inherit (as a host's spark-env.sh sets them). ``host``: the master's address;
    ``worker_host(number)``: a worker's, with the command prefix that starts it (e.g. in a
    network namespace)."""

    def __init__(self, workers, work_dir, cores=1, worker_env=None, host="127.0.0.1", worker_host=None):
        self._workers, self._work_dir, self._cores, self._host = workers, work_dir, cores, host
        self._worker_env = worker_env or (lambda number: {})
        self._worker_host = worker_host or (lambda number: (None, []))

    def __enter__(self):
        import socket
        import subprocess

        from pyspark.find_spark_home import _find_spark_home

        spark_class = os.path.join(_find_spark_home(), "bin", "spark-class")
        with socket.socket() as probe:
            probe.bind((self._host, 0))  # free where the master will listen
            port = probe.getsockname()[1]
        self.url = "spark://%s:%d" % (self._host, port)
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._processes = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                             self._host, "--port", str(port), "--webui-port", "0"], **quiet)]
        # Workers and drivers that find no master retry only after 5 to 20 s.
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection((self._host, port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or self._processes[0].poll() is not None:
                    self.__exit__()
                    raise RuntimeError("the standalone master did not start listening on port %d" % port)
                time.sleep(0.2)
        for number in range(self._workers):
            worker_host, prefix = self._worker_host(number)
            self._processes.append(subprocess.Popen(
                prefix + [spark_class, "org.apache.spark.deploy.worker.Worker", self.url, "--cores", str(self._cores),
                          "--memory", "1g", "--webui-port", "0",
                          "--work-dir", os.path.join(self._work_dir, "worker-%d" % number)]
                + (["--host", worker_host] if worker_host else []),
                env=dict(os.environ, **self._worker_env(number)), **quiet))
        return self

    def __exit__(self, *exc):
        for process in reversed(self._processes):
            process.terminate()
        for process in self._processes:
            process.wait()
        return False


def main(mode, result_dir):
    if mode == "fit-grow":
        session(mode, result_dir, "local-cluster[2,1,1024]", {"spark.horovod.rs.fitMinProcesses": "1"})
        return
    if mode in ("elastic-worker", "fit-worker"):
        workers = 3 if mode == "elastic-worker" else 2
        conf = {"spark.cores.max": str(workers), "spark.executor.cores": "1", "spark.executor.memory": "1g"}
        if mode == "fit-worker":
            conf["spark.horovod.rs.fitMinProcesses"] = "1"
        with StandaloneCluster(workers, result_dir) as cluster:
            session(mode, result_dir, cluster.url, conf)
        return
    conf = {"spark.horovod.rs.driverRendezvous": "false"} if mode == "elastic-cluster" else None
    session(mode, result_dir, "local-cluster[3,1,1024]" if mode.startswith("elastic-") else "local-cluster[2,1,1024]",
            conf)


def session(mode, result_dir, master, conf=None):
    builder = SparkSession.builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    builder = (builder
               .config("spark.ui.enabled", "false")
               .config("spark.executorEnv.FAULT_TRIAL", os.environ["FAULT_TRIAL"]))
    if mode.startswith("fit"):
        builder = builder.config("spark.executorEnv.TF_CPP_MIN_LOG_LEVEL", "3")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if mode == "forever":
        horovod_rs.spark.run(allreduce_steps, args=(result_dir, None), num_proc=2)
        return
    try:
        if mode == "run":
            outcome = {"results": horovod_rs.spark.run(allreduce_steps, args=(result_dir, RUN_STEPS), num_proc=2,
                                                       max_attempts=2)}
        elif mode.startswith("elastic-"):
            outcome = {"results": elastic(spark, result_dir, mode[len("elastic-"):])}
        else:
            outcome = fit(spark, result_dir, lose_worker=mode == "fit-worker", lose_executor=mode == "fit-grow")
    except Exception as e:  # noqa: BLE001 (the trial classifies it)
        outcome = {"error": "%s: %s" % (type(e).__name__, e), "traceback": traceback.format_exc()[-2000:]}
    with open(os.path.join(result_dir, "result.json"), "w") as f:
        json.dump(outcome, f)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
