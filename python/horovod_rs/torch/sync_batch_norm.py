"""Horovod's ``horovod.torch.SyncBatchNorm``: batch normalization over every rank's batch."""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

# Statistics of half-precision inputs are summed in float32.
_HALF = (torch.float16, torch.bfloat16)


class SyncBatchNorm(_BatchNorm):
    """``torch.nn.BatchNorm*d`` (for inputs of any dimension from 2) whose training-mode mean
    and variance are those of all the ranks' batches together, as if one process normalized the
    whole batch; the running statistics follow them alike. The statistics are two allreduces
    (the sums, then the squared deviations from the mean), and gradients flow back through them
    (an allreduce's gradient is the allreduce of the gradients), so the input's gradient is the
    whole batch's too. Horovod's runs on GPUs only (PyTorch's CUDA kernels); this one on CPU and
    GPU tensors. Every rank runs its layers in the same order, as every collective."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def forward(self, input):
        from horovod_rs import torch as hvd

        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        batch_statistics = self.training or not self.track_running_stats
        if not batch_statistics or hvd.size() == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                batch_statistics, self._average_factor(), self.eps)
        return self._normalize_over_ranks(input, hvd)

    def _average_factor(self):
        """The running statistics' weight for this batch: ``momentum``, or with ``momentum=None``
        a cumulative average (as ``_BatchNorm``)."""
        if self.momentum is not None:
            return self.momentum
        return 1.0 / float(self.num_batches_tracked) if self.training and self.track_running_stats else 0.0

    def _normalize_over_ranks(self, input, hvd):
        x = input.float() if input.dtype in _HALF else input
        channels = x.size(1)
        over = [0] + list(range(2, x.dim()))  # every dimension but the channels'
        shape = [1, channels] + [1] * (x.dim() - 2)
        local_count = x.new_tensor([float(x.numel() // channels)])
        totals = hvd.allreduce(torch.cat([x.sum(over), local_count]), op=hvd.Sum)
        count = totals[-1]
        mean = totals[:-1] / count
        centered = x - mean.reshape(shape)
        var = hvd.allreduce((centered * centered).sum(over), op=hvd.Sum) / count
        if self.training and self.track_running_stats:
            with torch.no_grad():
                n, factor = float(count), self._average_factor()
                self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
                unbiased = var * (n / max(n - 1.0, 1.0))
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)
        out = centered * torch.rsqrt(var + self.eps).reshape(shape)
        if self.affine:
            out = out * self.weight.reshape(shape) + self.bias.reshape(shape)
        return out.to(input.dtype)
