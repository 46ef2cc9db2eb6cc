"""Horovod's ``horovod.tensorflow.data.compute_service``: TensorFlow's data service
(``tf.data.experimental.service``) run by a compute job of horovod_rs processes, for a training
job to move its dataset's preprocessing onto.

The compute job (``python -m horovod_rs.tensorflow.data.compute_worker`` under ``horovodrs``, or
``horovod_rs.spark.tensorflow.compute_worker`` on Spark) starts a ``ComputeService`` and writes a
``TfDataServiceConfig`` file; its processes run the data service's workers, and its dispatchers
(or the training job's, ``dispatcher_side='training'``). A training process reads the file and
sends its dataset there (``dataset.send_to_data_service(config, rank, size)``, or
``tf_data_service``), and rank 0 shuts the compute job down at the end.

Unlike Horovod's, dispatchers and workers register an address of their host that other hosts
reach, not ``localhost``, so the compute job and the training job may run on different machines.
"""

import binascii
import dataclasses
import json
import logging
import os
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from tempfile import NamedTemporaryFile
from typing import Any, Mapping, Optional, Sequence, Tuple

import tensorflow as tf

import horovod_rs.tensorflow as hvd
from horovod_rs.runner.common.service.compute_service import ComputeClient, ComputeService
from horovod_rs.runner.common.util import secret
from horovod_rs.runner.common.util.network import address_toward

# How long ``TfDataServiceConfig.read`` waits for the file before it says what it waits for.
_WAIT_NOTICE_S = 60
# How often the data service's workers report to their dispatcher.
_HEARTBEAT_MS = 1000


@dataclasses.dataclass(frozen=True)
class TfDataServiceConfig:
    dispatchers: int
    workers_per_dispatcher: int
    dispatcher_side: str
    addresses: Mapping[str, Sequence[Tuple[str, int]]]
    key: bytes
    timeout: int = 60

    def __post_init__(self):
        if self.dispatcher_side not in ('compute', 'training'):
            raise ValueError(f"Unsupported dispatcher side: {self.dispatcher_side!r}, expected 'compute' or 'training'")
        if self.dispatchers <= 0 or self.workers_per_dispatcher <= 0:
            raise ValueError(f'The numbers of dispatchers ({self.dispatchers}) and of workers per dispatcher '
                             f'({self.workers_per_dispatcher}) must be larger than 0')

    def compute_client(self, verbose=1) -> ComputeClient:
        return ComputeClient(self.addresses, self.key, verbose=verbose)

    def to_dict(self) -> Mapping[str, Any]:
        config = dataclasses.asdict(self)
        config['key'] = binascii.hexlify(self.key).decode()
        return config

    @staticmethod
    def from_dict(config: Mapping[str, Any]) -> 'TfDataServiceConfig':
        return TfDataServiceConfig(
            dispatchers=config.get('dispatchers'),
            workers_per_dispatcher=config.get('workers_per_dispatcher'),
            dispatcher_side=config.get('dispatcher_side'),
            addresses={interface: [(address[0], address[1]) for address in addresses]
                       for interface, addresses in config.get('addresses').items()},
            key=binascii.unhexlify(config.get('key')),
            timeout=config.get('timeout'))

    def write(self, filename: str):
        """Writes the file whole: a reader never sees part of it (a rename in its directory)."""
        path = Path(filename)
        with NamedTemporaryFile('w', dir=str(path.parent), prefix=str(path.name), delete=False) as w:
            w.write(json.dumps(self.to_dict()))
        os.rename(w.name, filename)
        logging.info(f'Wrote the compute service config to {filename}')

    @staticmethod
    def read(filename: str, wait_for_file_creation: bool = False) -> 'TfDataServiceConfig':
        """The config in ``filename``; with ``wait_for_file_creation``, once the compute job has
        written it."""
        started, noticed = time.monotonic(), False
        while wait_for_file_creation and not os.path.exists(filename):
            if not noticed and time.monotonic() - started > _WAIT_NOTICE_S:
                print(f'Still waiting for the compute service config file {filename}: the compute job writes it '
                      f'when it has started', file=sys.stderr)
                noticed = True
            time.sleep(1)
        with open(filename, 'r') as r:
            return TfDataServiceConfig.from_dict(json.load(r))


def workers_per_dispatcher(processes, dispatchers):
    """How many of a compute job's ``processes`` serve each of its ``dispatchers``."""
    if dispatchers < 1:
        raise ValueError(f'The number of dispatchers must be larger than 0: {dispatchers}')
    if processes % dispatchers:
        raise ValueError(f'Number of processes ({processes}) must be '
                         f'a multiple of number of dispatchers ({dispatchers}).')
    return processes // dispatchers


