"""Horovod's ``horovod.keras.callbacks``: those of ``horovod_rs.tensorflow.keras.callbacks``."""

from horovod_rs.tensorflow.keras.callbacks import *  # noqa: F401,F403
