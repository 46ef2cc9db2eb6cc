"""A Lightning ``Strategy`` whose ranks are horovod_rs ranks (Lightning 2.x removed its Horovod
strategy, and horovod_rs is not torch.distributed).

Each rank trains one copy of the model on one device. At setup the learning rates are multiplied
by the number of ranks (as Horovod's strategy did) and rank 0's parameters and optimizer state
are broadcast. Gradients are averaged as backward produces them, as Horovod's strategy did with
``hvd.DistributedOptimizer``: each gradient's allreduce starts from its hook while backward goes
on, and ``optimizer_step`` (Lightning runs the training step and backward inside the step's
closure) waits for them after the closure, before the optimizer updates. Where a gradient may be
computed more than once before a step (gradient accumulation, manual optimization, several
optimizers), the closure is instead followed by one grouped allreduce of every gradient, so
accumulated gradients reduce once per step. ``reduce``, ``all_gather``, ``broadcast`` and ``barrier`` (used by
``self.log(sync_dist=True)``, checkpoints and early stopping) run on horovod_rs too. Checkpoints
hold the unscaled learning rate, so a run resumed with another number of ranks scales it again.

The class is built for the Lightning package the user's module comes from (``lightning.pytorch``
or ``pytorch_lightning``: their base classes differ).
"""

import importlib


def strategy_class(package):
    """``HorovodRsStrategy`` for ``package`` ("pytorch_lightning" or "lightning.pytorch")."""
    import torch

    import horovod_rs.torch as hvd

    pl = importlib.import_module(package)
    from lightning_utilities.core.rank_zero import rank_zero_only as utils_rank_zero_only

    rank_zero_only = importlib.import_module(package + ".utilities.rank_zero").rank_zero_only
    LightningOptimizer = importlib.import_module(package + ".core.optimizer").LightningOptimizer
    TrainerFn = importlib.import_module(package + ".trainer.states").TrainerFn
    _OPS = {"mean": hvd.Average, "avg": hvd.Average, "sum": hvd.Sum, "max": hvd.Max, "min": hvd.Min}

    class HorovodRsStrategy(pl.strategies.ParallelStrategy):
        strategy_name = "horovod_rs"

        def __init__(self, device, compression=None, accelerator=None, checkpoint_io=None, precision_plugin=None):
            super().__init__(accelerator=accelerator, parallel_devices=[device], checkpoint_io=checkpoint_io,
                             precision_plugin=precision_plugin)
            self._device = device
            self._compression = compression or hvd.Compression.none
            self._overlapping = None  # set up for a fit by setup()

        @property
        def root_device(self):
            return self._device

        @property
        def global_rank(self):
            return hvd.rank()

        @property
        def local_rank(self):
            return hvd.local_rank()

        @property
        def node_rank(self):
            return hvd.cross_rank()

        @property
        def world_size(self):
            return hvd.size()

        @property
        def distributed_sampler_kwargs(self):
            return {"num_replicas": self.world_size, "rank": self.global_rank}

        def set_world_ranks(self):
            rank_zero_only.rank = utils_rank_zero_only.rank = self.global_rank

        def model_to_device(self):
            if self._device.type == "cuda":
                torch.cuda.set_device(self._device)
            self.model.to(self._device)

        def setup(self, trainer):
            super().setup(trainer)
            if trainer.state.fn != TrainerFn.FITTING:
                return
            size = self.world_size
            for optimizer in self._plain_optimizers():
                for group in optimizer.param_groups:
                    group["lr"] = group["lr"] * size
            for config in self.lr_scheduler_configs:
                if hasattr(config.scheduler, "base_lrs"):
                    config.scheduler.base_lrs = [lr * size for lr in config.scheduler.base_lrs]
            hvd.broadcast_parameters(self.lightning_module.state_dict(), root_rank=0)
            for optimizer in self._plain_optimizers():
                hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            self._overlapping = self._overlapping_exchange(trainer)

        def _overlapping_exchange(self, trainer):
            """A ``hvd.DistributedOptimizer`` over the one optimizer's parameters, used only for its
            gradient hooks and ``synchronize()``, when each gradient is computed once per step
            (automatic optimization, one optimizer, no accumulation); else None."""
            optimizers = self._plain_optimizers()
            if (len(optimizers) != 1 or not self.lightning_module.automatic_optimization
                    or trainer.accumulate_grad_batches != 1
                    or any(isinstance(c, pl.callbacks.GradientAccumulationScheduler) for c in trainer.callbacks)):
                return None
            optimizer = optimizers[0]
            params = {p for group in optimizer.param_groups for p in group["params"]}
            named = [(name, p) for name, p in self.lightning_module.named_parameters() if p in params]
            return hvd.DistributedOptimizer(optimizer, named_parameters=named if len(named) == len(params) else None,
                                            compression=self._compression, op=hvd.Average)

        def _plain_optimizers(self):
            return [o._optimizer if isinstance(o, LightningOptimizer) else o for o in self.optimizers]

        def optimizer_step(self, optimizer, closure, model=None, **kwargs):
            def closure_then_average():
                result = closure()
                if self._overlapping is not None:
                    self._overlapping.synchronize()
                else:
                    self._average_gradients(optimizer)
                return result

            return super().optimizer_step(optimizer, closure_then_average, model, **kwargs)

        def _average_gradients(self, optimizer):
            """One grouped allreduce of the optimizer's gradients; a parameter without a gradient on
            this rank contributes zeros, so every rank submits the same tensors."""
            optimizer = optimizer._optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
            params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
            if not params:
                return
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            averaged = hvd.grouped_allreduce(grads, name="horovod_rs.lightning.gradients",
                                             compression=self._compression, op=hvd.Average)
            with torch.no_grad():
                for p, value in zip(params, averaged):
                    if p.grad is None:
                        p.grad = value.reshape(p.shape).clone()
                    else:
                        p.grad.copy_(value.reshape(p.shape))

        def optimizer_state(self, optimizer):
            state = super().optimizer_state(optimizer)
            for group in state.get("param_groups", []):
                if "lr" in group:
                    group["lr"] = group["lr"] / self.world_size
            return state

        def load_optimizer_state_dict(self, checkpoint):
            super().load_optimizer_state_dict(checkpoint)
            for optimizer in self._plain_optimizers():
                for group in optimizer.param_groups:
                    group["lr"] = group["lr"] * self.world_size

        def reduce(self, tensor, group=None, reduce_op="mean"):
            if not isinstance(tensor, torch.Tensor):
                return tensor
            if group is not None:
                raise ValueError("horovod_rs reduces over every rank: unset `group`")
            name = reduce_op if reduce_op is None or isinstance(reduce_op, str) else str(reduce_op).rsplit(".", 1)[-1]
            op = _OPS.get((name or "mean").lower())
            if op is None:
                raise ValueError("horovod_rs cannot reduce with %r (use mean, sum, max or min)" % (reduce_op,))
            dtype = tensor.dtype
            if dtype == torch.bool:
                tensor = tensor.int()
            return hvd.allreduce(tensor, op=op).to(dtype)

        def all_gather(self, tensor, group=None, sync_grads=False):
            if group is not None:
                raise ValueError("horovod_rs gathers from every rank: unset `group`")
            return hvd.allgather(tensor.unsqueeze(0))

        def broadcast(self, obj, src=0):
            return hvd.broadcast_object(obj, src)

        def barrier(self, name=None, *args, **kwargs):
            hvd.barrier()

        def teardown(self):
            if self.cluster_environment is not None:
                super().teardown()
            else:
                pl.strategies.Strategy.teardown(self)

    return HorovodRsStrategy
