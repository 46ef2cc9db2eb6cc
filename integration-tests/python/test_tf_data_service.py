"""A TensorFlow data service compute job on the suite's Spark cluster
(horovod_rs.spark.tensorflow.compute_worker, Horovod's), and a training job of two processes under
horovodrs that reads its dataset from it and shuts it down."""

import json
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import CONNECT

TRAINING = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import horovod_rs.tensorflow as hvd
    from horovod_rs.tensorflow.data.compute_service import TfDataServiceConfig

    hvd.init()
    config = TfDataServiceConfig.read(sys.argv[1], wait_for_file_creation=True)
    dataset = tf.data.Dataset.range(500).map(lambda v: v * 3).batch(20) \\
        .send_to_data_service(config, hvd.rank(), hvd.size(), reuse_dataset=True)
    mine = [int(v) for batch in dataset.as_numpy_iterator() for v in batch]
    everyone = hvd.allgather_object(mine)
    if hvd.rank() == 0:
        with open(sys.argv[2], "w") as f:
            json.dump(everyone, f)
        config.compute_client(verbose=0).shutdown()
""")


@pytest.mark.slow  # two applications' TensorFlow imports (35 s here); the ranks' part runs in make test
@pytest.mark.skipif(CONNECT, reason="the training job's processes reach the compute service on this host")
def test_a_training_job_reads_its_dataset_from_a_compute_job_on_spark(spark, tmp_path):
    from horovod_rs.spark.tensorflow.compute_worker import serve

    configfile, results = tmp_path / "compute.json", tmp_path / "elements.json"
    failures = []

    def compute_job():
        try:
            serve(spark, str(configfile), num_proc=2)
        except Exception as e:
            failures.append(e)

    compute = threading.Thread(target=compute_job, daemon=True)
    compute.start()
    (tmp_path / "train.py").write_text(TRAINING)
    training = subprocess.run([sys.executable, "-m", "horovod_rs.runner", "-np", "2", sys.executable,
                               str(tmp_path / "train.py"), str(configfile), str(results)],
                              capture_output=True, text=True, timeout=600)
    assert training.returncode == 0, training.stdout[-3000:] + training.stderr[-3000:]
    compute.join(120)
    assert not compute.is_alive(), "the compute job did not end after the training job shut it down"
    assert failures == []
    # One dataset shared by the two training processes: between them, each element once.
    everyone = json.loads(results.read_text())
    assert sorted(v for each in everyone for v in each) == [v * 3 for v in range(500)]
