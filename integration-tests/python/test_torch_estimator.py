"""horovod_rs.spark.torch on a real local-cluster: Horovod's TorchEstimator and TorchModel."""

import importlib.metadata
import json
import os
import re

import pytest
import torch
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.feature import VectorAssembler
from torch import nn
from torch.nn import functional as F

import horovod_rs.torch as hvd
from horovod_rs.spark.common import session
from horovod_rs.spark.common.job import HorovodRunError
from horovod_rs.spark.common.store import Store
from horovod_rs.spark.torch import TorchEstimator, TorchModel


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def forward(self, features):
        return self.layer(features)


class TwoHeads(nn.Module):
    """Two inputs (a 2-wide vector and a scalar), two outputs (a value and 3 class scores)."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(3, 16)
        self.value = nn.Linear(16, 1)
        self.scores = nn.Linear(16, 3)

    def forward(self, features, x3):
        h = torch.relu(self.hidden(torch.cat([features, x3.reshape(-1, 1)], dim=1)))
        return self.value(h), self.scores(h)


class FailsOnRankOne(Linear):
    def forward(self, features):
        if hvd.rank() == 1:
            raise RuntimeError("rank one fails on purpose")
        return super().forward(features)


def regression(spark, rows=2000):
    df = spark.range(0, rows).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2", "id % 3 AS label",
                                         "rand(3) < 0.2 AS isVal", "CAST(1 + id % 2 AS float) AS weight")
    df = df.selectExpr("*", "2 * x1 - 3 * x2 + 0.5 AS y", "x1 * x2 AS x3")
    return VectorAssembler(inputCols=["x1", "x2"], outputCol="features").transform(df)


def closed_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def estimator(store, **kwargs):
    torch.manual_seed(0)  # the model's first weights, whatever earlier tests drew from torch's generator
    model = kwargs.pop("model", None) or Linear()
    params = dict(num_proc=2, store=store, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                  loss=F.mse_loss, feature_cols=["features"], label_cols=["y"], batch_size=32, epochs=2,
                  random_seed=1, verbose=0)
    params.update(kwargs)
    return TorchEstimator(**params)


def test_fits_learns_and_transforms(spark, tmp_path, mlflow_run, capsys):
    df = regression(spark)
    store = Store.create(str(tmp_path))
    model = estimator(store, epochs=3, validation=0.2, metrics=[[lambda out, y: (out - y).abs().mean()]],
                      verbose=1).fit(df)
    # The driver's progress, one line per epoch here (not a terminal), besides the ranks' lines.
    out = capsys.readouterr().out
    assert "horovod_rs: TorchEstimator.fit: epoch 3/3 done in " in out
    # Where the fit's time went: every phase, adding up to the fit's wall time; one line of it.
    timings = model.getTimings()
    assert list(timings) == ["driver", "launch", "join", "framework", "data", "setup", "train", "validation",
                             "checkpoint", "finish", "return", "model", "other", "wall"]
    assert timings["train"] > 0 and timings["validation"] > 0 and timings["wall"] > timings["train"]
    assert sum(v for k, v in timings.items() if k != "wall") == pytest.approx(timings["wall"], abs=0.02)
    # (Phases under 0.05 s are left out of the line: the driver's may be, on a fast host.)
    assert re.search(r"horovod_rs: TorchEstimator.fit took [0-9.]+ s: [a-z]+ [0-9.]+ s, .*train [0-9.]+ s", out)
    history = model.getHistory()
    assert [h["epoch"] for h in history] == [0, 1, 2]
    assert set(history[-1]) == {"epoch", "train", "validation"}
    assert history[-1]["validation"]["loss"] < 0.05, history
    assert history[-1]["train"]["loss"] < history[0]["train"]["loss"]
    assert list(history[-1]["train"]["all_metrics"][0]) == ["group_0_y"]
    predicted = model.transform(df)
    assert dict(predicted.dtypes)["y__output"] == "double"  # the label's type
    mse = predicted.selectExpr("avg(pow(y__output - y, 2))").first()[0]
    assert mse < 0.05
    # The returned model and optimizer: eval mode, the user's learning rate (not times the ranks).
    assert not model.getModel().training
    optimizer = model.getOptimizer()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    assert all(p is q for p, q in zip(optimizer.param_groups[0]["params"], model.getModel().parameters()))
    assert store.exists(store.get_logs_path(model.getRunId()))
    # TensorBoard's events, written without TensorFlow (its stub): each epoch's loss, as TensorBoard reads it.
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    events = EventMultiplexer().AddRunsFromDirectory(store.get_logs_path(model.getRunId()))
    events.Reload()
    losses = [scalar for run in events.Runs() for scalar in events.Scalars(run, "train/loss")]
    assert [scalar.step for scalar in losses] == [0, 1, 2]
    assert [scalar.value for scalar in losses] == pytest.approx([h["train"]["loss"] for h in history])
    # MLflow's run, active on the driver: the params, each epoch's metrics (step: the epoch), the model.
    import mlflow

    client = mlflow.MlflowClient()
    params = client.get_run(mlflow_run).data.params
    assert (params["epochs"], params["loss"], params["optimizer"], params["optimizer_lr"]) == \
        ("3", "mse_loss", "SGD", "0.05")
    for name, stage in (("train/loss", "train"), ("validation/loss", "validation")):
        # (MLflow logs the last epoch's again when it links the model to them.)
        logged = {m.step: m.value for m in client.get_metric_history(mlflow_run, name)}
        assert logged == {h["epoch"]: pytest.approx(h[stage]["loss"]) for h in history}
    assert {m.step for m in client.get_metric_history(mlflow_run, "validation/group_0_y")} == {0, 1, 2}
    requirements = open(mlflow.pyfunc.get_model_dependencies("runs:/%s/model" % mlflow_run)).read().split()
    assert "torch==" + importlib.metadata.version("torch") in requirements, requirements
    loaded = mlflow.pytorch.load_model("runs:/%s/model" % mlflow_run)
    x = torch.tensor([[0.5, -0.25]])
    assert torch.allclose(loaded(x), model.getModel()(x))


def test_two_inputs_two_outputs_weights_validation_column_and_persistence(spark, tmp_path):
    df = spark.createDataFrame(regression(spark, 600).collect())  # the same rows in every job
    store = Store.create(str(tmp_path / "store"))
    net = TwoHeads()

    def cross_entropy(out, y, reduction="mean"):
        return F.cross_entropy(out, y.long(), reduction=reduction)

    est = estimator(store, model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.01),
                    loss=[F.mse_loss, cross_entropy],
                    loss_weights=[0.5, 0.5], feature_cols=["features", "x3"], label_cols=["y", "label"],
                    sample_weight_col="weight", validation="isVal", epochs=1)
    pipeline = Pipeline(stages=[est]).fit(df)
    model = pipeline.stages[0]
    assert isinstance(model, TorchModel) and "validation" in model.getHistory()[0]
    out = pipeline.transform(df).select("x1", "y__output", "label__output")
    types = dict(out.dtypes)
    assert types["label__output"] == "vector" and types["y__output"] == "double"
    expected = sorted((r.x1, r.y__output, tuple(r.label__output)) for r in out.collect())
    assert all(len(v) == 3 for _, _, v in expected)

    pipeline.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    again = loaded.transform(df).select("x1", "y__output", "label__output").collect()
    assert sorted((r.x1, r.y__output, tuple(r.label__output)) for r in again) == expected
    model.write().overwrite().save(str(tmp_path / "model"))
    reloaded = TorchModel.load(str(tmp_path / "model"))
    assert reloaded.getHistory() == model.getHistory()
    assert reloaded.getOptimizer().param_groups[0]["lr"] == pytest.approx(0.01)
    # The saved framework file loads with torch alone.
    assert isinstance(torch.load(str(tmp_path / "model" / "data" / "model.pt"), weights_only=False), nn.Module)


def test_a_fit_over_vectors_lifts_the_batch_byte_cap_only_while_it_runs(spark, tmp_path):
    """ML vectors reach the ranks as their struct; the fit lifts Spark 4's batch byte cap for its
    job (checked after every row, it walks the batch on dense vectors) unless the session sets it,
    and leaves the session's settings as it found them."""
    key = "spark.sql.execution.arrow.maxBytesPerBatch"
    with session.setting_unless_set(spark, key, "12345"):
        assert spark.conf.get(key) == "12345"
    assert session.conf(spark, key) is None
    store = Store.create(str(tmp_path))
    df = regression(spark, 400)
    estimator(store, epochs=1).fit(df)
    assert session.conf(spark, key) is None
    spark.conf.set(key, "1048576")
    try:
        with session.setting_unless_set(spark, key, "12345"):
            assert spark.conf.get(key) == "1048576"
        estimator(store, epochs=1).fit(df)
        assert spark.conf.get(key) == "1048576"
    finally:
        spark.conf.unset(key)


