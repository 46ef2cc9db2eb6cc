"""Horovod's ``horovod.torch.elastic.sampler``: ``ElasticSampler``."""

import math
import random

import torch


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
