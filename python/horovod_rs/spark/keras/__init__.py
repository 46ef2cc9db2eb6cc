"""Horovod's ``horovod.spark.keras``: ``KerasEstimator`` fits a tf.keras model on a DataFrame
across Spark executors; ``KerasModel`` predicts with it."""

from horovod_rs.spark.keras.estimator import KerasEstimator, KerasModel  # noqa: F401
