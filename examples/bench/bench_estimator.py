"""make bench-estimator: the same model fit on the same DataFrame by every way this project (and
its peer, Spark's TorchDistributor) offers; one CSV line per way:

    impl,framework,procs,rows,fit_seconds,samples_per_s

- ``arrow``: horovod_rs's KerasEstimator / TorchEstimator (``fit(df)``: each rank's partition
  reaches it as Arrow batches);
- ``parquet``: the same estimators through ``prepare_data`` + ``fit_on_parquet`` (Horovod's way:
  the DataFrame is written to the store as Parquet first; the write is part of the time);
- ``torchdistributor``: Spark's TorchDistributor running the same torch model with DDP over gloo,
  fed as its users usually do: the DataFrame written as Parquet, each process reading its files;
- ``native``: horovod_rs's JVM HorovodEstimator with the native trainer (needs the jar).

The model: a Rossmann-shaped MLP on 36 float columns (36-256-256-1, ReLU, Adam, MSE), batch 256
per process. ``fit_seconds`` is the wall time of the whole fit from the driver (launch, data,
training, returning the model); ``samples_per_s`` is rows x epochs / fit_seconds. Each way first
runs once untimed on a small DataFrame, so the executors' Python workers have imported the
frameworks (as in a notebook's second fit); TorchDistributor starts new processes every run anyway.
"""

import argparse
import os
import sys
import tempfile
import time

COLUMNS = ["c%d" % i for i in range(36)]
HIDDEN = 256


def rossmann_like(spark, rows, partitions):
    exprs = ["CAST(rand(%d) * 10 AS FLOAT) AS c%d" % (i, i) for i in range(36)]
    df = spark.range(0, rows, numPartitions=partitions).selectExpr(*exprs)
    label = " + ".join("c%d * %f" % (i, (i % 7 - 3) / 10.0) for i in range(36))
    return df.selectExpr("*", "CAST(%s AS FLOAT) AS y" % label)


def keras_model():
    import tensorflow as tf

    inputs = tf.keras.Input(shape=(36,))
    x = tf.keras.layers.Dense(HIDDEN, activation="relu")(inputs)
    x = tf.keras.layers.Dense(HIDDEN, activation="relu")(x)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1)(x))


def torch_model():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(36, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                               torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1))


def with_features(df):
    from pyspark.ml.feature import VectorAssembler

    return VectorAssembler(inputCols=COLUMNS, outputCol="features").transform(df).select("features", "y")


def keras_estimator(args, store):
    import tensorflow as tf

    from horovod_rs.spark.keras import KerasEstimator

    return KerasEstimator(num_proc=args.procs, store=store, model=keras_model(), optimizer=tf.keras.optimizers.Adam(
        1e-3), loss="mse", feature_cols=["features"], label_cols=["y"], batch_size=args.batch, epochs=args.epochs,
        verbose=0)


def torch_estimator(args, store):
    import torch

    from horovod_rs.spark.torch import TorchEstimator

    model = torch_model()
    return TorchEstimator(num_proc=args.procs, store=store, model=model,
                          optimizer=torch.optim.Adam(model.parameters(), lr=1e-3), loss=torch.nn.MSELoss(),
                          input_shapes=[[-1, 36]], feature_cols=["features"], label_cols=["y"],
                          batch_size=args.batch, epochs=args.epochs, verbose=0)


ESTIMATORS = {"keras": keras_estimator, "torch": torch_estimator}


def arrow(args, spark, df, framework, store):
    return ESTIMATORS[framework](args, store).fit(with_features(df))


def parquet(args, spark, df, framework, store):
    from horovod_rs.spark.common.util import clear_training_cache, prepare_data

    clear_training_cache()
    with prepare_data(args.procs, store, with_features(df), label_columns=["y"], feature_columns=["features"],
                      partitions_per_process=2) as index:
        return ESTIMATORS[framework](args, store).fit_on_parquet(dataset_idx=index)


