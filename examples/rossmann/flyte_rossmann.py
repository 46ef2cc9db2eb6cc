"""The Rossmann pipeline as a Flyte workflow: one Spark task (``flytekitplugins-spark``) prepares
the data, fits the tutorial's KerasEstimator on horovod_rs inside the task's Spark session, and
predicts the test set; the workflow returns the validation RMSPE and the submission CSV.

Run locally (Flyte's local execution starts a local Spark session for the task):

    pyflyte run examples/rossmann/flyte_rossmann.py rossmann --stores 20 --max_val_rmspe 0.2

On a Flyte cluster with the Spark operator, the same task runs on the Spark cluster Flyte starts
for it (the image needs horovod_rs, tensorflow and this directory). The other way Flyte runs
Horovod, its MPI plugin on Kubeflow's MPI Operator, starts the launcher with a host file:
``horovodrs --hostfile /etc/mpi/hostfile python train.py`` (docs/python.md).
"""

import os
import sys
import tempfile
import typing

import cloudpickle
import flytekit
from flytekit import task, workflow
from flytekit.types.file import FlyteFile
from flytekitplugins.spark import Spark

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_spark_rossmann  # noqa: E402
import rossmann_data  # noqa: E402

# The estimator ships the model's metric and activation to the executors with cloudpickle: by
# value, since the executors cannot import this directory's modules.
cloudpickle.register_pickle_by_value(keras_spark_rossmann)

# Spark's Python workers run this interpreter (the one with horovod_rs), unless told otherwise.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
if "FLYTE_INTERNAL_EXECUTION_ID" not in os.environ:
    # Local execution: flytekit binds the driver to 127.0.0.1, so it must advertise that address
    # too (Spark would pick the host's network address, where nothing listens).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

Result = typing.NamedTuple("Result", [("val_rmspe", float), ("submission", FlyteFile)])


@task(task_config=Spark(spark_conf={"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"}))
def prepare_train_predict(data_dir: str, stores: int, num_proc: int, epochs: int, batch_size: int,
                          learning_rate: float, max_val_rmspe: float) -> Result:
    """Prepares the Rossmann files (Kaggle's in ``data_dir``, else ``stores`` generated stores),
    fits the tutorial's model on ``num_proc`` ranks, predicts the test rows. Fails when the
    validation RMSPE is not below ``max_val_rmspe`` (0: no limit)."""
    spark = flytekit.current_context().spark_session
    work_dir = tempfile.mkdtemp(prefix="rossmann-", dir=flytekit.current_context().working_directory)
    data = rossmann_data.find_or_generate_data(data_dir or None, work_dir, stores)
    prepared = rossmann_data.prepare(spark, data)
    rossmann_data.show_sizes(prepared)
    estimator = keras_spark_rossmann.make_estimator(prepared.vocab, prepared.max_sales, num_proc, work_dir,
                                                    batch_size, epochs, learning_rate)
    model = estimator.fit(prepared.train_df).setOutputCols(['Sales_output'])
    val_rmspe, baseline = rossmann_data.evaluate(model, prepared.train_df)
    submission = os.path.join(work_dir, "submission.csv")
    rows = rossmann_data.write_submission(model, prepared.test_df, submission)
    print("rossmann flyte: validation RMSPE %.4f (store medians %.4f), %d predictions" % (val_rmspe, baseline, rows))
    if max_val_rmspe and not val_rmspe < max_val_rmspe:
        raise ValueError("validation RMSPE %.4f is not below %.4f" % (val_rmspe, max_val_rmspe))
    return Result(val_rmspe=val_rmspe, submission=FlyteFile(submission))


@workflow
def rossmann(data_dir: str = "", stores: int = 20, num_proc: int = 2, epochs: int = 5, batch_size: int = 64,
             learning_rate: float = 0.003, max_val_rmspe: float = 0.0) -> Result:
    """The Rossmann tutorial end to end: data preparation, training and prediction in one Spark task."""
    return prepare_train_predict(data_dir=data_dir, stores=stores, num_proc=num_proc, epochs=epochs,
                                 batch_size=batch_size, learning_rate=learning_rate, max_val_rmspe=max_val_rmspe)
