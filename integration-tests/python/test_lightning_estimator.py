"""horovod_rs.spark.lightning on a real local-cluster: Horovod's Lightning TorchEstimator on
PyTorch Lightning 2.x, with Lightning 1.x hooks as Horovod's users wrote them."""

import json
import os

import pytest
import pytorch_lightning as pl
import torch
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.feature import VectorAssembler
from torch import nn
from torch.nn import functional as F

import horovod_rs.torch as hvd
from horovod_rs.spark.common.job import HorovodRunError
from horovod_rs.spark.common.store import Store
from horovod_rs.spark.lightning import TorchEstimator, TorchModel


class Regression(pl.LightningModule):
    """y from a 2-wide vector; also a second head of 3 class scores (for multi-output transform)."""

    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.value = nn.Linear(2, 1)
        self.scores = nn.Linear(2, 3)
        self.epoch_ends = 0

    def forward(self, features):
        return self.value(features.float()), self.scores(features.float())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    def _loss(self, batch):
        value, scores = self(batch["features"])
        weight = batch.get("weight")
        mse = F.mse_loss(value.reshape(-1), batch["y"].float(), reduction="none")
        mse = (mse * weight.float()).mean() if weight is not None else mse.mean()
        return mse + F.cross_entropy(scores, batch["label"].long())

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("val_loss", loss)
        return loss

    def validation_epoch_end(self, outputs):  # Lightning 1.x's hook: 2.x refuses modules that have it
        self.log("avg_val_loss", torch.stack(outputs).mean())


class FailsOnRankOne(Regression):
    def training_step(self, batch, batch_idx):
        if hvd.rank() == 1:
            raise RuntimeError("rank one fails on purpose")
        return super().training_step(batch, batch_idx)


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def forward(self, features):
        return self.layer(features)


class CountsEpochEnds(pl.Callback):
    """Lightning 1.x's callback hooks (2.x never calls them)."""

    def __init__(self):
        self.inits, self.epoch_ends, self.train_ends, self.val_ends = 0, 0, 0, 0

    def on_init_start(self, trainer):
        self.inits += 1

    def on_epoch_end(self, trainer, model):
        self.epoch_ends += 1

    def on_train_epoch_end(self, trainer, model, unused=None):
        self.train_ends += 1

    def on_validation_epoch_end(self, trainer, model, unused=None):
        self.val_ends += 1

    def on_train_end(self, trainer, model):
        assert self.inits == 1
        assert self.epoch_ends == self.train_ends + self.val_ends == 4, vars(self)


def data(spark, rows=1500):
    df = spark.range(0, rows).selectExpr("rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2", "id % 3 AS label",
                                         "rand(3) < 0.2 AS isVal", "CAST(1 + id % 2 AS float) AS weight")
    df = df.selectExpr("*", "2 * x1 - 3 * x2 + 0.5 AS y")
    return VectorAssembler(inputCols=["x1", "x2"], outputCol="features").transform(df)


def estimator(store, **kwargs):
    params = dict(num_proc=2, store=store, model=kwargs.pop("model", None) or Regression(),
                  input_shapes=[[-1, 2]], feature_cols=["features"], label_cols=["y", "label"], batch_size=32,
                  epochs=2, random_seed=1, verbose=0)
    params.update(kwargs)
    return TorchEstimator(**params)


def test_fits_with_legacy_hooks_transforms_and_loads(spark, tmp_path):
    df = spark.createDataFrame(data(spark).collect())  # the same rows in every job
    store = Store.create(str(tmp_path / "store"))
    counter = CountsEpochEnds()
    pipeline = Pipeline(stages=[estimator(store, validation="isVal", sample_weight_col="weight",
                                          callbacks=[counter])]).fit(df)
    model = pipeline.stages[0]
    history = model.getHistory()
    assert {"train_loss", "val_loss", "avg_val_loss"} <= set(history), history
    assert float(history["avg_val_loss"]) < 1.3, history
    assert not model.getModel().training
    timings = model.getTimings()  # Lightning's hooks time its steps, validation and checkpoints
    assert min(timings[phase] for phase in ("setup", "train", "validation", "checkpoint")) > 0, timings
    out = pipeline.transform(df).select("x1", "y", "y__output", "label__output")
    assert dict(out.dtypes)["label__output"] == "vector"
    rows = out.collect()
    assert sum((r.y - r.y__output) ** 2 for r in rows) / len(rows) < 0.1
    assert store.exists(store.get_logs_path(model.getRunId()))  # TensorBoard events

    pipeline.write().overwrite().save(str(tmp_path / "pipeline"))
    again = PipelineModel.load(str(tmp_path / "pipeline")).transform(df).select("x1", "y__output").collect()
    assert sorted((r.x1, r.y__output) for r in again) == sorted((r.x1, r.y__output) for r in rows)
    model.write().overwrite().save(str(tmp_path / "model"))
    assert isinstance(TorchModel.load(str(tmp_path / "model")).getModel(), Regression)


def test_plain_torch_module_trains_with_validation_fraction(spark, tmp_path):
    net = Plain()
    model = estimator(Store.create(str(tmp_path)), model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                      loss=F.mse_loss, label_cols=["y"], validation=0.2, epochs=3).fit(data(spark))
    assert float(model.getHistory()["val_loss"]) < 0.05, model.getHistory()
    assert isinstance(model.getModel(), Plain)


def test_accumulated_gradients_are_averaged_once_per_step(spark, tmp_path):
    # Gradients computed twice before a step: the strategy reduces them after the closure, not from
    # their hooks (which overlap backward when each is computed once per step).
    net = Plain()
    model = estimator(Store.create(str(tmp_path)), model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                      loss=F.mse_loss, label_cols=["y"], validation=0.2, epochs=6,
                      trainer_args={"accumulate_grad_batches": 2}).fit(data(spark))
    assert float(model.getHistory()["val_loss"]) < 0.05, model.getHistory()


def test_resumes_a_run_by_id(spark, tmp_path):
    df = spark.createDataFrame(data(spark, 400).collect())
    store = Store.create(str(tmp_path))
    estimator(store, run_id="run1", epochs=1).fit(df)
    state = json.loads(store.read(os.path.join(store.get_run_path("run1"), "state.json")))
    assert state["epochs_done"] == 1
    estimator(store, run_id="run1", epochs=2).fit(df)
    state = json.loads(store.read(os.path.join(store.get_run_path("run1"), "state.json")))
    assert state["epochs_done"] == 2


def test_bad_params_are_named(spark, tmp_path):
    net = Regression()
    with pytest.raises(ValueError, match="Parameter `optimizer` cannot be specified with a `LightningModule`"):
        estimator(Store.create(str(tmp_path)), model=net,
                  optimizer=torch.optim.SGD(net.parameters(), lr=0.1)).fit(data(spark, 100))
    with pytest.raises(ValueError, match="column 'nope' not found in the DataFrame"):
        estimator(Store.create(str(tmp_path)), feature_cols=["nope"]).fit(data(spark, 100))


def test_a_failing_rank_is_named(spark, tmp_path):
    with pytest.raises(HorovodRunError, match="(?s)rank 1 of 2 failed.*rank one fails on purpose"):
        estimator(Store.create(str(tmp_path)), model=FailsOnRankOne()).fit(data(spark, 200))
