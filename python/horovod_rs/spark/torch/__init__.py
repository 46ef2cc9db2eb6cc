"""Horovod's ``horovod.spark.torch``: ``TorchEstimator`` fits a PyTorch model on a DataFrame
across Spark executors; ``TorchModel`` predicts with it."""

from horovod_rs.spark.torch.estimator import TorchEstimator, TorchModel  # noqa: F401
