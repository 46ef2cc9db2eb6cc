"""Horovod's ``horovod.torch.mpi_ops`` module path, for code that imports the collectives from
there: the same functions as ``horovod_rs.torch``."""

from horovod_rs.common import basics as _basics  # noqa: F401  (Horovod's tests read process sets through it)
from horovod_rs.common.basics import *  # noqa: F401,F403  (Horovod's init, size, rank, ... timelines)
from horovod_rs.common.exceptions import HorovodInternalError  # noqa: F401
from horovod_rs.common.process_sets import *  # noqa: F401,F403  (Horovod's process sets)
from horovod_rs.torch import (  # noqa: F401
    Adasum, Average, Compression, Max, Min, Product, Sum, allgather, allgather_async, allreduce, allreduce_,
    allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
    broadcast_async_, grouped_allgather, grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
    grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter, grouped_reducescatter_async, join, poll,
    reducescatter, reducescatter_async, sparse_allreduce_async, synchronize,
)