def start_compute_service(processes, dispatchers, dispatcher_side, timeout, configfile):
    """The ``ComputeService`` of a compute job of ``processes``, and its config, written to
    ``configfile`` for the training job."""
    workers, key = workers_per_dispatcher(processes, dispatchers), secret.make_secret_key()
    compute = ComputeService(dispatchers, workers, key=key)
    try:
        config = TfDataServiceConfig(dispatchers=dispatchers, workers_per_dispatcher=workers,
                                     dispatcher_side=dispatcher_side, addresses=compute.addresses(), key=key,
                                     timeout=timeout)
        config.write(configfile)
    except BaseException:
        compute.shutdown()
        raise
    return compute, config


def _host_address(compute_config):
    """This host's address that the other hosts of the jobs reach: the one on its route to the
    compute service's first non-loopback address (``localhost`` when it has none)."""
    for addresses in compute_config.addresses.values():
        for host, _ in addresses:
            if not host.startswith('127.'):
                return address_toward(host)
    return 'localhost'


def _start_dispatcher(compute, compute_config, dispatcher_id):
    """A dispatch server, registered with the compute service as dispatcher ``dispatcher_id``."""
    if compute_config.dispatchers == 1:
        logging.info('Setting up Dispatcher for all tasks')
    else:
        logging.info(f'Setting up Dispatcher for task {dispatcher_id}')
    server = tf.data.experimental.service.DispatchServer()
    port = server.target.rsplit(':', 1)[1]
    address = f'grpc://{_host_address(compute_config)}:{port}'
    compute.register_dispatcher(dispatcher_id, address)
    logging.info(f'Registered Dispatcher {dispatcher_id} at {address}')
    return server


def _stop(server, what):
    # TensorFlow's servers have no public way to stop.
    server._stop()
    server.join()
    logging.info(f'{what} shut down')


@contextmanager
def tf_data_service(compute_config: TfDataServiceConfig, rank: int) -> str:
    """Provides the address of the TF Dispatcher that training process ``rank`` uses, once all
    its workers have registered; with ``dispatcher_side='training'`` it starts that dispatcher
    (rank 0 does when there is one)."""
    compute = compute_config.compute_client(verbose=2)

    dispatcher_server = None
    if compute_config.dispatcher_side == 'training' and (compute_config.dispatchers > 1 or rank == 0):
        dispatcher_server = _start_dispatcher(compute, compute_config, rank)

    try:
        dispatcher_id = rank if compute_config.dispatchers > 1 else 0
        dispatcher_address = compute.wait_for_dispatcher_registration(dispatcher_id, compute_config.timeout)
        compute.wait_for_dispatcher_worker_registration(dispatcher_id, compute_config.timeout)
        yield dispatcher_address
    finally:
        if dispatcher_server:
            _stop(dispatcher_server, 'Dispatcher')


def send_to_data_service(dataset: tf.data.Dataset,
                         compute_config: TfDataServiceConfig,
                         rank: int,
                         size: Optional[int] = None,
                         processing_mode: str = 'distributed_epoch',
                         reuse_dataset: bool = False,
                         round_robin: bool = False) -> tf.data.Dataset:
    """``dataset`` processed by the compute job's data service: ``dataset.send_to_data_service(…)``."""
    if compute_config.dispatcher_side == 'training':
        raise RuntimeError('training side dispatcher not supported, use tf_data_service context manager instead')

    with tf_data_service(compute_config, rank) as dispatcher_address:
        return dataset.apply(tf.data.experimental.service.distribute(
            processing_mode=processing_mode,
            service=dispatcher_address,
            job_name='job' if reuse_dataset else None,
            consumer_index=rank if reuse_dataset and round_robin else None,
            num_consumers=size if reuse_dataset and round_robin else None))


tf.data.Dataset.send_to_data_service = send_to_data_service


def compute_worker_fn(compute_config: TfDataServiceConfig):
    """What each process of a compute job runs: a data service worker for its dispatcher (and the
    dispatcher itself, on the dispatcher's first process, unless the training job runs them),
    until the compute service shuts down."""
    hvd.init()
    index = hvd.rank()
    dispatcher_index = index // compute_config.workers_per_dispatcher
    compute = compute_config.compute_client(verbose=2)

    with ExitStack() as servers:
        if compute_config.dispatcher_side == 'compute' and index % compute_config.workers_per_dispatcher == 0:
            dispatcher = _start_dispatcher(compute, compute_config, dispatcher_index)
            servers.callback(_stop, dispatcher, 'Dispatcher')

        dispatcher_address = compute.wait_for_dispatcher_registration(dispatcher_index, compute_config.timeout)
        worker = tf.data.experimental.service.WorkerServer(tf.data.experimental.service.WorkerConfig(
            dispatcher_address=dispatcher_address.split('://')[1],
            worker_address=f'{_host_address(compute_config)}:%port%',
            heartbeat_interval_ms=_HEARTBEAT_MS,
            dispatcher_timeout_ms=compute_config.timeout * 1000))
        worker.start()
        servers.callback(_stop, worker, 'Worker')  # stopped before the dispatcher

        compute.register_worker_for_dispatcher(dispatcher_index, index)
        logging.info(f'Worker for dispatcher {dispatcher_index} registered')
        compute.wait_for_shutdown()
