"""Horovod's ``horovod.spark.lightning``: ``TorchEstimator`` fits a PyTorch Lightning module on
a DataFrame across Spark executors; ``TorchModel`` predicts with it."""

from horovod_rs.spark.lightning.estimator import TorchEstimator, TorchModel  # noqa: F401
