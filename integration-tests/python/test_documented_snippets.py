"""Horovod's documented Spark snippets and ours, run as printed: only ``horovod`` -> ``horovod_rs``
changed, plus the least glue (a small DataFrame, a store in a temporary directory, ``num_proc=2``
where a snippet asks for 4, as this cluster has two task slots). Where a snippet cannot run as
printed on any Horovod either, the test says what it changed and why.

Run here (Horovod's docs/spark.rst, then ours):
- the Run API's toy example, ``horovod.spark.run(fn, args=(42,))`` with the default ``num_proc``,
  and in the same job ``get_available_devices()`` from ``horovod.spark.task`` (also on the
  driver): ``[]`` without a GPU resource, as in Horovod (keras_spark3_rossmann.py's ``[0]`` then
  fails on both);
- the ``KerasEstimator`` example, ``fit(train_df).setOutputCols(['predict'])``, ``transform``,
  and ``getModel().predict([np.ones([1, 2], dtype=np.float32)])``;
- "Training on existing Parquet datasets": ``fit_on_parquet()`` on a store whose ``train_path``
  and ``val_path`` hold Parquet; and ``with util.prepare_data(...): ... fit_on_parquet()`` with no
  index inside the block;
- "Horovod on Databricks": ``Store.create(dbfs_path)`` for the three DBFS path patterns and
  ``DBFSLocalStore(dbfs_path)``;
- docs/estimators.md's ``TorchEstimator`` call; docs/databricks.md's ``HorovodEstimator`` call
  (``store``, ``runId``).

Covered elsewhere:
- docs/elastic.rst's training function (``hvd.elastic.run``, ``TorchState``, reset callbacks)
  under ``run_elastic``: integration-tests/elastic/test_elastic.py::
  test_without_a_loss_it_returns_every_ranks_result_in_rank_order (a cluster of its own);
- docs/estimators.md's Keras call (Rossmann's, ``BestModelCheckpoint``, ``custom_objects``):
  test_keras_estimator.py::test_fit_predicts_and_reports_horovods_history and
  ::test_multiple_outputs_vector_columns_and_custom_objects, and make rossmann;
  README.md's ``KerasEstimator`` call (``validation=0.1``, several feature columns):
  test_keras_estimator.py::test_validation_fraction_and_sample_weights;
- ``HOROVOD_SPARK_START_TIMEOUT``: python/tests_spark/test_job.py; Horovod's MNIST scripts with
  their imports changed: test_estimator_examples.py;
- docs/install.md's ``jar_path()``/``configure_builder``: test_jars.py; docs/python.md's and
  README.md's ``horovod_rs.torch`` snippets: make python-test.
"""

import re
import sys

import cloudpickle
import numpy as np
import pytest

# The functions below run on the executors, which cannot import this module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_horovods_run_api_toy_example_and_get_available_devices(spark, capsys):
    def fn(magic_number):
        import horovod_rs.torch as hvd
        hvd.init()
        print('Hello, rank = %d, local_rank = %d, size = %d, local_size = %d, magic_number = %d' % (hvd.rank(), hvd.local_rank(), hvd.size(), hvd.local_size(), magic_number))  # noqa: E501
        return hvd.rank()

    # One job for both snippets: the toy function as printed, then what Spark assigned the task.
    def fn_and_devices(magic_number):
        from horovod_rs.spark.task import get_available_devices

        return fn(magic_number), get_available_devices()

    import horovod_rs.spark
    from horovod_rs.spark.task import get_available_devices

    # No num_proc: spark.default.parallelism, 2 here. No GPU resource: [] on every rank, as Horovod.
    assert horovod_rs.spark.run(fn_and_devices, args=(42,)) == [(0, []), (1, [])]
    printed = capsys.readouterr().out
    for rank in (0, 1):
        assert re.search(r"Hello, rank = %d, local_rank = \d, size = 2, local_size = \d, magic_number = 42" % rank,
                         printed), printed
    assert get_available_devices() == []  # on the driver, outside any task


