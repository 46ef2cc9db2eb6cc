"""Horovod's ``horovod.keras``: with Keras 3, standalone Keras and tf.keras are one library, so this
is ``horovod_rs.tensorflow.keras``."""

from horovod_rs.tensorflow.keras import *  # noqa: F401,F403
from horovod_rs.tensorflow.keras import (  # noqa: F401  (names * leaves out)
    Adasum,
    Average,
    Compression,
    DistributedOptimizer,
    Sum,
    callbacks,
    elastic,
    load_model,
)
