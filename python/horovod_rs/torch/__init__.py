"""Horovod's PyTorch API on the horovod-rs engine: ``import horovod_rs.torch as hvd``.

Names and semantics follow ``horovod.torch``. Every collective is a named submission to this
rank's engine, which runs it once every rank has submitted the same name, in whatever order the
ranks submit names (autograd hooks fire in different orders on different ranks). Unnamed calls
get automatic names, so every rank must make them in the same order.

GPU tensors: in a build with CUDA support (``cuda_built()``), allreduce and broadcast run on NCCL
in the tensor's memory, enqueued on the current CUDA stream; the other collectives, and every
collective in a build without it, go through host memory.
"""

import numpy as np
import torch

from horovod_rs.common import arrays, basics
from horovod_rs.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401  (Horovod's API)
from horovod_rs.common import process_sets as _process_sets
from horovod_rs.common.process_sets import *  # noqa: F401,F403  (Horovod's process sets)
from horovod_rs.common.basics import *  # noqa: F401,F403  (Horovod's init, size, rank, ... *_built)
from horovod_rs.torch import adasum as _adasum
from horovod_rs.torch.compression import Compression  # noqa: F401
from horovod_rs.torch.optimizer import DistributedOptimizer  # noqa: F401
from horovod_rs.torch import elastic  # noqa: F401,E402  (Horovod's API)

Average = "average"
Sum = "sum"
Min = "min"
Max = "max"
Product = "product"
Adasum = "adasum"

_DTYPES = {
    torch.uint8: "uint8",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
}

_handles = {}
_next_handle = [0]


class _Pending:
    """A submitted collective: its work and what turns the work's result into the caller's."""

    def __init__(self, work, dtype, output=None, received_splits=None, finish=None, on_device=False):
        self.work, self.dtype, self.output = work, dtype, output
        self.received_splits, self.finish, self.on_device = received_splits, finish, on_device


def _remember(pending):
    _next_handle[0] += 1
    _handles[_next_handle[0]] = pending
    return _next_handle[0]


def _dtype_name(tensor):
    try:
        return _DTYPES[tensor.dtype]
    except KeyError:
        raise ValueError("horovod_rs cannot run collectives on tensors of type %s" % tensor.dtype) from None


def _byte_view(tensor):
    """The tensor's memory as a flat numpy uint8 array, without a copy (contiguous CPU tensors)."""
    t = tensor.detach()
    if t.device.type != "cpu":
        raise ValueError("horovod_rs runs collectives on CPU and CUDA tensors; this one is on %s" % t.device)
    t = t.contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: move its bits as int16
        t = t.view(torch.int16)
    return t.reshape(-1).numpy().view(np.uint8)


def _from_bytes(data, dtype, shape):
    carrier = torch.int16 if dtype == torch.bfloat16 else dtype
    array = np.frombuffer(data, dtype=torch.empty(0, dtype=carrier).numpy().dtype).copy()
    result = torch.from_numpy(array)
    if dtype == torch.bfloat16:
        result = result.view(torch.bfloat16)
    return result.reshape(shape)


def _submit(kind, tensor, name, output=None, received_splits=None, process_set=None, **options):
    """Submits a named collective; the handle remembers where its result goes.

    ``received_splits`` is the work of the alltoall that tells this rank how many rows each rank
    sent it (Horovod's alltoall returns them beside the data)."""
    engine, set_id = _process_sets.engine(process_set)
    name = name or basics.next_name(kind, set_id)
    if tensor.device.type == "cuda":
        return _submit_cuda(kind, tensor, name, output, received_splits, process_set, engine, **options)
    # An in-place call on a contiguous tensor lends the engine the tensor's memory: no copies.
    in_place = output is tensor and tensor.is_contiguous()
    work = engine.submit(kind, name, _byte_view(tensor), _dtype_name(tensor), list(tensor.shape), in_place=in_place,
                         **options)
    return _remember(_Pending(work, tensor.dtype, output, received_splits))


def _submit_cuda(kind, tensor, name, output, received_splits, process_set, engine, **options):
    """A GPU tensor's collective: on NCCL when built for it (allreduce and broadcast), else through
    host memory, the result moved back to the tensor's device."""
    device = tensor.device
    if not (cuda_built() and kind in ("allreduce", "broadcast")):
        host = _submit(kind, tensor.detach().cpu(), name, received_splits=received_splits, process_set=process_set,
                       **options)
        pending = _handles[host]

        def back_to_device(result):
            if output is None:
                return result.to(device)
            with torch.no_grad():
                output.copy_(result.reshape(output.shape))
            return output

        pending.finish = back_to_device
        return host
    t = tensor.detach()
    if not (output is tensor and t.is_contiguous()):
        t = torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)  # Horovod's new output
    prescale, postscale = options.pop("prescale", 1.0), options.pop("postscale", 1.0)
    if prescale != 1.0:  # NCCL has no scaling: scale on the stream, before and after
        t.mul_(prescale)
    stream = torch.cuda.current_stream(device).cuda_stream
    work = engine.submit_device(kind, name, t.data_ptr(), t.numel() * t.element_size(), device.index, stream,
                                _dtype_name(t), list(t.shape), t, **options)

    def finish(_):
        if postscale != 1.0:
            t.mul_(postscale)
        if output is not None and output is not t:
            with torch.no_grad():
                output.copy_(t)
            return output
        return t

    return _remember(_Pending(work, tensor.dtype, None, received_splits, finish, on_device=True))


