"""Horovod's ``horovod.spark.tensorflow``: a TensorFlow data service compute job on Spark (``compute_worker``)."""
