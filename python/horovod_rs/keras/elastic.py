"""Horovod's ``horovod.keras.elastic``: those of ``horovod_rs.tensorflow.keras.elastic``."""

from horovod_rs.tensorflow.keras.elastic import *  # noqa: F401,F403
from horovod_rs.tensorflow.keras.elastic import (  # noqa: F401  (names * leaves out)
    CommitStateCallback,
    KerasState,
    UpdateBatchStateCallback,
    UpdateEpochStateCallback,
    run,
)