def test_estimator_saves_and_loads(spark, tmp_path):
    est = estimator(Store.create(str(tmp_path)), input_shapes=[[-1, 2]], epochs=3)
    est.write().overwrite().save(str(tmp_path / "estimator"))
    loaded = TorchEstimator.load(str(tmp_path / "estimator"))
    assert loaded.getEpochs() == 3 and loaded.getInputShapes() == [[-1, 2]]
    assert isinstance(loaded.getModel(), Linear) and loaded.getLoss() is F.mse_loss


def test_a_model_with_a_rows_input_shape_and_horovods_metadata_predicts_row_by_row(spark):
    # Horovod reshapes each row to input_shapes when it predicts: [2] is a row's shape, and three
    # outputs a row make a 3-wide vector. The width was read from a batch of one row, which the
    # shape took whole: three values, one row, a float column.
    from horovod_rs.spark.common import util

    df = regression(spark, rows=40)
    metadata = util._get_metadata(df)  # Horovod's form, as its tests build Models with it
    assert metadata["features"]["shape"] == 2 and metadata["features"]["intermediate_format"] == "array"
    assert metadata["y"]["intermediate_format"] == "nochange" and metadata["y"]["max_size"] == 1
    net = nn.Linear(2, 3)
    model = TorchModel(model=net, input_shapes=[[2]], feature_columns=["features"], label_columns=["y"],
                       _metadata=metadata)
    out = model.transform(df)
    assert type(out.schema["y__output"].dataType).__name__ == "VectorUDT"
    for row in out.select("features", "y__output").collect():
        expected = net(torch.tensor(row.features.toArray(), dtype=torch.float32)).detach().numpy()
        assert row.y__output.toArray() == pytest.approx(expected, abs=1e-5)


