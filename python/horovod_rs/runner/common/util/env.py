"""Horovod's ``horovod.runner.common.util.env``: where a process launched by ``horovodrs`` (or
``mpirun``) reads its rank and the job's size before ``init()``."""

import os

_RANK_AND_SIZE = (("HOROVOD_RANK", "HOROVOD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                  ("PMI_RANK", "PMI_SIZE"))


def get_env_rank_and_size():
    """This process's rank and the job's size from the launcher's environment; (0, 1) outside a
    launcher."""
    for rank_name, size_name in _RANK_AND_SIZE:
        rank, size = os.environ.get(rank_name), os.environ.get(size_name)
        if rank is not None and size is not None:
            return int(rank), int(size)
        if rank is not None or size is not None:
            raise RuntimeError("could not tell this process's rank and the job's size: %s is set but not %s"
                               % ((rank_name, size_name) if rank is not None else (size_name, rank_name)))
    return 0, 1
