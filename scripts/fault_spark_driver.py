"""The driver of the fault suite's Spark trials (scripts/faults.py): a Run API job of 2 ranks on
``local-cluster[2,1,1024]`` whose ranks allreduce until the trial kills this driver. Each rank
writes ``started-<rank>`` into the result folder once it is in the job's collectives."""

import os
import sys

from pyspark.sql import SparkSession

import horovod_rs.spark


def allreduce_forever(result_dir):
    import numpy as np

    from horovod_rs.common import arrays, basics

    basics.init()
    arrays.allreduce(np.ones(1024, dtype=np.float32), name="fault.first")
    open(os.path.join(result_dir, "started-%d" % basics.rank()), "w").close()
    step = 0
    while True:
        step += 1
        arrays.allreduce(np.ones(1 << 16, dtype=np.float32), name="fault.step.%d" % step)


def main(result_dir):
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false")
             .config("spark.executorEnv.FAULT_TRIAL", os.environ["FAULT_TRIAL"])
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    horovod_rs.spark.run(allreduce_forever, args=(result_dir,), num_proc=2)


if __name__ == "__main__":
    main(sys.argv[1])
