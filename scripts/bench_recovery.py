"""Recovery time: from an executor's death (SIGKILL of its JVM) to the next committed training
step, for an elastic job (``run_elastic``: the survivors go on) and for today's relaunch of the
whole job from its checkpoint (``run`` with ``max_attempts=2``), 3 ranks on
``local-cluster[3,1,1024]``, one Spark application for both.

    python scripts/bench_recovery.py [--runs 3]

Prints CSV rows ``recovery,<how>,<ranks>,<seconds>,s`` (one per run) and, for the elastic job,
``regrow,elastic,3,<seconds>,s``: from the death to the first step of the world that has 3 ranks
again (Spark restarted the executor)."""

import argparse
import os
import signal
import sys
import tempfile
import time

import cloudpickle
from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_spark_driver as counting  # noqa: E402  (the fault suite's elastic job)

import horovod_rs.spark  # noqa: E402

# The relaunched job's function runs on the executors, which cannot import this script.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def relaunched_counting(result_dir):
    """The same steps as the elastic job's, resumed from a checkpoint (rank 0 writes its step
    after each); the last rank kills its executor at step ELASTIC_KILL_AT of the first attempt."""
    import torch

    import horovod_rs.torch as hvd

    hvd.init()
    checkpoint, marker = os.path.join(result_dir, "checkpoint"), os.path.join(result_dir, "killed")
    step = int(open(checkpoint).read()) if os.path.exists(checkpoint) else 0
    while step < counting.ELASTIC_STEPS:
        if step == counting.ELASTIC_KILL_AT and hvd.rank() == hvd.size() - 1 and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(str(time.time()))
            os.kill(counting.executor_of(os.getpid()), signal.SIGKILL)
            time.sleep(120)
        size = int(hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item())
        step += 1
        if hvd.rank() == 0:
            with open(checkpoint + ".tmp", "w") as f:
                f.write(str(step))
            os.rename(checkpoint + ".tmp", checkpoint)
        counting.log_step(result_dir, step, size)
        time.sleep(0.05)
    return step


def after_the_kill(result_dir, size=None):
    """Seconds from the kill to the first step committed after it (by a world of ``size``)."""
    with open(os.path.join(result_dir, "killed")) as f:
        killed = float(f.read())
    with open(os.path.join(result_dir, "steps.log")) as f:
        steps = [line.split() for line in f]
    return min(float(t) for t, _, n in steps if float(t) > killed and (size is None or int(n) == size)) - killed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    spark = (SparkSession.builder.master("local-cluster[3,1,1024]").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print("bench,how,ranks,value,unit", flush=True)
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as elastic_dir:
            horovod_rs.spark.run_elastic(counting.elastic_counting, args=(elastic_dir, "kill", 3), num_proc=3,
                                         min_num_proc=2, verbose=0)
            print("recovery,elastic,3,%.2f,s" % after_the_kill(elastic_dir), flush=True)
            print("regrow,elastic,3,%.2f,s" % after_the_kill(elastic_dir, size=3), flush=True)
        with tempfile.TemporaryDirectory() as relaunch_dir:
            horovod_rs.spark.run(relaunched_counting, args=(relaunch_dir,), num_proc=3, max_attempts=2)
            print("recovery,relaunch,3,%.2f,s" % after_the_kill(relaunch_dir), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
