"""KerasEstimator and KerasModel on a real local-cluster: Horovod's Keras workflow, fed by Arrow."""

import os
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from pyspark.ml import Pipeline, PipelineModel  # noqa: E402
from pyspark.ml.feature import VectorAssembler  # noqa: E402

from horovod_rs.spark.common.store import Store  # noqa: E402
from horovod_rs.spark.keras import KerasEstimator, KerasModel  # noqa: E402
from horovod_rs.spark.run_api import HorovodRunError  # noqa: E402

from synthetic import write_mnist_libsvm  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples")


def linear_rows(spark, n=3000, partitions=4):
    return spark.range(0, n, numPartitions=partitions).selectExpr(
        "rand(1) * 2 - 1 AS x1", "rand(2) * 2 - 1 AS x2", "rand(3) < 0.2 AS isVal").selectExpr(
        "x1", "x2", "isVal", "2 * x1 - 3 * x2 + 0.5 AS y")


def two_input_model():
    k = tf.keras
    x1, x2 = k.Input(shape=(1,), name="x1"), k.Input(shape=(1,), name="x2")
    hidden = k.layers.Dense(16, activation="relu")(k.layers.Concatenate()([x1, x2]))
    return k.Model([x1, x2], k.layers.Dense(1)(hidden))


def estimator(store, **overrides):
    params = dict(num_proc=2, store=store, model=two_input_model(), optimizer=tf.keras.optimizers.Adam(0.01),
                  loss="mse", metrics=["mae"], feature_cols=["x1", "x2"], label_cols=["y"], batch_size=64,
                  epochs=4, random_seed=1, verbose=0)
    params.update(overrides)
    return KerasEstimator(**params)


@pytest.fixture
def store(tmp_path):
    return Store.create(str(tmp_path / "store"))


def test_fit_predicts_and_reports_horovods_history(spark, store, mlflow_run):
    from horovod_rs.tensorflow.keras.callbacks import BestModelCheckpoint

    df = linear_rows(spark)
    model = estimator(store, validation="isVal", checkpoint_callback=BestModelCheckpoint(monitor="val_loss")).fit(df)
    history = model.getHistory()
    assert set(history) == {"loss", "mae", "val_loss", "val_mae"} and len(history["val_loss"]) == 4
    # The rows reach the ranks in the order Spark's shuffle fetches them, so the first epochs vary
    # from run to run (0.09 to 1.3 seen); the last is good and better than the first.
    assert history["val_loss"][-1] < min(0.1, history["val_loss"][0])
    predicted = model.transform(df)
    assert dict(predicted.dtypes)["y__output"] == "double"  # the label's type, as Horovod
    assert predicted.selectExpr("avg(abs(y__output - y))").first()[0] < 0.3
    # The returned model trains on alone: its learning rate is the user's, not scaled by the ranks.
    assert np.isclose(float(model.getModel().optimizer.learning_rate.numpy()), 0.01)
    assert store.exists(store.get_run_path(model.getRunId()) + "/state.json")
    timings = model.getTimings()  # Keras's callbacks time its steps, validation and checkpoints
    assert min(timings[phase] for phase in ("setup", "train", "validation", "checkpoint")) > 0, timings
    # MLflow's run, active on the driver: the params, each epoch's metrics (step: the epoch), the model.
    import mlflow

    client = mlflow.MlflowClient()
    params = client.get_run(mlflow_run).data.params
    assert (params["epochs"], params["loss"], params["optimizer"], params["optimizer_lr"]) == ("4", "mse", "Adam", "0.01")
    # (MLflow logs the last epoch's again when it links the model to them.)
    logged = {m.step: m.value for m in client.get_metric_history(mlflow_run, "val_loss")}
    assert sorted(logged) == [0, 1, 2, 3]
    assert np.allclose([logged[step] for step in range(4)], history["val_loss"])
    # Its requirements pin its framework (given, not inferred by MLflow in a subprocess).
    requirements = open(mlflow.pyfunc.get_model_dependencies("runs:/%s/model" % mlflow_run)).read().split()
    assert {"keras==" + tf.keras.__version__, "tensorflow==" + tf.__version__} <= set(requirements), requirements
    loaded = mlflow.keras.load_model("runs:/%s/model" % mlflow_run)
    x = [np.array([[0.5]], np.float32), np.array([[-0.25]], np.float32)]
    assert np.allclose(loaded.predict(x, verbose=0), model.getModel().predict(x, verbose=0))


