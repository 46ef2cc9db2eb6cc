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

``run`` and ``fit`` write ``result.json`` when they end: what came back, or the error."""

import json
import os
import sys
import traceback

from pyspark.sql import SparkSession

import horovod_rs.spark

# Long enough (seconds) that the trial's kill lands while the first attempt runs.
RUN_STEPS = 5000
FIT_EPOCHS = 4


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


def fit(spark, result_dir):
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

    fitted = KerasEstimator(num_proc=2, store=Store.create(os.path.join(result_dir, "store")), model=model,
                            optimizer=k.optimizers.Adam(0.001), loss="mse", feature_cols=["x1", "x2"],
                            label_cols=["y"], batch_size=100, epochs=FIT_EPOCHS, random_seed=1,
                            verbose=0, callbacks=[NamesTheWriter()]).fit(df)
    error = fitted.transform(df).selectExpr("avg(abs(y__output - y))").first()[0]
    return {"epochs": len(fitted.getHistory()["loss"]), "retries": fitted.getRetries(), "mean_abs_error": error}


def main(mode, result_dir):
    builder = (SparkSession.builder.master("local-cluster[2,1,1024]")
               .config("spark.ui.enabled", "false")
               .config("spark.executorEnv.FAULT_TRIAL", os.environ["FAULT_TRIAL"]))
    if mode == "fit":
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
        else:
            outcome = fit(spark, result_dir)
    except Exception as e:  # noqa: BLE001 (the trial classifies it)
        outcome = {"error": "%s: %s" % (type(e).__name__, e), "traceback": traceback.format_exc()[-2000:]}
    with open(os.path.join(result_dir, "result.json"), "w") as f:
        json.dump(outcome, f)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
