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

from horovod_rs.runner.common.service.compute_service import ComputeService
from horovod_rs.runner.common.util import secret
from horovod_rs.spark import run
from horovod_rs.spark.common import session
from horovod_rs.tensorflow.data.compute_service import TfDataServiceConfig, compute_worker_fn
from horovod_rs.tensorflow.data.compute_worker import parse_args


def main(args=None):
    parsed = parse_args(args)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    workers = session.default_parallelism(spark)
    if workers % parsed.dispatchers:
        raise ValueError(f'Number of processes ({workers}) must be '
                         f'a multiple of number of dispatchers ({parsed.dispatchers}).')

    key = secret.make_secret_key()
    compute = ComputeService(parsed.dispatchers, workers // parsed.dispatchers, key=key)
    try:
        compute_config = TfDataServiceConfig(dispatchers=parsed.dispatchers,
                                             workers_per_dispatcher=workers // parsed.dispatchers,
                                             dispatcher_side=parsed.dispatcher_side, addresses=compute.addresses(),
                                             key=key, timeout=parsed.timeout)
        compute_config.write(parsed.configfile)

        def exit_gracefully(signum, frame):
            # The ranks' wait for the shutdown ends, and with it the job.
            logging.info('Spark driver receiving SIGTERM. Exiting gracefully')
            compute.shutdown()

        signal.signal(signal.SIGTERM, exit_gracefully)
        run(compute_worker_fn, args=(compute_config,), stdout=sys.stdout, stderr=sys.stderr, num_proc=workers,
            verbose=2)
    finally:
        compute.shutdown()
        spark.stop()


if __name__ == '__main__':
    main()
