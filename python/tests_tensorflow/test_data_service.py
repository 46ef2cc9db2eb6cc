"""TensorFlow's data service run by a compute job (horovod_rs.tensorflow.data), under the launcher:
the compute job's processes run in a thread of each rank (as Horovod's test_compute_worker.py
does), the ranks train from it, and rank 0 shuts it down."""

import os
import tempfile
from collections import Counter
from contextlib import contextmanager

import pytest
import tensorflow as tf

import horovod_rs.tensorflow as hvd
from horovod_rs.runner.util.threads import in_thread
from horovod_rs.tensorflow.data.compute_service import TfDataServiceConfig, tf_data_service, workers_per_dispatcher
from horovod_rs.tensorflow.data.compute_worker import main, parse_args

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
ELEMENTS = 600


@contextmanager
def compute_job(dispatchers, dispatcher_side):
    """The config of a compute job whose processes are this job's ranks; shut down at the end."""
    directory = hvd.broadcast_object(tempfile.mkdtemp() if RANK == 0 else None, name="data_service.dir")
    configfile = os.path.join(directory, "compute.json")
    worker = in_thread(main, (dispatchers, dispatcher_side, configfile, 60))
    config = TfDataServiceConfig.read(configfile, wait_for_file_creation=True)
    try:
        yield config
    finally:
        hvd.allgather_object(RANK, name="data_service.done")  # every rank has read all it wanted
        if RANK == 0:
            config.compute_client(verbose=0).shutdown()
        worker.join(60)
        assert not worker.is_alive(), "the compute job's process did not end after the shutdown"


def elements(dataset):
    return [int(v) for batch in dataset.as_numpy_iterator() for v in batch]


@pytest.mark.parametrize("reuse_dataset", [False, True], ids=["own-job", "shared-job"])
def test_compute_side_dispatcher_serves_every_element_once(reuse_dataset):
    with compute_job(1, "compute") as config:
        dataset = tf.data.Dataset.range(ELEMENTS).batch(10).send_to_data_service(
            config, RANK, SIZE, reuse_dataset=reuse_dataset)
        mine = elements(dataset)
        everyone = hvd.allgather_object(mine, name="data_service.elements.%s" % reuse_dataset)
    if reuse_dataset:
        # One job shared by the ranks: between them they read each element once.
        assert Counter(v for each in everyone for v in each) == Counter(range(ELEMENTS))
    else:
        # A job of its own for each rank, split over the compute job's workers.
        assert all(Counter(each) == Counter(range(ELEMENTS)) for each in everyone)


def test_a_dispatcher_per_rank_on_the_training_side():
    with compute_job(SIZE, "training") as config:
        with pytest.raises(RuntimeError, match="training side dispatcher not supported"):
            tf.data.Dataset.range(4).send_to_data_service(config, RANK, SIZE)
        with tf_data_service(config, RANK) as address:
            dataset = tf.data.Dataset.range(ELEMENTS).map(lambda v: v * (RANK + 1)).batch(10).apply(
                tf.data.experimental.service.distribute(processing_mode="parallel_epochs", service=address))
            mine = elements(dataset)
        addresses = hvd.allgather_object(address, name="data_service.addresses")
    assert len(set(addresses)) == SIZE, "each rank has a dispatcher of its own: %s" % addresses
    # Its dispatcher's one worker runs this rank's pipeline whole.
    assert Counter(mine) == Counter(v * (RANK + 1) for v in range(ELEMENTS))


def test_a_config_survives_its_file_and_names_what_is_wrong_with_it(tmp_path):
    config = TfDataServiceConfig(dispatchers=2, workers_per_dispatcher=3, dispatcher_side="training",
                                 addresses={"lo": [("127.0.0.1", 4242)]}, key=b"\x00\xffkey", timeout=7)
    config.write(str(tmp_path / "compute.json"))
    assert TfDataServiceConfig.read(str(tmp_path / "compute.json")) == config
    with pytest.raises(ValueError, match="Unsupported dispatcher side: 'gpu', expected 'compute' or 'training'"):
        TfDataServiceConfig(1, 1, "gpu", {}, b"k")
    with pytest.raises(ValueError, match=r"dispatchers \(0\) and of workers per dispatcher \(1\) must be larger"):
        TfDataServiceConfig(0, 1, "compute", {}, b"k")
    with pytest.raises(ValueError, match="The number of dispatchers must be larger than 0: 0"):
        workers_per_dispatcher(4, 0)
    with pytest.raises(ValueError, match=r"Number of processes \(3\) must be a multiple of number of dispatchers \(2\)"):
        workers_per_dispatcher(3, 2)


def test_the_compute_jobs_command_line_refuses_an_unknown_dispatcher_side(capsys):
    assert parse_args(["compute.json"]).dispatcher_side == "compute"
    with pytest.raises(SystemExit):
        parse_args(["compute.json", "--dispatcher-side", "gpu"])
    assert "invalid choice: 'gpu'" in capsys.readouterr().err
