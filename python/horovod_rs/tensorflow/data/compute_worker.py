"""Horovod's ``horovod.tensorflow.data.compute_worker``: a compute job running TensorFlow's data
service, under the launcher:

    horovodrs -np 4 python -m horovod_rs.tensorflow.data.compute_worker /tmp/compute.json

Rank 0 starts the compute service and writes its config to the file (on a path every host of both
jobs reads); every rank runs a worker (and the dispatchers) until a training job shuts it down.
"""

import argparse

import tensorflow as tf

import horovod_rs.tensorflow as hvd
from horovod_rs.tensorflow.data.compute_service import compute_worker_fn, start_compute_service, workers_per_dispatcher


def main(dispatchers: int, dispatcher_side: str, configfile: str, timeout: int):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    workers_per_dispatcher(size, dispatchers)  # every rank refuses a count that does not divide

    compute = compute_config = None
    try:
        if rank == 0:
            compute, compute_config = start_compute_service(size, dispatchers, dispatcher_side, timeout, configfile)
        with tf.device('/cpu:0'):
            compute_config = hvd.broadcast_object(compute_config, name='TfDataServiceConfig')
        compute_worker_fn(compute_config)
    finally:
        if compute is not None:
            compute.shutdown()


def parse_args(args=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('configfile', type=str, help='The path to store the compute service config file.')
    parser.add_argument('--dispatchers', required=False, default=1, type=int,
                        help='The number of dispatcher to support.', dest='dispatchers')
    parser.add_argument('--dispatcher-side', required=False, default='compute', type=str,
                        choices=['compute', 'training'],
                        help="Where do the dispatcher run? On 'compute' side or 'training' side.",
                        dest='dispatcher_side')
    parser.add_argument('--timeout', required=False, default=60, type=int,
                        help='Timeout to setup worker and connect everything.', dest='timeout')
    return parser.parse_args(args)


if __name__ == '__main__':
    parsed = parse_args()
    main(parsed.dispatchers, parsed.dispatcher_side, parsed.configfile, parsed.timeout)
