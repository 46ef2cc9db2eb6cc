"""The PySpark user's path: HorovodEstimator from Python on a real local-cluster, from a classic
session, or from a Spark Connect client of it (``HOROVOD_RS_TEST_CONNECT=1``, see conftest.py)."""

import json
import os

import pyspark
import pytest

from pyspark.ml import Pipeline, PipelineModel
from pyspark.sql.utils import is_remote

from horovod_rs.spark.ml import HorovodEstimator, HorovodModel

SPEC = {
    "inputs": [{"name": "x", "type": "float", "columns": ["x1", "x2"]}],
    "layers": [
        {"name": "h", "type": "dense", "input": "x", "units": 16, "activation": "relu"},
        {"name": "y_hat", "type": "dense", "input": "h", "units": 1},
    ],
    "outputs": ["y_hat"],
}
SPARK_ML_ON_CONNECT = int(pyspark.__version__.split(".")[0]) >= 4
connect_only = pytest.mark.skipif(os.environ.get("HOROVOD_RS_TEST_CONNECT") != "1", reason="needs a Connect client")


@pytest.fixture
def ml_spark(spark):
    """The session, where the wrappers reach the JVM stages: classic, or a Spark 4 Connect client."""
    if is_remote() and not SPARK_ML_ON_CONNECT:
        pytest.skip("PySpark 3.5's Connect client has no Spark ML (test_a_spark35_connect_client_is_told_what_works)")
    return spark


def data(spark):
    return spark.range(0, 3000).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2").selectExpr(
        "x1", "x2", "2 * x1 - 3 * x2 + 0.5 AS y"
    )


def small_estimator(**params):
    return HorovodEstimator(modelSpec=SPEC, labelCols=["y"], numProc=2, epochs=1, batchSize=64, verbose=0, **params)


def test_fit_and_transform_from_python(ml_spark, mlflow_run):
    df = data(ml_spark)
    model = HorovodEstimator(
        modelSpec=SPEC, labelCols=["y"], numProc=2, loss="mse", learningRate=0.01,
        batchSize=64, epochs=8, validation=0.2, seed=1, verbose=0,
    ).fit(df)
    history = model.getHistory()
    assert len(history) == 8
    assert [epoch["epoch"] for epoch in history] == [float(e) for e in range(1, 9)]
    assert history[-1]["val_loss"] < 0.05, history[-1]
    mse = model.transform(df).selectExpr("avg(pow(prediction - y, 2))").first()[0]
    assert mse < 0.05
    # The MLflow run active on the driver: the params and the history's metrics (step: the epoch, from 0).
    import mlflow

    client = mlflow.MlflowClient()
    assert client.get_run(mlflow_run).data.params["learningRate"] == "0.01"
    logged = client.get_metric_history(mlflow_run, "val_loss")
    assert [(m.step, m.value) for m in logged] == [(e, pytest.approx(h["val_loss"])) for e, h in enumerate(history)]


def test_bad_params_and_columns_are_named(ml_spark):
    with pytest.raises(TypeError, match="unknown HorovodEstimator params: \\['epoch'\\]"):
        HorovodEstimator(modelSpec=json.dumps(SPEC), epoch=3)
    with pytest.raises(Exception, match="label column 'target' is not in the DataFrame"):
        HorovodEstimator(modelSpec=SPEC, labelCols=["target"], numProc=2).fit(data(ml_spark))


def test_saved_models_and_pipelines_load_from_python(ml_spark, tmp_path):
    df = ml_spark.createDataFrame(data(ml_spark).limit(500).collect())  # the same rows in every job
    pipeline = Pipeline(stages=[small_estimator()]).fit(df)
    expected = [r.prediction for r in pipeline.transform(df).orderBy("x1").collect()]
    pipeline.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[0], HorovodModel)
    assert loaded.stages[0].uid == pipeline.stages[0].uid
    assert [r.prediction for r in loaded.transform(df).orderBy("x1").collect()] == expected
    assert loaded.stages[0].getHistory() == pipeline.stages[0].getHistory()
    pipeline.stages[0].write().overwrite().save(str(tmp_path / "model"))
    model = HorovodModel.load(str(tmp_path / "model"))
    assert [r.prediction for r in model.transform(df).orderBy("x1").collect()] == expected
    assert model.getOrDefault("modelSpec") == loaded.stages[0].getOrDefault("modelSpec")


def test_estimators_and_unfitted_pipelines_keep_their_params(ml_spark, tmp_path):
    estimator = small_estimator(validation=0.25, store=str(tmp_path / "runs"))
    Pipeline(stages=[estimator]).write().save(str(tmp_path / "pipeline"))
    estimator.write().save(str(tmp_path / "estimator"))
    for loaded in (Pipeline.load(str(tmp_path / "pipeline")).getStages()[0],
                   HorovodEstimator.load(str(tmp_path / "estimator"))):
        assert isinstance(loaded, HorovodEstimator)
        assert loaded.uid == estimator.uid
        assert json.loads(loaded.getOrDefault("modelSpec")) == SPEC
        assert loaded.getOrDefault("labelCols") == ["y"]
        assert loaded.getOrDefault("epochs") == 1
        assert loaded.getOrDefault("validation") == "0.25"
        assert loaded.getOrDefault("store") == str(tmp_path / "runs")


@connect_only
def test_history_from_a_connect_client_is_read_from_a_copy_it_deletes(ml_spark, tmp_path, monkeypatch):
    model = small_estimator().fit(data(ml_spark).limit(500))
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SPARKML_TEMP_DFS_PATH", str(tmp_path / "a-file"))
    with pytest.raises(RuntimeError, match="a copy saved at .*a-file/horovod-rs-model-.*set SPARKML_TEMP_DFS_PATH"):
        model.getHistory()
    monkeypatch.setenv("SPARKML_TEMP_DFS_PATH", str(tmp_path / "scratch"))
    history = model.getHistory()
    assert [sorted(epoch) for epoch in history] == [["epoch", "loss", "samples_per_second"]]
    assert os.listdir(tmp_path / "scratch") == []


@connect_only
def test_a_connect_server_without_the_class_says_the_jar_must_be_there(ml_spark, tmp_path):
    class NotOnTheServer(HorovodEstimator):
        _java_class = "horovod.rs.spark.ml.NotOnTheServer"

    estimator = NotOnTheServer(modelSpec=SPEC, labelCols=["y"])
    missing = "the Spark Connect server cannot find horovod.rs.spark.ml.NotOnTheServer: the horovod-rs jar"
    with pytest.raises(RuntimeError, match=missing + ".* must be on the server .*--jars or spark.jars"):
        estimator.fit(data(ml_spark))
    with pytest.raises(RuntimeError, match=missing):
        estimator.write().save(str(tmp_path / "estimator"))


@connect_only
@pytest.mark.skipif(SPARK_ML_ON_CONNECT, reason="PySpark 4 has Spark ML on Connect")
def test_a_spark35_connect_client_is_told_what_works(spark):
    told = f"PySpark {pyspark.__version__}: its Connect client has no Spark ML .*Use a classic SparkSession"
    with pytest.raises(RuntimeError, match=told):
        HorovodEstimator(modelSpec=SPEC, labelCols=["y"])
    with pytest.raises(RuntimeError, match=told):
        HorovodModel.load("/nowhere")
