"""Horovod's ``horovod.torch.elastic``: the state of a PyTorch training, ``run``, and
``ElasticSampler`` (see ``horovod_rs.common.elastic`` for what elastic means without an elastic
driver)."""

import copy
import math
import random

import torch

from horovod_rs.common.elastic import ObjectState, run_fn


def run(func):
    """Runs ``func(state, ...)``; a collective that failed (``HorovodInternalError``) restores
    the state's last commit, joins the job again and runs it again."""
    return run_fn(func, _reset)


def _reset():
    from horovod_rs import torch as hvd

    hvd.shutdown()
    hvd.init()


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ``ElasticSampler``: each rank's share of ``dataset``'s indices, as
    ``DistributedSampler`` deals them (shuffled by ``seed`` + epoch, padded to a multiple of the
    ranks), skipping the samples the ranks have already processed this epoch. The training loop
    calls ``record_batch`` after each batch; in a ``TorchState`` the sampler's position is saved
    with the state's commits, and after a reset the unprocessed indices are dealt again among the
    ranks of the new world. The dataset's size must not change."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch ``epoch`` (its own shuffle) with nothing processed."""
        self.epoch, self.processed_num = epoch, 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts a batch of ``batch_size`` samples on every rank as processed."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch, self.processed_num = state_dict["epoch"], state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Deals the epoch's unprocessed indices again among the current ranks."""
        from horovod_rs import torch as hvd

        self.num_replicas, self.rank = hvd.size(), hvd.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)  # the same order on every rank
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        # Padded by repeating the indices as often as needed: every rank gets ``num_samples``, even
        # when fewer indices remain than there are ranks (unequal shares would stall the ranks).
        indices = self.remaining_indices
        if indices:
            indices = (indices * math.ceil(self.total_size / len(indices)))[:self.total_size]
        self.indices = indices[self.rank::self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


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
