"""make bench-estimator: the same model fit on the same DataFrame by every way this project (and
its peer, Spark's TorchDistributor) offers, beside the floor; one CSV line per way:

    case,impl,framework,procs,rows,fit_seconds,x_floor,<phases>

- ``floor``: the same training with nothing around it (``bench_floor.py``), the same rows in
  memory, ``procs`` processes of one thread: ``torch``, the torch model with
  DistributedDataParallel over gloo; ``lightning``, the same model as a LightningModule in
  Lightning's ``Trainer.fit`` with its DDP strategy over gloo; ``keras``, the Keras model's
  ``model.fit`` in each process, exchanging nothing (TensorFlow's compute alone). ``fit_seconds``
  is its training and validation loops' (its processes' start and imports are its ``framework``
  phase: a warm fit's Python workers have them already); every other way's ``x_floor`` is over its
  framework's floor (torch's for the native trainer, and for Lightning when its floor did not run);
- ``arrow``: horovod_rs's KerasEstimator / TorchEstimator / LightningEstimator (``fit(df)``: each
  rank's partition reaches it as Arrow batches);
- ``parquet``: the same estimators through ``prepare_data`` + ``fit_on_parquet`` (Horovod's way:
  the DataFrame is written to the store as Parquet first; the write is part of the time);
- ``torchdistributor``: Spark's TorchDistributor running the same torch model with DDP over gloo,
  fed as its users usually do: the DataFrame written as Parquet, each process reading its files;
- ``connect``: the ``arrow`` fits from a Spark Connect client (``SparkSession.builder.remote``) of
  a Connect server on the same master, started by the benchmark after every classic way ran;
- ``native``: horovod_rs's JVM HorovodEstimator with the native trainer (the MLP only);
- ``multiworker``: Keras's own data parallelism, the peer of the Keras ways: the floor's Keras fit
  under TensorFlow's ``MultiWorkerMirroredStrategy`` (gradients averaged over gRPC), without
  Spark (``fit_seconds`` as the floor's: its loops); on Keras 2 (``tf_keras``), since Keras 3 has
  no such strategy.

Two cases (``bench_models``): ``mlp``, a Rossmann-shaped MLP on 36 float columns (batch 256, 2
epochs), and ``mnist``, Horovod's Spark MNIST example (its conv net on 28x28 generated digits,
batch 64, 4 epochs, validation 0.1). ``fit_seconds`` is the driver's wall time for the whole fit
(launch, data, training, the model back); ``x_floor`` is it over the floor's; the phases (seconds,
``timings.PHASES``) are the fitted model's ``getTimings()``, the floor's ``train`` and
``validation`` its loop's. The DataFrame is cached first, as the floor's rows are in memory, and
each way first fits once untimed on a small DataFrame, so the executors' Python workers have
imported the frameworks (as in a notebook's second fit); TorchDistributor starts new processes
every run anyway.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from horovod_rs.spark.common import timings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_models  # noqa: E402

PHASES = [name for name, _ in timings.PHASES] + ["other"]
FLOOR_TIMEOUT_S = 1800
# Per case: rows, epochs, batch size per process, validation fraction.
CASES = {"mlp": dict(rows=200000, epochs=2, batch=256, validation=0.0),
         "mnist": dict(rows=30000, epochs=4, batch=64, validation=0.1)}


def mlp_data(spark, rows, partitions):
    from pyspark.ml.feature import VectorAssembler

    exprs = ["CAST(rand(%d) * 10 AS FLOAT) AS c%d" % (i, i) for i in range(36)]
    df = spark.range(0, rows, numPartitions=partitions).selectExpr(*exprs)
    label = " + ".join("c%d * %f" % (i, (i % 7 - 3) / 10.0) for i in range(36))
    df = df.selectExpr("*", "CAST(%s AS FLOAT) AS label" % label)
    return VectorAssembler(inputCols=bench_models.COLUMNS, outputCol="features").transform(df) \
        .select("features", "label")


def mnist_data(spark, rows, partitions):
    from pyspark.ml.feature import OneHotEncoder

    sys.path.insert(0, os.path.join(HERE, os.pardir, "spark"))
    import mnist_libsvm

    path = os.path.join(tempfile.mkdtemp(prefix="bench-mnist-"), "mnist.bz2")  # Spark reads it by its extension
    mnist_libsvm.write(path, rows=rows)
    df = spark.read.format("libsvm").option("numFeatures", "784").load(path).repartition(partitions)
    # Keras learns one-hot labels, as in Horovod's Keras example.
    return OneHotEncoder(inputCols=["label"], outputCols=["label_vec"], dropLast=False).fit(df).transform(df)


def estimator(args, framework, store):
    common = dict(num_proc=args.procs, store=store, feature_cols=["features"], label_cols=["label"],
                  batch_size=args.batch, epochs=args.epochs, validation=args.validation or None, verbose=0)
    if framework == "keras":
        from horovod_rs.spark.keras import KerasEstimator

        optimizer, loss = bench_models.keras_training(args.case)
        if args.case == "mnist":
            common["label_cols"] = ["label_vec"]
        return KerasEstimator(model=bench_models.keras_model(args.case, args.hidden), optimizer=optimizer, loss=loss,
                              **common)
    if framework == "lightning":
        from horovod_rs.spark.lightning import TorchEstimator as LightningEstimator

        return LightningEstimator(model=bench_models.lightning_module(args.case, args.hidden), **common)
    from horovod_rs.spark.torch import TorchEstimator

    model = bench_models.torch_model(args.case, args.hidden)
    return TorchEstimator(model=model, optimizer=bench_models.torch_optimizer(args.case, model),
                          loss=bench_models.torch_loss(args.case), **common)


def arrow(args, spark, df, framework, store):
    return estimator(args, framework, store).fit(df)


def parquet(args, spark, df, framework, store):
    from horovod_rs.spark.common.util import clear_training_cache, prepare_data

    clear_training_cache()
    with prepare_data(args.procs, store, df, label_columns=["label"], feature_columns=["features"],
                      validation=args.validation or None, partitions_per_process=2) as index:
        return estimator(args, framework, store).fit_on_parquet(dataset_idx=index)


def torchdistributor(args, spark, df, framework, store):
    from pyspark import cloudpickle as spark_cloudpickle
    from pyspark.ml.functions import vector_to_array
    from pyspark.ml.torch.distributor import TorchDistributor

    # TorchDistributor's processes start outside Spark's Python workers, without the added file.
    spark_cloudpickle.register_pickle_by_value(bench_models)
    path = os.path.join(tempfile.mkdtemp(prefix="bench-td-"), "data")
    df.select(vector_to_array("features", "float32").alias("features"), "label") \
        .repartition(args.procs * 2).write.parquet(path)
    case, hidden, epochs, batch = args.case, args.hidden, args.epochs, args.batch

    def train(path):
        import glob

        import numpy as np
        import pyarrow.parquet as pq
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
        table = pq.read_table(sorted(glob.glob(os.path.join(path, "*.parquet")))[rank::size])
        x = torch.from_numpy(np.stack(table.column("features").to_numpy(zero_copy_only=False)))
        y = torch.from_numpy(table.column("label").to_numpy().astype(np.float32))
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch, shuffle=True)
        model = torch.nn.parallel.DistributedDataParallel(bench_models.torch_model(case, hidden))
        optimizer = bench_models.torch_optimizer(case, model, size)
        loss_fn = bench_models.torch_loss(case)
        for _ in range(epochs):
            for features, labels in loader:
                optimizer.zero_grad()
                loss_fn(model(features), labels).backward()
                optimizer.step()
        dist.destroy_process_group()
        return rank

    return TorchDistributor(num_processes=args.procs, local_mode=False, use_gpu=False).run(train, path)


def native(args, spark, df, framework, store):
    from pyspark.ml.functions import vector_to_array

    from horovod_rs.spark.ml import HorovodEstimator

    spec = {"inputs": [{"name": "x", "type": "float", "columns": bench_models.COLUMNS}],
            "layers": [{"name": "h1", "type": "dense", "input": "x", "units": args.hidden, "activation": "relu"},
                       {"name": "h2", "type": "dense", "input": "h1", "units": args.hidden, "activation": "relu"},
                       {"name": "y_hat", "type": "dense", "input": "h2", "units": 1}],
            "outputs": ["y_hat"]}
    columns = df.select(vector_to_array("features", "float32").alias("v"), "label")
    columns = columns.select(*[columns.v[i].alias(c) for i, c in enumerate(bench_models.COLUMNS)], "label")
    return HorovodEstimator(modelSpec=spec, labelCols=["label"], numProc=args.procs, loss="mse", optimizer="adam",
                            learningRate=1e-3, batchSize=args.batch, epochs=args.epochs, verbose=0).fit(columns)


def multiworker(args, spark, df, framework, store):
    """Keras's own data parallelism: the floor's processes under MultiWorkerMirroredStrategy."""
    return floor(args, spark, df, framework, store, multiworker_port=29591)


def floor(args, spark, df, framework, store, multiworker_port=None):
    """The floor's seconds per phase: its training and validation loops, and its processes' start
    and imports as ``framework`` (a warm fit's Python workers have them already). ``df``'s rows
    are collected to a file for the processes first, outside those."""
    import numpy as np
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    validation = F.rand(0) < args.validation if args.validation else F.lit(False)
    table = df.select(vector_to_array("features", "float32").alias("features"), "label",
                      validation.alias("validation")).toPandas()
    path = os.path.join(tempfile.mkdtemp(prefix="bench-floor-"), "rows.npz")
    np.savez(path, features=np.stack(table["features"].to_numpy()).astype(np.float32),
             label=table["label"].to_numpy(np.float32), validation=table["validation"].to_numpy(bool))
    command = [os.path.join(HERE, "bench_floor.py"), "--framework", framework, "--case", args.case, "--data", path,
               "--epochs", str(args.epochs), "--batch", str(args.batch), "--hidden", str(args.hidden)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    started = time.time()
    if framework in ("torch", "lightning"):
        outputs = [subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.procs),
                                   "--master_port", "29581"] + command, check=True, capture_output=True, text=True,
                                  timeout=FLOOR_TIMEOUT_S, env=env).stdout]
    else:  # Keras's floor exchanges nothing: its processes only start together
        if multiworker_port is not None:  # (Keras 3 has no MultiWorkerMirroredStrategy; Keras 2 has)
            command += ["--multiworker", str(multiworker_port)]
            env["TF_USE_LEGACY_KERAS"] = "1"
        processes = [subprocess.Popen([sys.executable] + command + ["--rank", str(rank), "--size", str(args.procs)],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
                     for rank in range(args.procs)]
        outputs = [p.communicate(timeout=FLOOR_TIMEOUT_S)[0] for p in processes]
        if any(p.returncode for p in processes):
            raise RuntimeError("the Keras floor's processes exited with %s" % [p.returncode for p in processes])
    phases = json.loads(outputs[0].strip().splitlines()[-1])
    return dict(phases, framework=time.time() - started - phases["train"] - phases["validation"])


WAYS = [("floor", "torch", floor), ("floor", "lightning", floor), ("floor", "keras", floor), ("arrow", "torch", arrow),
        ("arrow", "lightning", arrow),
        ("arrow", "keras", arrow), ("parquet", "torch", parquet), ("parquet", "keras", parquet),
        ("torchdistributor", "torch", torchdistributor), ("multiworker", "keras", multiworker),
        ("native", "native", native), ("connect", "torch", arrow), ("connect", "lightning", arrow),
        ("connect", "keras", arrow)]
CASE_WAYS = {"mlp": WAYS,
             "mnist": [way for way in WAYS
                       if way[0] in ("floor", "arrow", "torchdistributor", "multiworker", "connect")]}
# The ways that run from a Spark Connect client; every other way runs in the classic session.
CONNECT_WAYS = ("connect",)


def ways_of(case, wanted, remote):
    """``case``'s ways to run in a Connect (``remote``) or a classic session, in order."""
    return [(impl, framework, way) for impl, framework, way in CASE_WAYS[case]
            if (impl in CONNECT_WAYS) == remote and (not wanted or "%s:%s" % (impl, framework) in wanted or
                                                     "%s:%s:%s" % (case, impl, framework) in wanted)]


def run_case(spark, args, store, ways, floor_seconds):
    """Fits ``ways`` on the case's DataFrame in ``spark``, a line each; ``floor_seconds`` (per
    framework; the native trainer's is torch's, Lightning's too when it has none) gets the floors
    that run here and gives the ratios."""
    if not ways:
        return
    df = (mlp_data if args.case == "mlp" else mnist_data)(spark, args.rows, args.partitions or args.procs * 4).cache()
    df.count()
    small = df.limit(2000).repartition(args.procs).cache()
    small.count()
    warmup = argparse.Namespace(**dict(vars(args), epochs=1))
    for impl, framework, way in ways:
        try:
            if way not in (floor, multiworker):  # their processes start afresh every time
                way(warmup, spark, small, framework, store)
        except Exception:
            pass  # the timed run reports it
        lines = []
        for _ in range(args.repeats):
            started = time.time()
            try:
                result = way(args, spark, df, framework, store)
            except Exception as e:  # one way failing (e.g. a framework not installed) does not hide the others
                print("%s,%s,%s: failed: %s" % (args.case, impl, framework, e), file=sys.stderr)
                continue
            seconds = time.time() - started
            if way in (floor, multiworker):
                phases = result
                seconds = result["train"] + result["validation"]
            else:
                phases = result.getTimings() if hasattr(result, "getTimings") else {}
            lines.append((seconds, phases))
        if way is floor and lines:
            floor_seconds[framework] = statistics.median(seconds for seconds, _ in lines)
        floor_of_way = floor_seconds.get(framework, floor_seconds.get("torch") if framework != "keras" else None)
        for seconds, phases in lines:
            ratio = "%.2f" % (seconds / floor_of_way) if floor_of_way else ""
            print(",".join([args.case, impl, framework, str(args.procs), str(args.rows), "%.2f" % seconds, ratio] +
                           ["%.2f" % phases[p] if p in phases else "" for p in PHASES]), flush=True)
    df.unpersist()
    small.unpersist()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="mlp,mnist", help="comma-separated: mlp, mnist")
    parser.add_argument("--rows", type=int, help="rows of each case's DataFrame (default: the case's)")
    parser.add_argument("--epochs", type=int, help="default: the case's")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--partitions", type=int,
                        help="the cached DataFrame's partitions (default 4 per process; as many as processes "
                             "spares the fit its repartition's shuffle)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed fits of each way, a line each (a floor's ratio is over its median)")
    parser.add_argument("--only", help="comma-separated [case:]impl:framework to run (default: all)")
    parser.add_argument("--hidden", type=int, default=256,
                        help="units of the MLP's hidden layers; a small model makes the data path the cost")
    args = parser.parse_args()
    import warnings

    from pyspark.sql import SparkSession

    from horovod_rs.spark.common.frameworks import triton_before_tensorflow
    from horovod_rs.spark.common.store import Store

    # This driver imports TensorFlow and PyTorch; Triton's LLVM must load first (frameworks.py).
    triton_before_tensorflow()
    warnings.filterwarnings("ignore", category=FutureWarning)  # pyspark on pandas 3: noise in the CSV

    spark = SparkSession.builder.appName("horovod-rs estimator benchmark").getOrCreate()
    spark.sparkContext.addPyFile(bench_models.__file__)  # the models, for every way's executors
    master, conf = spark.sparkContext.master, connect_conf(spark.sparkContext.getConf())
    store = Store.create(tempfile.mkdtemp(prefix="bench-store-"))
    wanted = set(args.only.split(",")) if args.only else None
    cases = {case: case_settings(args, case) for case in args.cases.split(",")}
    floors = {case: {} for case in cases}
    print(",".join(["case", "impl", "framework", "procs", "rows", "fit_seconds", "x_floor"] + PHASES))
    for case, settings in cases.items():
        run_case(spark, settings, store, ways_of(case, wanted, remote=False), floors[case])
    spark.stop()
    if any(ways_of(case, wanted, remote=True) for case in cases):
        sys.path.insert(0, os.path.join(HERE, os.pardir, os.pardir, "integration-tests", "python"))
        from connect_server import ConnectServer

        os.environ.pop("MASTER", None)  # spark-submit's, which a Connect client refuses beside its URL
        with ConnectServer(master, conf, tempfile.mkdtemp(prefix="bench-connect-")) as server:
            spark = SparkSession.builder.remote(server.url).getOrCreate()
            spark.addArtifacts(bench_models.__file__, pyfile=True)
            for case, settings in cases.items():
                run_case(spark, settings, store, ways_of(case, wanted, remote=True), floors[case])
            spark.stop()


def case_settings(args, case):
    settings = dict(vars(args), case=case)
    settings.update({k: v for k, v in CASES[case].items() if settings.get(k) is None})
    return argparse.Namespace(**settings)


def connect_conf(conf):
    """The classic session's settings a Connect server on the same master starts with (the
    executors' environment, the plugin and its jar), so both sessions' executors run alike."""
    kept = ("spark.executorEnv.", "spark.plugins", "spark.jars", "spark.ui.enabled", "spark.driver.extraJavaOptions")
    return {key: value for key, value in conf.getAll() if key.startswith(kept)}


if __name__ == "__main__":
    main()
