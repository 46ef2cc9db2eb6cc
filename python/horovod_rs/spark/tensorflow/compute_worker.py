"""Horovod's ``horovod.spark.tensorflow.compute_worker``: a compute job running TensorFlow's data
service on Spark, one rank per task slot (the default parallelism):

    spark-submit --master "local[4]" "$(python -c 'import horovod_rs.spark.tensorflow.compute_worker as w;
        print(w.__file__)')" /tmp/compute.json

The driver starts the compute service and writes its config to the file (on a path every host of
both jobs reads); the ranks run the data service's workers (and dispatchers) until a training job
shuts the service down, or this driver gets SIGTERM.
"""

import logging
import signal
import sys
import threading

from horovod_rs.spark import run
from horovod_rs.spark.common import session
from horovod_rs.tensorflow.data.compute_service import compute_worker_fn, start_compute_service
from horovod_rs.tensorflow.data.compute_worker import parse_args


def main(args=None):
    parsed = parse_args(args)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    try:
        serve(spark, parsed.configfile, parsed.dispatchers, parsed.dispatcher_side, parsed.timeout)
    finally:
        spark.stop()


def serve(spark, configfile, dispatchers=1, dispatcher_side='compute', timeout=60, num_proc=None):
    """Runs the compute job on ``num_proc`` ranks of ``spark`` (the default parallelism) until a
    training job shuts it down, or this process gets SIGTERM (when called in its main thread)."""
    workers = num_proc or session.default_parallelism(spark)
    compute, config = start_compute_service(workers, dispatchers, dispatcher_side, timeout, configfile)

    def exit_gracefully(signum, frame):
        # The ranks' wait for the shutdown ends, and with it the job.
        logging.info('Spark driver receiving SIGTERM. Exiting gracefully')
        compute.shutdown()

    on_sigterm = None
    try:
        if threading.current_thread() is threading.main_thread():
            on_sigterm = signal.signal(signal.SIGTERM, exit_gracefully)
        run(compute_worker_fn, args=(config,), stdout=sys.stdout, stderr=sys.stderr, num_proc=workers, verbose=2)
    finally:
        if on_sigterm is not None:
            signal.signal(signal.SIGTERM, on_sigterm)
        compute.shutdown()


if __name__ == '__main__':
    main()