def _op(op, average):
    if op is not None and average is not None:
        raise ValueError("give op or average, not both")
    if average is not None:
        return Average if average else Sum
    return op or Average


def poll(handle):
    """Whether the collective behind ``handle`` has finished."""
    pending = _handles[handle]
    return pending.work.done() and (pending.received_splits is None or pending.received_splits.done())


def synchronize(handle):
    """Waits for ``handle`` and returns its result (written into the tensor for in-place calls);
    for an alltoall, ``(result, received_splits)`` as in Horovod. A collective the engine failed
    raises ``HorovodInternalError``, as in Horovod."""
    if handle not in _handles:
        raise ValueError("unknown or already synchronized handle %r" % handle)
    pending = _handles.pop(handle)
    try:
        return _result(pending)
    except HorovodInternalError:
        raise
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from e


def _synchronize_all(handles):
    """``synchronize`` of every handle, in order; each one's result is taken (its name freed) before
    the first error is raised."""
    return arrays.results(lambda h=h: synchronize(h) for h in handles)


def _result(pending):
    def result():
        if pending.on_device:
            pending.work.wait(basics.wait_timeout())  # enqueued on the stream; the tensor holds the result
            output = None
        else:
            output = _wait(pending.work, pending.dtype, pending.output)
        return output if pending.finish is None else pending.finish(output)

    if pending.received_splits is None:
        return result()
    # (The splits' result is taken even when the rows failed: its name is free again.)
    output, (data, shape) = arrays.results([result, lambda: pending.received_splits.wait(basics.wait_timeout())])
    return output, _from_bytes(data, torch.int32, shape).reshape(-1)


def _wait(work, dtype, output):
    if output is not None and output.is_contiguous() and output.device.type == "cpu":
        # In place: the result goes straight into the tensor's memory.
        work.wait_into(_byte_view(output), basics.wait_timeout())
        return output
    data, shape = work.wait(basics.wait_timeout())
    result = _from_bytes(data, dtype, shape)
    if output is not None:
        with torch.no_grad():
            output.copy_(result.reshape(output.shape))
        return output
    return result