def torchdistributor(args, spark, df, framework, store):
    from pyspark.ml.torch.distributor import TorchDistributor

    path = os.path.join(tempfile.mkdtemp(prefix="bench-td-"), "data")
    df.repartition(args.procs * 2).write.parquet(path)
    epochs, batch = args.epochs, args.batch

    def train(path):
        import glob

        import numpy as np
        import pyarrow.parquet as pq
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
        files = sorted(glob.glob(os.path.join(path, "*.parquet")))[rank::size]
        table = pq.read_table(files)
        x = torch.from_numpy(np.stack([table.column(c).to_numpy() for c in COLUMNS], axis=1))
        y = torch.from_numpy(table.column("y").to_numpy()).reshape(-1, 1)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch, shuffle=True)
        model = torch.nn.parallel.DistributedDataParallel(torch_model())
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(epochs):
            for features, labels in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(features), labels).backward()
                optimizer.step()
        dist.destroy_process_group()
        return rank

    return TorchDistributor(num_processes=args.procs, local_mode=False, use_gpu=False).run(train, path)


def native(args, spark, df, framework, store):
    from horovod_rs.spark.ml import HorovodEstimator

    spec = {"inputs": [{"name": "x", "type": "float", "columns": COLUMNS}],
            "layers": [{"name": "h1", "type": "dense", "input": "x", "units": HIDDEN, "activation": "relu"},
                       {"name": "h2", "type": "dense", "input": "h1", "units": HIDDEN, "activation": "relu"},
                       {"name": "y_hat", "type": "dense", "input": "h2", "units": 1}],
            "outputs": ["y_hat"]}
    return HorovodEstimator(modelSpec=spec, labelCols=["y"], numProc=args.procs, loss="mse", optimizer="adam",
                            learningRate=1e-3, batchSize=args.batch, epochs=args.epochs, verbose=0).fit(df)


WAYS = [("arrow", "keras", arrow), ("arrow", "torch", arrow), ("parquet", "keras", parquet),
        ("parquet", "torch", parquet), ("torchdistributor", "torch", torchdistributor), ("native", "native", native)]


def main():
    global HIDDEN
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--only", help="comma-separated impl:framework pairs to run (default: all)")
    parser.add_argument("--hidden", type=int, default=HIDDEN,
                        help="units of the hidden layers; a small model makes the data path the cost")
    args = parser.parse_args()
    HIDDEN = args.hidden
    import warnings

    from pyspark.sql import SparkSession

    from horovod_rs.spark.common.frameworks import triton_before_tensorflow
    from horovod_rs.spark.common.store import Store

    # This driver imports TensorFlow and PyTorch; Triton's LLVM must load first (frameworks.py).
    triton_before_tensorflow()
    warnings.filterwarnings("ignore", category=FutureWarning)  # pyspark on pandas 3: noise in the CSV

    spark = SparkSession.builder.appName("horovod-rs estimator benchmark").getOrCreate()
    df = rossmann_like(spark, args.rows, args.procs * 4).cache()
    df.count()
    store = Store.create(tempfile.mkdtemp(prefix="bench-store-"))
    wanted = set(args.only.split(",")) if args.only else None
    small = rossmann_like(spark, 2000, args.procs).cache()
    warmup = argparse.Namespace(**dict(vars(args), epochs=1))
    print("impl,framework,procs,rows,fit_seconds,samples_per_s")
    for impl, framework, way in WAYS:
        if wanted and "%s:%s" % (impl, framework) not in wanted:
            continue
        try:
            way(warmup, spark, small, framework, store)
        except Exception:
            pass  # the timed run reports it
        started = time.time()
        try:
            way(args, spark, df, framework, store)
        except Exception as e:  # one way failing (e.g. a framework not installed) does not hide the others
            print("%s,%s: failed: %s" % (impl, framework, str(e).splitlines()[0][:200]), file=sys.stderr)
            continue
        seconds = time.time() - started
        print("%s,%s,%d,%d,%.2f,%.0f" % (impl, framework, args.procs, args.rows, seconds,
                                         args.rows * args.epochs / seconds), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
