"""Horovod's ``horovod.torch.elastic``: the state of a PyTorch training, ``run``, and
``ElasticSampler`` (see ``horovod_rs.common.elastic`` for what elastic means without an elastic
driver)."""

from horovod_rs.common.elastic import ObjectState, run_fn  # noqa: F401  (hvd.elastic.ObjectState)
from horovod_rs.torch.elastic.sampler import ElasticSampler  # noqa: F401  (Horovod's API)
from horovod_rs.torch.elastic.state import TorchState  # noqa: F401  (Horovod's API)


def run(func):
    """Runs ``func(state, ...)``; a collective that failed (``HorovodInternalError``) restores
    the state's last commit, joins the job again and runs it again."""
    return run_fn(func, _reset)


def _reset():
    from horovod_rs import torch as hvd

    hvd.shutdown()
    hvd.init()