@pytest.fixture(scope="module")
def binary_df(spark):
    """The DataFrame Horovod's Keras snippet expects: a 2-vector ``features`` and a 0/1 ``y``."""
    from pyspark.ml.feature import VectorAssembler

    rows = spark.range(0, 600, numPartitions=2).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2")
    rows = rows.selectExpr("x1", "x2", "CAST(x1 + x2 > 0 AS DOUBLE) AS y")
    return VectorAssembler(inputCols=["x1", "x2"], outputCol="features").transform(rows).select("features", "y")


def horovods_keras_model():
    """docs/spark.rst's model, optimizer and loss. As printed, ``Sequential()`` followed by lines
    starting with ``.add(`` is a syntax error (and ``add`` returns None), and ``SGD(lr=0.1)`` fails
    on Keras 3 and on Keras 2 since 2.11 (``learning_rate``): on any Horovod too."""
    from tensorflow import keras

    model = keras.models.Sequential()
    model.add(keras.layers.Dense(8, input_dim=2))
    model.add(keras.layers.Activation('tanh'))
    model.add(keras.layers.Dense(1))
    model.add(keras.layers.Activation('sigmoid'))

    # NOTE: unscaled learning rate
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    loss = 'binary_crossentropy'
    return model, optimizer, loss


def test_horovods_keras_estimator_example_fits_transforms_and_gives_its_model(spark, binary_df, tmp_path):
    import horovod_rs.spark.keras as hvd
    from horovod_rs.spark.common.store import Store

    model, optimizer, loss = horovods_keras_model()
    train_df, test_df = binary_df.randomSplit([0.8, 0.2], seed=1)

    store = Store.create(str(tmp_path / "experiments"))  # was HDFSStore('/user/username/experiments')
    keras_estimator = hvd.KerasEstimator(
        num_proc=2,
        store=store,
        model=model,
        optimizer=optimizer,
        loss=loss,
        feature_cols=['features'],
        label_cols=['y'],
        batch_size=32,
        epochs=10)

    keras_model = keras_estimator.fit(train_df) \
        .setOutputCols(['predict'])
    predict_df = keras_model.transform(test_df)

    assert predict_df.selectExpr("avg(CAST((predict > 0.5) = (y > 0.5) AS DOUBLE))").first()[0] > 0.8
    # "extract the underlying Keras model and use it outside of Spark"
    model = keras_model.getModel()
    pred = model.predict([np.ones([1, 2], dtype=np.float32)])
    assert pred.shape == (1, 1) and pred[0, 0] > 0.5  # 1 + 1 > 0: class 1


def test_horovods_fit_on_parquet_trains_on_the_stores_existing_parquet(spark, binary_df, tmp_path):
    import horovod_rs.spark.keras as hvd
    from horovod_rs.spark.common.store import LocalStore
    from pyspark.ml.functions import vector_to_array

    model, optimizer, loss = horovods_keras_model()
    # An existing Parquet dataset "that contains no Spark user-defined data types": arrays, not vectors.
    train, val = binary_df.select(vector_to_array("features").alias("features"), "y").randomSplit([0.9, 0.1], seed=1)
    train.write.parquet(str(tmp_path / "training_dataset"))
    val.write.parquet(str(tmp_path / "val_dataset"))

    # was HDFSStore(train_path='/user/username/training_dataset', val_path='/user/username/val_dataset')
    store = LocalStore(str(tmp_path), train_path=str(tmp_path / 'training_dataset'),
                       val_path=str(tmp_path / 'val_dataset'))
    keras_estimator = hvd.KerasEstimator(
        num_proc=2,
        store=store,
        model=model,
        optimizer=optimizer,
        loss=loss,
        feature_cols=['features'],
        label_cols=['y'],
        batch_size=32,
        epochs=10)

    keras_model = keras_estimator.fit_on_parquet()

    history = keras_model.getHistory()
    assert len(history["val_loss"]) == 10 and history["loss"][-1] < history["loss"][0]


