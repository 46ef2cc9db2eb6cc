"""Launch overhead of the PySpark Run API from a classic session and from a Spark Connect client:
``horovod_rs.spark.run`` of a function that does almost nothing (2 ranks, one 4-float allreduce)
on a cluster that is already up, beside a plain two-task job of the same session. Prints CSV
``session,impl,run,seconds``.

    python examples/bench/bench_run_api.py --master 'local-cluster[2,1,1024]' --jar build/.../horovod-rs.jar

starts a classic session, then a Spark Connect server for the same kind of cluster
(``integration-tests/python/connect_server.py``) and a client of it; one warm-up run each, then
``--runs`` timed runs of every row.
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)
sys.path.insert(0, os.path.join(ROOT, "integration-tests", "python"))


def tiny_allreduce():
    import numpy as np

    from horovod_rs.common import arrays, basics

    basics.init()
    return float(arrays.allreduce(np.ones(4, dtype=np.float32), op="sum", name="bench")[0])


def plain_job(spark):
    def task(batches):
        import pyarrow as pa

        for _ in batches:  # as any job does: a task that leaves input unread loses its Python worker
            pass
        yield pa.RecordBatch.from_pydict({"x": [1]})

    return spark.range(0, 2, 1, 2).mapInArrow(task, "x long").collect()


def measure(spark, label, runs):
    import horovod_rs.spark

    rows = {"horovod-rs": lambda: horovod_rs.spark.run(tiny_allreduce, num_proc=2),
            "spark-job": lambda: plain_job(spark)}
    for run in rows.values():
        run()  # warm-up: Python workers, imports
    for impl, run in rows.items():
        for number in range(1, runs + 1):
            started = time.perf_counter()
            run()
            print("%s,%s,%d,%.3f" % (label, impl, number, time.perf_counter() - started), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default="local-cluster[2,1,1024]")
    parser.add_argument("--jar", required=True, help="horovod-rs.jar of the pyspark's Spark line")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    from connect_server import ConnectServer

    # Spark's own logging stays out of the CSV's way (stderr), as in the other benchmarks.
    conf = {"spark.jars": args.jar, "spark.plugins": "horovod.rs.spark.HorovodPlugin", "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=" + os.path.join(ROOT, "examples",
                                                                                           "log4j2.properties")}
    print("session,impl,run,seconds")
    builder = SparkSession.builder.master(args.master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    measure(spark, "classic", args.runs)
    spark.stop()
    with ConnectServer(args.master, conf, tempfile.mkdtemp()) as server:
        spark = SparkSession.builder.remote(server.url).getOrCreate()
        measure(spark, "connect", args.runs)
        spark.stop()


if __name__ == "__main__":
    main()