def test_validation_fraction_and_sample_weights(spark, store):
    # Half the rows have garbage labels and weight 0: the model must learn the clean rows only.
    df = linear_rows(spark).selectExpr("x1", "x2", "IF(rand(7) < 0.5, y, 100.0) AS y",
                                       "IF(y = 100.0, 0.0, 1.0) AS w")
    df = df.selectExpr("x1", "x2", "y", "CAST(y != 100.0 AS DOUBLE) AS w")
    model = estimator(store, validation=0.25, sample_weight_col="w", epochs=6).fit(df)
    clean = df.filter("w = 1.0")
    assert model.transform(clean).selectExpr("avg(abs(y__output - y))").first()[0] < 0.4
    assert len(model.getHistory()["val_loss"]) == 6


def test_multiple_outputs_vector_columns_and_custom_objects(spark, store):
    k = tf.keras
    df = spark.range(0, 2000, numPartitions=3).selectExpr(
        "rand(1) AS a", "rand(2) AS b", "rand(3) AS c").selectExpr(
        "a", "b", "c", "a + b AS total", "CAST(a > b AS INT) AS bigger")
    df = VectorAssembler(inputCols=["a", "b", "c"], outputCol="features").transform(df)
    df = df.selectExpr("features", "total", "bigger", "array(CAST(1 - bigger AS FLOAT), CAST(bigger AS FLOAT)) "
                       "AS onehot")

    def doubled_relu(x):  # as Rossmann's act_sigmoid_scaled: the ranks and transform load it by name
        return tf.nn.relu(x) * 2.0

    features = k.Input(shape=(3,), name="features")
    hidden = k.layers.Dense(32, activation=doubled_relu)(features)
    model = k.Model(features, [k.layers.Dense(1, name="total")(hidden),
                               k.layers.Dense(2, activation="softmax", name="which")(hidden)])
    fitted = KerasEstimator(num_proc=2, store=store, model=model, optimizer=k.optimizers.Adam(0.02),
                            custom_objects={"doubled_relu": doubled_relu},
                            loss=["mse", "categorical_crossentropy"], loss_weights=[1.0, 0.5],
                            feature_cols=["features"], label_cols=["total", "onehot"], batch_size=32, epochs=5,
                            random_seed=2, verbose=0).fit(df)
    out = fitted.setOutputCols(["total_hat", "which_prob"]).transform(df)
    types = dict(out.dtypes)
    assert types["total_hat"] == "double" and types["which_prob"] == "vector"
    rows = out.select("bigger", "which_prob", "total", "total_hat").collect()
    accuracy = np.mean([int(np.argmax(r.which_prob.toArray())) == r.bigger for r in rows])
    assert accuracy > 0.8, accuracy
    assert np.mean([abs(r.total - r.total_hat) for r in rows]) < 0.2


def test_save_load_and_pipeline(spark, store, tmp_path):
    df = spark.createDataFrame(linear_rows(spark, 800).collect())  # the same rows in every job
    assembler = VectorAssembler(inputCols=["x1", "x2"], outputCol="features")
    k = tf.keras
    inputs = k.Input(shape=(2,))
    net = k.Model(inputs, k.layers.Dense(1)(k.layers.Dense(8, activation="tanh")(inputs)))
    keras_estimator = KerasEstimator(num_proc=2, store=store, model=net, optimizer=k.optimizers.Adam(0.02),
                                     loss="mse", feature_cols=["features"], label_cols=["y"], batch_size=32,
                                     epochs=2, verbose=0)
    pipeline = Pipeline(stages=[assembler, keras_estimator]).fit(df)
    expected = [r.y__output for r in pipeline.transform(df).orderBy("x1").collect()]
    pipeline.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[1], KerasModel)
    assert [r.y__output for r in loaded.transform(df).orderBy("x1").collect()] == expected
    pipeline.stages[1].save(str(tmp_path / "model"))
    model = KerasModel.load(str(tmp_path / "model"))
    assert model.getFeatureColumns() == ["features"] and model.getHistory() == pipeline.stages[1].getHistory()
    assert os.path.exists(str(tmp_path / "model" / "data" / "model.keras"))  # loadable by Keras alone
    assert tf.keras.models.load_model(str(tmp_path / "model" / "data" / "model.keras")).count_params() == \
        net.count_params()


def test_estimators_save_and_load(spark, store, tmp_path):
    keras_estimator = estimator(store, validation=0.1, metrics=["mae"])
    keras_estimator.save(str(tmp_path / "estimator"))
    loaded = KerasEstimator.load(str(tmp_path / "estimator"))
    assert loaded.getFeatureCols() == ["x1", "x2"] and loaded.getValidation() == 0.1
    assert loaded.getModel().count_params() == keras_estimator.getModel().count_params()
    assert np.isclose(loaded.getOptimizer().get_config()["learning_rate"], 0.01)
    assert len(loaded.fit(linear_rows(spark, 500)).getHistory()["loss"]) == 4


