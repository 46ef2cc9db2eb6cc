"""Horovod's ``horovod.tensorflow.data``: TensorFlow's data service run by a compute job (``compute_service``)."""
