"""What a rank of horovod_rs.spark.run knows about its Spark task."""

import os


def get_available_devices():
    """The GPU addresses Spark assigned to this task (empty without GPUs)."""
    gpus = os.environ.get("HOROVOD_RS_GPUS", "")
    return gpus.split(",") if gpus else []