def test_a_second_fit_with_the_same_run_id_resumes(spark, store):
    df = linear_rows(spark)
    first = estimator(store, epochs=2, run_id="resumed").fit(df)
    second = estimator(store, epochs=4, run_id="resumed").fit(df)
    assert len(first.getHistory()["loss"]) == 2
    history = second.getHistory()["loss"]
    assert len(history) == 4 and history[:2] == first.getHistory()["loss"]
    assert history[2] < history[0]  # continued from the checkpoint, not from scratch


def test_tiny_data_in_one_partition_trains_on_every_rank(spark, store):
    df = spark.createDataFrame([(0.1, 0.2, 1.0), (0.3, -0.1, 0.0), (0.5, 0.5, 2.0)], ["x1", "x2", "y"]).coalesce(1)
    model = estimator(store, batch_size=128, epochs=1).fit(df)
    assert model.transform(df).count() == 3


def test_bad_columns_and_models_are_named_before_any_job(spark, store):
    df = linear_rows(spark)
    with pytest.raises(ValueError, match="column 'x3' not found in the DataFrame; its columns are x1, x2, isVal, y"):
        estimator(store, feature_cols=["x1", "x3"]).fit(df)
    with pytest.raises(ValueError, match="the model has 2 inputs .* but 1 feature columns are given"):
        estimator(store, feature_cols=["x1"]).fit(df)
    with pytest.raises(ValueError, match="column 'name' has type string, which cannot feed a model"):
        estimator(store, feature_cols=["x1", "name"]).fit(df.selectExpr("*", "'a' AS name"))


def test_nulls_and_a_failing_rank_end_in_one_error_naming_the_rank(spark, store):
    df = linear_rows(spark).selectExpr("x1", "IF(x2 > 0.9, NULL, x2) AS x2", "y")
    with pytest.raises(HorovodRunError, match=r"(?s)rank \d of 2 failed.*column 'x2' has \d+ null values"):
        estimator(store).fit(df)

    class FailsOnRankOne(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            import horovod_rs.tensorflow.keras as hvd

            if hvd.rank() == 1:
                raise RuntimeError("rank one's callback gives up")

    with pytest.raises(HorovodRunError, match="(?s)rank 1 of 2 failed.*rank one's callback gives up"):
        estimator(store, callbacks=[FailsOnRankOne()]).fit(linear_rows(spark))


@pytest.mark.slow
@pytest.mark.classic_only  # the script starts its own classic session
def test_horovod_style_keras_mnist_script(tmp_path):
    write_mnist_libsvm(str(tmp_path / "mnist.bz2"), rows=3000)
    script = os.path.join(EXAMPLES, "keras", "keras_spark_mnist.py")
    result = subprocess.run([sys.executable, script, "--master", "local-cluster[2,1,1024]", "--num-proc", "2",
                             "--epochs", "2", "--batch-size", "64", "--data-dir", str(tmp_path),
                             "--work-dir", str(tmp_path / "store"), "--min-accuracy", "0.8"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Test accuracy:" in result.stdout
    assert "<stdout>:Epoch 2/2" in result.stdout  # rank 0's epochs reached the driver as they ran


class RunBackend:
    """A user's own Backend (only Horovod's interface): it gets the data through Parquet."""

    def run(self, fn, args=(), kwargs={}, env=None):
        import horovod_rs.spark

        return horovod_rs.spark.run(fn, args=args, kwargs=kwargs, num_proc=2, env=env)

    def num_processes(self):
        return 2


def test_prepared_parquet_data_and_a_custom_backend(spark, store):
    from horovod_rs.spark.common.util import prepare_data

    df = linear_rows(spark, 2000, partitions=1)
    with prepare_data(2, store, df, label_columns=["y"], feature_columns=["x1", "x2"], validation="isVal",
                      partitions_per_process=1) as dataset_idx:
        assert store.is_parquet_dataset(store.get_train_data_path(dataset_idx))
        # (fit_on_parquet() with no index inside such a block, as Horovod's documentation writes
        # it: test_documented_snippets.py.)
    # fit() with a backend that cannot take Arrow partitions goes through prepare_data itself.
    # (Parquet's rows reach the ranks in no fixed order; 4 epochs of these 800 rows a rank ended
    # at 0.30 once; 8 ended at 0.05-0.12 in three runs.)
    model = estimator(store, num_proc=None, backend=RunBackend(), validation="isVal", epochs=8).fit(df)
    assert len(model.getHistory()["val_loss"]) == 8
    assert model.transform(df).selectExpr("avg(abs(y__output - y))").first()[0] < 0.3
    # Outside any block, with nothing at the store's own training path: the missing data is named.
    with pytest.raises(ValueError, match="no prepared training data at .*intermediate_train_data"):
        estimator(store, num_proc=None, backend=RunBackend()).fit_on_parquet()