def test_horovods_prepare_data_block_with_fit_on_parquet_and_no_index(spark, binary_df, tmp_path):
    import horovod_rs.spark.keras as hvd
    from horovod_rs.spark.common import util
    from horovod_rs.spark.common.store import LocalStore

    model, optimizer, loss = horovods_keras_model()
    df = binary_df

    store = LocalStore(str(tmp_path), train_path=str(tmp_path / 'training_dataset'),
                       val_path=str(tmp_path / 'val_dataset'))
    with util.prepare_data(num_processes=2,
                           store=store,
                           df=df,
                           feature_columns=['features'],
                           label_columns=['y'],
                           validation=0.1,
                           compress_sparse=True):
        keras_estimator = hvd.KerasEstimator(
            num_proc=2,
            store=store,
            model=model,
            optimizer=optimizer,
            loss=loss,
            feature_cols=['features'],
            label_cols=['y'],
            batch_size=32,
            epochs=10)

        keras_model = keras_estimator.fit_on_parquet()

    history = keras_model.getHistory()
    assert len(history["val_loss"]) == 10 and history["loss"][-1] < history["loss"][0]
    assert keras_model.transform(df).selectExpr("avg(CAST((y__output > 0.5) = (y > 0.5) AS DOUBLE))").first()[0] > 0.8


@pytest.mark.parametrize("dbfs_path", ["/dbfs/ml/runs", "dbfs:/ml/runs", "file:///dbfs/ml/runs"])
def test_horovods_databricks_store_snippet(dbfs_path, monkeypatch):
    from horovod_rs.spark.common.store import DBFSLocalStore, Store

    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "15.4")
    store = Store.create(dbfs_path)
    assert isinstance(store, DBFSLocalStore) and store.prefix_path.endswith("/dbfs/ml/runs")
    # or explicitly using DBFSLocalStore
    store = DBFSLocalStore(dbfs_path)
    assert store.get_runs_path().endswith("/dbfs/ml/runs/runs")


def test_our_torch_estimator_call_fits_and_transforms(spark, tmp_path):
    import torch
    import torch.nn.functional as F
    from torch import nn

    from horovod_rs.spark.common.store import Store
    from horovod_rs.spark.torch import TorchEstimator

    # 28x28 "digits" whose label is which tenth of the pixels is lit.
    df = spark.range(0, 320, numPartitions=2).selectExpr(
        "CAST(id % 10 AS DOUBLE) AS label",
        "transform(sequence(0, 783), i -> CAST(i % 10 = id % 10 AS DOUBLE)) AS pixels")
    from pyspark.ml.functions import array_to_vector
    df = df.select(array_to_vector("pixels").alias("features"), "label")
    test_df = df.limit(20)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 10), nn.LogSoftmax(dim=1))

    model = TorchEstimator(num_proc=2, store=Store.create(str(tmp_path / "runs")), model=net,  # was "/tmp/runs"
                           optimizer=torch.optim.SGD(net.parameters(), lr=0.01),
                           loss=lambda out, y: F.nll_loss(out, y.long()), input_shapes=[[-1, 1, 28, 28]],
                           feature_cols=["features"], label_cols=["label"], validation=0.1,
                           batch_size=64, epochs=5).fit(df)
    predictions = model.setOutputCols(["label_prob"]).transform(test_df)

    history = model.getHistory()
    assert len(history) == 5 and history[-1]["validation"]["loss"] < history[0]["validation"]["loss"]
    rows = predictions.select("label", "label_prob").collect()
    assert len(rows) == 20 and all(len(row.label_prob) == 10 for row in rows)


def test_our_databricks_horovod_estimator_call_writes_its_run(spark, tmp_path):
    from horovod_rs.spark.ml import HorovodEstimator

    spec = {"inputs": [{"name": "x", "type": "float", "columns": ["x1", "x2"]}],
            "layers": [{"name": "y_hat", "type": "dense", "input": "x", "units": 1}], "outputs": ["y_hat"]}
    train_df = spark.range(0, 400, numPartitions=2).selectExpr("rand(1) AS x1", "rand(2) AS x2").selectExpr(
        "x1", "x2", "x1 - x2 AS y")

    model = HorovodEstimator(modelSpec=spec, labelCols=["y"], numProc=2, epochs=10,  # numProc=4 in the docs
                             store=str(tmp_path / "runs"), runId="sales-v1").fit(train_df)

    assert len(model.getHistory()) == 10
    assert (tmp_path / "runs" / "runs" / "sales-v1").is_dir()