def test_resumes_a_run_by_id_with_fp16_gradients_and_loss_constructors(spark, tmp_path, monkeypatch):
    import time
    import warnings

    from horovod_rs.spark.common.tracking import TrackingWarning

    df = spark.createDataFrame(regression(spark, 400).collect())
    store = Store.create(str(tmp_path))
    options = dict(run_id="run1", loss=None, loss_constructors=[lambda **context: nn.MSELoss()],
                   gradient_compression=hvd.Compression.fp16, backward_passes_per_step=2)
    # The first fit tracks to an MLflow server that is not there: one warning naming it, the fit goes on.
    pytest.importorskip("mlflow")
    closed = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", closed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        first = estimator(store, epochs=1, mlflow_tracking=True, **options).fit(df)
        took = time.monotonic() - start
    tracking = [str(w.message) for w in caught if issubclass(w.category, TrackingWarning)]
    assert len(tracking) == 1 and closed in tracking[0], tracking
    assert took < 60, took
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    state = json.loads(store.read(os.path.join(store.get_run_path("run1"), "state.json")))
    assert state["epochs_done"] == 1
    second = estimator(store, epochs=2, **options).fit(df)
    history = second.getHistory()
    assert [h["epoch"] for h in history] == [0, 1]
    assert history[0] == first.getHistory()[0]  # epoch 0 was not trained again


