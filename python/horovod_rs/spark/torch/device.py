"""Which device a rank of the PyTorch estimators trains on: the GPU Spark assigned to its task
(Horovod's ``_get_assigned_gpu_or_local_rank``), or the CPU. Every rank must agree, since
gradients are reduced between tensors of one device type."""

import os


def assigned_gpu(local_rank):
    """The GPU index to pin: the one Spark assigned to the task, else the local rank (also when
    ``HOROVOD_SPARK_USE_LOCAL_RANK_GPU_INDEX=1``)."""
    from horovod_rs.spark.task import get_available_devices

    devices = get_available_devices()
    if devices and os.environ.get("HOROVOD_SPARK_USE_LOCAL_RANK_GPU_INDEX", "0") == "0":
        return int(devices[0])
    return local_rank


def training_device(hvd, use_gpu, verbose):
    """Pins this rank's GPU and returns ``torch.device('cuda')``, or returns the CPU device; fails
    on every rank when the ranks disagree on having a GPU."""
    import torch

    from horovod_rs.spark.task import get_available_devices

    cuda = torch.cuda.is_available()
    if use_gpu and get_available_devices() and not cuda:
        raise RuntimeError("Spark assigned GPU %s to this task but torch cannot use it (torch.cuda.is_available() "
                           "is False; a CPU-only torch build?): install a CUDA build of torch or set use_gpu=False"
                           % ",".join(get_available_devices()))
    if cuda and not use_gpu:
        if verbose:
            print("horovod_rs: a GPU is available but use_gpu=False: training on the CPU")
        cuda = False
    elif use_gpu and not cuda and verbose:
        print("horovod_rs: no GPU visible to this rank (use_gpu=True): training on the CPU")
    everyone = hvd.allgather_object(cuda, name="horovod_rs.device_type")
    if len(set(everyone)) > 1:
        with_gpu = [r for r, c in enumerate(everyone) if c]
        raise RuntimeError("ranks %s train on a GPU and ranks %s on the CPU: every rank needs the same device type "
                           "(give every task a GPU, or set use_gpu=False)"
                           % (with_gpu, [r for r in range(len(everyone)) if r not in with_gpu]))
    if not cuda:
        return torch.device("cpu")
    index = assigned_gpu(hvd.local_rank())
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def limit_threads():
    """torch uses the task's cores (Spark's OMP_NUM_THREADS), not the whole host's, also in a
    reused Python worker where torch started before."""
    import torch

    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