def _adasum_async(tensor, name, prescale, postscale, process_set, output):
    """Adasum over the ranks: every rank gathers every rank's tensor (scaled by ``prescale``) and
    combines them (horovod_rs.torch.adasum); the result goes into ``output`` when given."""
    if not tensor.dtype.is_floating_point:
        raise ValueError("Adasum combines float tensors, not %s" % tensor.dtype)
    flat = tensor.detach().reshape(1, -1).to(torch.float64) * prescale
    handle = allgather_async(flat, name or basics.next_name("adasum", _process_sets.engine(process_set)[1]),
                             process_set)

    def finish(gathered):
        combined = (_adasum.combine(gathered.cpu()) * postscale).reshape(tensor.shape).to(tensor.dtype)
        if output is None:
            return combined.to(tensor.device)
        with torch.no_grad():
            output.copy_(combined)
        return output

    _handles[handle].finish = finish
    return handle


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None):
    if op == Adasum:
        return _adasum_async(tensor, name, prescale_factor, postscale_factor, process_set, None)
    return _submit("allreduce", tensor, name, op=_op(op, average), prescale=prescale_factor,
                   postscale=postscale_factor, process_set=process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None):
    if op == Adasum:
        return _adasum_async(tensor, name, prescale_factor, postscale_factor, process_set, tensor)
    return _submit("allreduce", tensor, name, output=tensor, op=_op(op, average), prescale=prescale_factor,
                   postscale=postscale_factor, process_set=process_set)


# The collectives that return a new tensor are differentiable, as Horovod's: each is an autograd
# function whose backward runs the matching collective on the gradient. The in-place and async
# forms (DistributedOptimizer's path) stay outside autograd and cost nothing extra.

class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.options = (average, op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        average, op, prescale_factor, postscale_factor, process_set = ctx.options
        grad = allreduce(grad_output, average=average, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor, process_set=process_set)
        return grad, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    compressed, ctx = compression.compress(tensor)
    result = _Allreduce.apply(compressed, average, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(result, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=None):
    tensors = list(tensors)
    base = name or basics.next_name("grouped_allreduce", _process_sets.engine(process_set)[1])
    with _process_sets.together(process_set, len(tensors)):
        return [allreduce_async(t, average, "%s.%d" % (base, i), op, prescale_factor, postscale_factor, process_set)
                for i, t in enumerate(tensors)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=None):
    tensors = list(tensors)
    base = name or basics.next_name("grouped_allreduce", _process_sets.engine(process_set)[1])
    with _process_sets.together(process_set, len(tensors)):
        return [allreduce_async_(t, average, "%s.%d" % (base, i), op, prescale_factor, postscale_factor,
                                 process_set) for i, t in enumerate(tensors)]


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.options = (average, op, prescale_factor, postscale_factor, process_set)
        handles = grouped_allreduce_async(list(tensors), average, name, op, prescale_factor, postscale_factor,
                                          process_set)
        return tuple(_synchronize_all(handles))

    @staticmethod
    def backward(ctx, *grad_outputs):
        average, op, prescale_factor, postscale_factor, process_set = ctx.options
        grads = grouped_allreduce(list(grad_outputs), average=average, op=op, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set)
        return (None,) * 6 + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    pairs = [compression.compress(t) for t in tensors]
    results = _GroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor, process_set,
                                      *[p[0] for p in pairs])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(results, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None):
    return _synchronize_all(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                     process_set))


def allgather_async(tensor, name=None, process_set=None):
    return _submit("allgather", tensor, name, process_set=process_set)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows, ctx.process_set = tensor.shape[0] if tensor.dim() else 1, process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        # Every rank's gradient of the whole result, averaged; this rank's rows of it.
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        engine, _ = _process_sets.engine(ctx.process_set)
        rows = allgather(torch.tensor([ctx.rows], dtype=torch.int64), process_set=ctx.process_set)
        offset = int(rows[:engine.rank()].sum())
        return grad.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=None):
    """Every rank's tensor concatenated along the first dimension, which may differ per rank."""
    return _Allgather.apply(tensor, name, process_set)


