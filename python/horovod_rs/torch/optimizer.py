"""DistributedOptimizer: gradients averaged across ranks as backward produces them.

As in Horovod, the returned optimizer is an instance of a subclass of the wrapped optimizer's
class: each parameter's gradient hook submits a named asynchronous allreduce as soon as the
gradient is accumulated (so communication overlaps the rest of backward), and ``step()`` waits for
all of them before the wrapped optimizer's update.
"""

import contextlib
import warnings

import torch

from horovod_rs.common import arrays
from horovod_rs.common.process_sets import together
from horovod_rs.torch.compression import Compression


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, process_set, sparse_as_dense):
        super(self.__class__, self).__init__(params)
        from horovod_rs import torch as hvd

        self._hvd = hvd
        self._process_set = process_set or hvd.global_process_set
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self.backward_passes_per_step = backward_passes_per_step
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            names = [n for n, _ in named]
            if len(set(names)) != len(names):
                raise ValueError("named_parameters has duplicate names")
            self._names = {p: n for n, p in named}
            missing = [p for p in all_params if p not in self._names]
            if missing:
                raise ValueError("named_parameters misses %d of the optimizer's parameters" % len(missing))
        else:
            self._names = {p: "allreduce.noname.param.%d" % i for i, p in enumerate(all_params)}
        self._parameter_names = self._names  # Horovod's attribute name
        self._handles = {}  # parameter -> (handle or None while its passes accumulate, ctx)
        self._passes_left = {p: backward_passes_per_step for p in all_params}
        self._requires_update = [p for p in all_params if p.requires_grad]
        self._synchronized = False
        self._should_synchronize = True
        # As Horovod: on ranks outside the process set the optimizer steps on local gradients.
        if self._process_set.included():
            for p in self._requires_update:
                p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        if self._op == self._hvd.Adasum:  # Adasum combines the updates in step(), not gradients
            return
        if p in self._handles and self._handles[p][0] is not None and self._passes_left[p] <= 0:
            raise AssertionError("Gradients were computed more than backward_passes_per_step times before call "
                                 "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
        self._passes_left[p] -= 1
        # Gradients accumulate in p.grad over the passes, then reduce once, as Horovod's (which
        # does not divide by the passes either).
        self._handles[p] = self._reduce_async(p) if self._passes_left[p] == 0 else (None, None)

    def _reduce_async(self, p):
        if p.grad is None:  # not computed here, maybe on another rank (a dynamic forward)
            p.grad = torch.zeros_like(p)
        grad = p.grad
        if grad.is_sparse:  # e.g. nn.Embedding(sparse=True)
            if not self._sparse_as_dense:
                return self._hvd.sparse_allreduce_async(grad, "grad." + self._names[p], self._op,
                                                        self._process_set), None
            grad = grad.to_dense()  # reduced dense, made sparse again for the optimizer
        compressed, ctx = self._compression.compress(grad)
        prescale, postscale = 1.0, 1.0
        op = self._op
        if self._predivide != 1.0 and op == self._hvd.Average:
            prescale, postscale = 1.0 / self._predivide, self._predivide / self._process_set.size()
            op = self._hvd.Sum
        name = "grad." + self._names[p]
        if compressed is p.grad:  # no compression: reduce the gradient in place
            handle = self._hvd.allreduce_async_(p.grad, name=name, op=op, prescale_factor=prescale,
                                                postscale_factor=postscale, process_set=self._process_set)
        else:
            handle = self._hvd.allreduce_async(compressed, name=name, op=op, prescale_factor=prescale,
                                               postscale_factor=postscale, process_set=self._process_set)
        return handle, ctx

    def synchronize(self):
        """Reduces what backward has not submitted yet (gradients of passes short of
        ``backward_passes_per_step``, parameters without a gradient here), waits for every
        gradient and writes the averages into ``p.grad``."""
        if self._op == self._hvd.Adasum:
            return
        if not self._process_set.included():
            self._synchronized = True
            return
        missing = [p for p in self._requires_update if self._handles.get(p, (None, None))[0] is None]
        with together(self._process_set, len(missing)):
            for p in missing:
                self._handles[p] = self._reduce_async(p)
        handles, self._handles = self._handles, {}
        # Every gradient's result is taken (its name freed) before the first error is raised.
        arrays.results(lambda p=p, handle=handle, ctx=ctx: self._write_average(p, handle, ctx)
                       for p, (handle, ctx) in handles.items())
        self._synchronized = True

    def _write_average(self, p, handle, ctx):
        """Waits for ``p``'s reduced gradient and writes it into ``p.grad``."""
        self._passes_left[p] = self.backward_passes_per_step
        if callable(handle):  # a sparse gradient's allreduce
            p.grad = handle()
            return
        averaged = self._compression.decompress(self._hvd.synchronize(handle), ctx)
        if p.grad.is_sparse:
            p.grad = averaged.reshape(p.grad.shape).to_sparse()
        elif averaged is not p.grad:
            with torch.no_grad():
                p.grad.copy_(averaged.reshape(p.grad.shape))

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within the block ``step()`` does not synchronize (call ``synchronize()`` first), as
        Horovod's, e.g. to clip the averaged gradients between the two."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def zero_grad(self, *args, **kwargs):
        if any(handle is not None for handle, _ in self._handles.values()):
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can cause "
                                 "a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def step(self, closure=None):
        if self._op == self._hvd.Adasum:
            return self._adasum_step(closure)
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
                              "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in "
                              "your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def _adasum_step(self, closure):
        """As Horovod's Adasum optimizer: each rank takes the wrapped optimizer's step on its own
        gradients, and the ranks' updates (new minus old parameters) combine with Adasum."""
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        starts = [p.detach().clone() for p in params]
        loss = super(self.__class__, self).step(closure)
        with together(self._process_set, len(params)):
            handles = [self._hvd.allreduce_async(p.detach() - start, name="adasum." + self._names[p],
                                                 op=self._hvd.Adasum, process_set=self._process_set)
                       for p, start in zip(params, starts)]
        with torch.no_grad():
            for p, start, update in zip(params, starts, self._hvd._synchronize_all(handles)):
                p.copy_(start + update)
        return loss


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op="average", gradient_predivide_factor=1.0, num_groups=0,
                         groups=None, sparse_as_dense=False, process_set=None):
    """Wraps ``optimizer`` so that ``step()`` applies gradients averaged over every rank (of
    ``process_set``, when given). Sparse gradients are reduced by gathering their indices and
    values, or as dense tensors with ``sparse_as_dense``. ``num_groups`` and ``groups`` (Horovod's
    grouping of gradients into fused allreduces) are accepted; the engine fuses by itself."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, process_set, sparse_as_dense)
