"""What a user of the published artifacts does, on a local-cluster (make dist-check runs it).

    python check_install.py wheel      # in a fresh environment with the wheel and a pyspark
    spark-submit --packages horovod.rs:horovod-rs-spark4_2.13:<version> ... check_install.py packages

`wheel`: the session gets the wheel's own jar through horovod_rs.spark.configure_builder.
`packages`: the session is spark-submit's, whose --packages brought the jar from a Maven
repository. Either way, horovod_rs.spark.run allreduces across two ranks in the Python workers
and the estimator wrapper (horovod_rs.spark.ml) fits and transforms on the JVM's native trainer.
Prints one line per check and exits non-zero on the first failure.
"""

import os
import sys

import pyspark
from pyspark.sql import SparkSession

import horovod_rs.spark
from horovod_rs.spark.ml import HorovodEstimator

SPEC = {
    "inputs": [{"name": "x", "type": "float", "columns": ["x1", "x2"]}],
    "layers": [
        {"name": "h", "type": "dense", "input": "x", "units": 8, "activation": "relu"},
        {"name": "y_hat", "type": "dense", "input": "h", "units": 1},
    ],
    "outputs": ["y_hat"],
}


def session(mode):
    if mode == "packages":
        spark = SparkSession.builder.getOrCreate()
        jars = spark.sparkContext.getConf().get("spark.jars", "")
        assert "horovod-rs-spark" in jars, "spark-submit --packages did not bring the jar: spark.jars=%r" % jars
        return spark, jars
    jar = horovod_rs.spark.jar_path()
    site_packages = os.path.dirname(os.path.dirname(horovod_rs.__file__))
    assert jar.startswith(site_packages), "the jar should come from the installed wheel, got %s" % jar
    builder = SparkSession.builder.master("local-cluster[2,1,1024]").config("spark.ui.enabled", "false")
    return horovod_rs.spark.configure_builder(builder).getOrCreate(), jar


def sum_of_ranks():
    import numpy as np

    from horovod_rs.common import arrays, basics

    basics.init()
    total = arrays.allreduce(np.array([basics.rank() + 1.0]), op="sum")
    return basics.rank(), basics.size(), float(total[0])


def main(mode):
    spark, jar = session(mode)
    print("check_install: pyspark %s, jar %s" % (pyspark.__version__, jar))
    results = horovod_rs.spark.run(sum_of_ranks, num_proc=2)
    assert results == [(0, 2, 3.0), (1, 2, 3.0)], results
    print("check_install: horovod_rs.spark.run on 2 ranks: %s" % results)

    df = spark.range(0, 2000).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2").selectExpr(
        "x1", "x2", "2 * x1 - 3 * x2 + 0.5 AS y")
    model = HorovodEstimator(modelSpec=SPEC, labelCols=["y"], numProc=2, loss="mse", learningRate=0.01,
                             batchSize=64, epochs=8, seed=1, verbose=0).fit(df)
    mse = model.transform(df).selectExpr("avg(pow(prediction - y, 2))").first()[0]
    assert mse < 0.1, "the estimator's training mse is %s" % mse
    print("check_install: HorovodEstimator fit and transform, training mse %.4f" % mse)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "wheel")
