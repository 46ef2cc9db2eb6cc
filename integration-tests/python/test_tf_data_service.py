"""A TensorFlow data service compute job on the suite's Spark cluster
(horovod_rs.spark.tensorflow.compute_worker, Horovod's), and a training job that reads its dataset
from it and shuts it down: two processes under horovodrs, or Horovod's Spark example with only its
imports changed (given HOROVOD_SOURCE)."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from test_estimator_examples import IMPORT_LINE, horovod_file

HOROVOD_EXAMPLE = "examples/spark/tensorflow2/tensorflow2_mnist_data_service"
# Keras's MNIST download replaced by generated digits, for machines without the internet.
OFFLINE_MNIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "offline_mnist")

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


def start_compute_job(spark, configfile, dispatcher_side="compute"):
    """The compute job on the suite's two executors, in a thread; the thread and a list that
    receives its error."""
    from horovod_rs.spark.tensorflow.compute_worker import serve

    failures = []

    def compute_job():
        try:
            serve(spark, str(configfile), dispatcher_side=dispatcher_side, num_proc=2)
        except Exception as e:
            failures.append(e)

    compute = threading.Thread(target=compute_job, daemon=True)
    compute.start()
    return compute, failures


@pytest.mark.slow  # two applications' TensorFlow imports (35 s here); the ranks' part runs in make test
@pytest.mark.classic_only
def test_a_training_job_reads_its_dataset_from_a_compute_job_on_spark(spark, tmp_path):
    configfile, results = tmp_path / "compute.json", tmp_path / "elements.json"
    compute, failures = start_compute_job(spark, configfile)
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


@pytest.mark.slow  # 24 epochs of Horovod's net: minutes
@pytest.mark.classic_only
@pytest.mark.parametrize("dispatcher_side, flags, legacy_keras", [("compute", [], "1"),
                                                                  ("training", ["--reuse-dataset"], "0")],
                         ids=["compute-side-keras2", "training-side-reuse-keras3"])
def test_horovods_data_service_example_runs_with_only_its_imports_changed(spark, tmp_path, dispatcher_side, flags,
                                                                         legacy_keras):
    for suffix in ("", "_train_fn_compute_side_dispatcher", "_train_fn_training_side_dispatcher"):
        path = HOROVOD_EXAMPLE + suffix + ".py"
        (tmp_path / os.path.basename(path)).write_text(IMPORT_LINE.sub(r"\1horovod_rs", horovod_file(path)))
    configfile = tmp_path / "compute.json"
    compute, failures = start_compute_job(spark, configfile, dispatcher_side)

    # The training job is a Spark application of its own (local[2]), on Keras 2 (as the example was
    # written) or Keras 3.
    path = os.pathsep.join([str(tmp_path), OFFLINE_MNIST])
    env = dict(os.environ, TF_USE_LEGACY_KERAS=legacy_keras, PYTHONPATH=path, PYSPARK_SUBMIT_ARGS=(
        "--master local[2] --conf spark.executorEnv.TF_USE_LEGACY_KERAS=%s --conf spark.executorEnv.PYTHONPATH=%s "
        "pyspark-shell" % (legacy_keras, path)))
    env.pop("MASTER", None)
    training = subprocess.run([sys.executable, os.path.basename(HOROVOD_EXAMPLE) + ".py", str(configfile)] + flags,
                              cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=1800)
    assert training.returncode == 0, training.stdout[-3000:] + training.stderr[-3000:]
    assert "Epoch 24/24" in training.stdout
    compute.join(120)
    assert not compute.is_alive(), "the compute job did not end after the training job shut it down"
    assert failures == []
