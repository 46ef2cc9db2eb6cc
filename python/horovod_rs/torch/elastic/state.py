"""Horovod's ``horovod.torch.elastic.state``: ``TorchState``."""

import copy

from horovod_rs.common.elastic import ObjectState
from horovod_rs.torch.elastic.sampler import ElasticSampler


class TorchState(ObjectState):
    """The state of a model and an optimizer (either may be None), plus ``kwargs`` as
    attributes (epoch, batch...): saved as deep copies of their state dicts, synced from rank 0.
    An ``ElasticSampler`` among ``kwargs`` keeps its position the same way (rank 0's after a
    sync, dealt again among the ranks of the new world)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        from horovod_rs import torch as hvd

        self.model, self.optimizer = model, optimizer
        self._samplers = {name: value for name, value in kwargs.items() if isinstance(value, ElasticSampler)}
        for name, sampler in self._samplers.items():
            setattr(self, name, sampler)
        self._save_handlers()
        super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank,
                         **{name: value for name, value in kwargs.items() if name not in self._samplers})

    def _save_handlers(self):
        self._saved_model = copy.deepcopy(self.model.state_dict()) if self.model is not None else None
        self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None
        self._saved_samplers = {name: sampler.state_dict() for name, sampler in self._samplers.items()}

    def save(self):
        self._save_handlers()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        for name, sampler in self._samplers.items():
            sampler.load_state_dict(self._saved_samplers[name])
        super().restore()

    def sync(self):
        from horovod_rs import torch as hvd

        if self.model is not None:
            hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)
        if self._samplers:
            positions = hvd.broadcast_object({name: s.state_dict() for name, s in self._samplers.items()},
                                             root_rank=0, name="elastic.samplers")
            for name, sampler in self._samplers.items():
                sampler.load_state_dict(positions[name])
        self._save_handlers()
        super().sync()