def test_an_empty_dataframe_fails_naming_it(spark, tmp_path):
    # No job counts the rows before the fit (it would compute the DataFrame twice): Spark runs no
    # task over a DataFrame it knows to be empty, and the ranks count the rows of the others.
    store = Store.create(str(tmp_path))
    with pytest.raises(ValueError, match="the DataFrame has no rows: Spark ran no task over it"):
        estimator(store).fit(regression(spark).limit(0))
    with pytest.raises(HorovodRunError, match="the DataFrame has no training rows"):
        estimator(store).fit(regression(spark).where("x1 > 2"))


def test_missing_column_fails_on_the_driver(spark, tmp_path):
    with pytest.raises(ValueError, match="column 'nope' not found in the DataFrame"):
        estimator(Store.create(str(tmp_path)), feature_cols=["nope"]).fit(regression(spark, 100))


def test_bad_params_are_named():
    with pytest.raises(ValueError, match="only one of loss_constructors and loss"):
        TorchEstimator(loss=F.mse_loss, loss_constructors=[lambda **kw: F.mse_loss])
    with pytest.raises(ValueError, match="backward_passes_per_step must be > 0"):
        TorchEstimator(backward_passes_per_step=0)
    with pytest.raises(TypeError, match="epoch"):
        TorchEstimator(epoch=3)


def test_a_failing_rank_is_named(spark, tmp_path):
    with pytest.raises(HorovodRunError, match="(?s)rank 1 of 2 failed.*rank one fails on purpose"):
        estimator(Store.create(str(tmp_path)), model=FailsOnRankOne()).fit(regression(spark, 200))


def test_cross_validation_picks_among_fits(spark, tmp_path):
    from pyspark.ml.evaluation import RegressionEvaluator
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    df = spark.createDataFrame(regression(spark, 400).select("features", "y").collect())
    est = estimator(Store.create(str(tmp_path)), epochs=1)
    # One epoch of 64-row batches takes 3 steps per rank; of 8-row batches, 25: the latter fits better.
    grid = ParamGridBuilder().addGrid(est.batch_size, [64, 8]).build()
    evaluator = RegressionEvaluator(labelCol="y", predictionCol="y__output", metricName="rmse")
    cv = CrossValidator(estimator=est, estimatorParamMaps=grid, evaluator=evaluator, numFolds=2, seed=1).fit(df)
    assert len(cv.avgMetrics) == 2 and cv.avgMetrics[1] < cv.avgMetrics[0]
    assert isinstance(cv.bestModel, TorchModel)
    rmse = evaluator.evaluate(cv.bestModel.transform(df))
    assert rmse < 1.0, rmse


def test_a_store_the_executors_cannot_write_to_fails_before_training(spark, tmp_path):
    from horovod_rs.spark.common.store import FilesystemStore

    class DriverOnlyStore(FilesystemStore):
        """Writable from the driver, not from the executors (say, a path local to the driver's host)."""

        def write(self, path, data):
            from pyspark import TaskContext

            if TaskContext.get() is not None:
                raise PermissionError(13, "Permission denied", path)
            super().write(path, data)

    est = estimator(DriverOnlyStore(str(tmp_path)), epochs=50)
    with pytest.raises(HorovodRunError, match="(?s)rank 0 of 2 failed.*rank 0's executor cannot write to the store: "
                                              "the store at file://.*Permission denied"):
        est.fit(regression(spark, 200))
