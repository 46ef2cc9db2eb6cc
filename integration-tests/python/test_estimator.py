"""The PySpark user's path: HorovodEstimator from Python on a real local-cluster."""

import json

import pytest

from pyspark.ml import Pipeline, PipelineModel

from horovod_rs.spark.ml import HorovodEstimator, HorovodModel

SPEC = {
    "inputs": [{"name": "x", "type": "float", "columns": ["x1", "x2"]}],
    "layers": [
        {"name": "h", "type": "dense", "input": "x", "units": 16, "activation": "relu"},
        {"name": "y_hat", "type": "dense", "input": "h", "units": 1},
    ],
    "outputs": ["y_hat"],
}


def data(spark):
    return spark.range(0, 3000).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2").selectExpr(
        "x1", "x2", "2 * x1 - 3 * x2 + 0.5 AS y"
    )


def test_fit_and_transform_from_python(spark):
    df = data(spark)
    model = HorovodEstimator(
        modelSpec=SPEC, labelCols=["y"], numProc=2, loss="mse", learningRate=0.01,
        batchSize=64, epochs=8, validation=0.2, seed=1, verbose=0,
    ).fit(df)
    history = model.getHistory()
    assert len(history) == 8
    assert history[-1]["val_loss"] < 0.05, history[-1]
    mse = model.transform(df).selectExpr("avg(pow(prediction - y, 2))").first()[0]
    assert mse < 0.05


def test_bad_params_and_columns_are_named(spark):
    with pytest.raises(TypeError, match="unknown HorovodEstimator params: \\['epoch'\\]"):
        HorovodEstimator(modelSpec=json.dumps(SPEC), epoch=3)
    with pytest.raises(Exception, match="label column 'target' is not in the DataFrame"):
        HorovodEstimator(modelSpec=SPEC, labelCols=["target"], numProc=2).fit(data(spark))


def test_saved_models_and_pipelines_load_from_python(spark, tmp_path):
    df = spark.createDataFrame(data(spark).limit(500).collect())  # the same rows in every job
    estimator = HorovodEstimator(modelSpec=SPEC, labelCols=["y"], numProc=2, epochs=1, batchSize=64, verbose=0)
    pipeline = Pipeline(stages=[estimator]).fit(df)
    expected = [r.prediction for r in pipeline.transform(df).orderBy("x1").collect()]
    pipeline.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[0], HorovodModel)
    assert [r.prediction for r in loaded.transform(df).orderBy("x1").collect()] == expected
    pipeline.stages[0].write().overwrite().save(str(tmp_path / "model"))
    model = HorovodModel.load(str(tmp_path / "model"))
    assert [r.prediction for r in model.transform(df).orderBy("x1").collect()] == expected
    assert model.getOrDefault("modelSpec") == loaded.stages[0].getOrDefault("modelSpec")
