"""Horovod's ``horovod.torch.functions`` module path: the object and state broadcasts of
``horovod_rs.torch``."""

from horovod_rs.torch import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters,
)