def sparse_allreduce_async(tensor, name, op, process_set=None):
    """A sparse tensor's allreduce as Horovod's: every rank's indices and values gathered (the
    sum of sparse tensors concatenates them; averages divide the values). Returns a function
    that waits and gives the sparse result."""
    with _process_sets.together(process_set):
        indices = allgather_async(tensor._indices().transpose(0, 1).contiguous(), "%s.indices" % name, process_set)
        values = allgather_async(tensor._values(), "%s.values" % name, process_set)

    def result():
        gathered_values, gathered_indices = synchronize(values), synchronize(indices)
        if op == Average:
            gathered_values = gathered_values / _process_sets.engine(process_set)[0].size()
        if gathered_indices.dim() == 0 or gathered_values.dim() == 0:
            return tensor.new().resize_as_(tensor)
        return torch.sparse_coo_tensor(gathered_indices.transpose(0, 1), gathered_values, tensor.size())

    return result


def grouped_allgather_async(tensors, name=None, process_set=None):
    tensors = list(tensors)
    base = name or basics.next_name("grouped_allgather", _process_sets.engine(process_set)[1])
    with _process_sets.together(process_set, len(tensors)):
        return [allgather_async(t, "%s.%d" % (base, i), process_set) for i, t in enumerate(tensors)]


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(_synchronize_all(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=Average, process_set=ctx.process_set)
        engine, _ = _process_sets.engine(ctx.process_set)
        rows = allgather(torch.tensor([ctx.rows], dtype=torch.int64), process_set=ctx.process_set)
        offsets = rows[:engine.rank()].sum(dim=0).tolist()
        return (None, None) + tuple(g.narrow(0, int(o), n) for g, o, n in zip(grads, offsets, ctx.rows))


def grouped_allgather(tensors, name=None, process_set=None):
    """``allgather`` of every tensor, submitted together."""
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return _submit("broadcast", tensor, name, root=_process_sets.root_position(root_rank, process_set), process_set=process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    return _submit("broadcast", tensor, name, output=tensor, root=_process_sets.root_position(root_rank, process_set),
                   process_set=process_set)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        # Only the root's tensor reached the result: it gets the averaged gradient, the others zero.
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if basics.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    engine, set_id = _process_sets.engine(process_set)
    n = engine.size()
    if torch.is_tensor(splits):  # numpy has no bfloat16: floats go as float64 (refused all the same)
        splits = splits.detach().cpu()
        splits = (splits.double() if splits.dtype.is_floating_point else splits).numpy()
    splits = arrays.alltoall_splits(splits, tensor.shape[0], n)
    name = name or basics.next_name("alltoall", set_id)
    # Rank j learns how many rows rank r sends it from a one-row-per-rank alltoall of the splits.
    counts = torch.tensor(splits, dtype=torch.int32).reshape(n, 1)
    with _process_sets.together(process_set):
        received = engine.submit("alltoall", name + ".splits", _byte_view(counts), "int32", [n, 1], splits=[1] * n)
        return _submit("alltoall", tensor, name, received_splits=received, splits=splits, process_set=process_set)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received_splits, ctx.process_set = received_splits, process_set
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, _grad_splits):
        # The rows go back where they came from.
        grad, _ = alltoall(grad_output, splits=ctx.received_splits, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Rank r's ``splits[i]`` rows go to rank i. Returns the rows this rank received, by sender;
    with ``splits`` given, ``(rows, received_splits)`` as in Horovod."""
    output, received_splits = _Alltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received_splits)


def _scaled(tensor, factor):
    """``tensor * factor`` as Horovod scales: integers in float64, truncated back."""
    if factor == 1.0:
        return tensor
    if tensor.dtype.is_floating_point:
        return tensor * factor
    return (tensor.to(torch.float64) * factor).to(tensor.dtype)


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0, postscale_factor=1.0):
    if op == Adasum:
        raise NotImplementedError("reducescatter does not support Adasum (Horovod's neither)")
    if tensor.dim() == 0:
        raise ValueError("reducescatter splits the first dimension: it needs a tensor of at least one dimension, "
                         "not a scalar")
    handle = _submit("reducescatter", _scaled(tensor, prescale_factor), name, op=op, process_set=process_set)
    if postscale_factor != 1.0:
        _handles[handle].finish = lambda result: _scaled(result, postscale_factor)
    return handle


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.options = (op, process_set, prescale_factor, postscale_factor)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allgather(arrays.reducescatter_grad_scale(grad_output, *ctx.options), process_set=ctx.options[1])
        return (grad,) + (None,) * 5


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    compressed, ctx = compression.compress(tensor)
    result = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(result, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None, prescale_factor=1.0,
                                postscale_factor=1.0):
    tensors = list(tensors)
    base = name or basics.next_name("grouped_reducescatter", _process_sets.engine(process_set)[1])
    with _process_sets.together(process_set, len(tensors)):
        return [reducescatter_async(t, "%s.%d" % (base, i), op, process_set, prescale_factor, postscale_factor)
                for i, t in enumerate(tensors)]


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.options = (op, process_set, prescale_factor, postscale_factor)
        handles = grouped_reducescatter_async(list(tensors), name, op, process_set, prescale_factor, postscale_factor)
        return tuple(_synchronize_all(handles))

    @staticmethod
    def backward(ctx, *grad_outputs):
        scaled = [arrays.reducescatter_grad_scale(g, *ctx.options) for g in grad_outputs]
        return (None,) * 5 + tuple(grouped_allgather(scaled, process_set=ctx.options[1]))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    """``reducescatter`` of every tensor, submitted together."""
    pairs = [compression.compress(t) for t in tensors]
    results = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                          *[p[0] for p in pairs])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(results, pairs)]


def barrier(process_set=None):
    synchronize(_submit("barrier", torch.zeros(0, dtype=torch.uint8), None, process_set=process_set))


def join(device=-1):
    """Declares that this rank has run out of data and waits until every rank has; returns the
    rank that joined last. Meanwhile this rank's engine stands in for it in the collectives the
    others still submit: zeros to allreduces (an average still divides by ``size()``, as in
    Horovod), no rows to allgathers; broadcasts from it, alltoall and reducescatter fail."""
    return int(synchronize(_submit("join", torch.zeros((), dtype=torch.int32), "join")))


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """``obj`` from ``root_rank`` on every rank (pickled)."""
    return arrays.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=None):
    """Every rank's ``obj``, in rank order (pickled)."""
    return arrays.allgather_object(obj, name, process_set)


def broadcast_parameters(params, root_rank):
    """Rank ``root_rank``'s values of ``params`` (a state dict or (name, tensor) pairs) everywhere."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    items = [(n, p) for n, p in items if torch.is_tensor(p)]
    with _process_sets.together(count=len(items)):
        handles = [broadcast_async_(p, root_rank, name="broadcast_parameters." + n) for n, p in items]
    _synchronize_all(handles)


def _initialize_state(optimizer, model):
    """Horovod's state initialization: zero gradients (sparse where the optimizer or the embedding
    wants them) and one step of the wrapped optimizer, without the ranks' exchange."""
    sparse = {id(p) for m in (model.modules() if model else ()) if isinstance(m, torch.nn.Embedding) and m.sparse
              for p in m.parameters()}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = p.data.new(p.size()).zero_()
                if isinstance(optimizer, torch.optim.SparseAdam) or (isinstance(optimizer, torch.optim.SGD)
                                                                     and id(p) in sparse):
                    p.grad = p.grad.to_sparse()
    # A DistributedOptimizer's own step() would exchange gradients, which only this rank runs here.
    if optimizer.__module__ == DistributedOptimizer.__module__:
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Rank ``root_rank``'s optimizer state (moments, steps, learning rates) everywhere. As in
    Horovod, an optimizer without state yet gets it first from one step on zero gradients (which
    stay on its parameters); ``model`` tells which parameters belong to sparse embeddings."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _initialize_state(optimizer, model)
    state = broadcast_object(optimizer.state_dict(), root_rank, name="broadcast_optimizer_state")
    if rank() != root_rank:
        optimizer.load_state_dict(state)


# Horovod's submodule paths (``hvd.mpi_ops``, ``horovod.torch.functions``), over the names above.
from horovod_rs.torch import functions, mpi_ops  # noqa: E402,F401
from horovod_rs.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402,F401
