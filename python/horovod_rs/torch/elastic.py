"""Horovod's ``horovod.torch.elastic``: the state of a PyTorch training and ``run`` (see
``horovod_rs.common.elastic`` for what elastic means without an elastic driver)."""

import copy

from horovod_rs.common.elastic import ObjectState, run_fn


def run(func):
    """Runs ``func(state, ...)``; a collective that failed (``HorovodInternalError``) restores
    the state's last commit, joins the job again and runs it again."""
    return run_fn(func, _reset)


def _reset():
    from horovod_rs import torch as hvd

    hvd.shutdown()
    hvd.init()


class TorchState(ObjectState):
    """The state of a model and an optimizer (either may be None), plus ``kwargs`` as
    attributes (epoch, batch...): saved as deep copies of their state dicts, synced from rank 0."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        from horovod_rs import torch as hvd

        self.model, self.optimizer = model, optimizer
        self._save_handlers()
        super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank, **kwargs)

    def _save_handlers(self):
        self._saved_model = copy.deepcopy(self.model.state_dict()) if self.model is not None else None
        self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None

    def save(self):
        self._save_handlers()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        super().restore()

    def sync(self):
        from horovod_rs import torch as hvd

        if self.model is not None:
            hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)
        self._save_handlers()
        super().sync()
