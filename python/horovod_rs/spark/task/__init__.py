"""What a rank of horovod_rs.spark.run knows about its Spark task (Horovod's
``horovod.spark.task``)."""


def get_available_devices():
    """The GPU addresses Spark assigned to this task (empty without GPUs or outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    gpus = context.resources().get("gpu") if context is not None else None
    return list(gpus.addresses) if gpus is not None else []
