"""Horovod's TensorFlow collectives (``horovod.tensorflow.mpi_ops``) on the horovod-rs engine.

Each collective hands the tensors' values to this rank's engine and returns new tensors; its
gradient is the matching collective, by Horovod's rules. Eagerly the values go straight through
numpy; inside a ``tf.function`` the exchange is a ``tf.py_function`` (so it runs on the CPU and
not under XLA). A tensor group is submitted whole before any of it is waited on, so the engine
fuses it and the ranks may submit its members in any order.

Names: a traced collective without a name is named after its input tensor, as in Horovod, so
every rank's graph names it alike; eagerly, unnamed collectives are numbered in call order.
Errors raise TensorFlow's: ``FailedPreconditionError`` when the ranks disagree (shapes, types,
roots) or a rank failed, ``InvalidArgumentError`` for an argument this rank can already tell is
wrong, ``DeadlineExceededError`` past the collective timeout. Eagerly and in a v1 graph (through
``error_op``) they keep those types; inside a ``tf.function`` TensorFlow reports them as
``UnknownError`` with the same message, except ``InvalidArgumentError``.
"""

import contextlib
import re
import weakref

import numpy as np
import tensorflow as tf

from horovod_rs.common import arrays, basics
from horovod_rs.common import process_sets as _process_sets
from horovod_rs.common.basics import *  # noqa: F401,F403  (Horovod's init, size, rank, ... *_built)
from horovod_rs.common.exceptions import HorovodInternalError  # noqa: F401  (Horovod's API)
from horovod_rs.common.process_sets import *  # noqa: F401,F403  (Horovod's process sets)
from horovod_rs.tensorflow import error_op

_basics = basics  # Horovod's tests read the process sets through ``mpi_ops._basics``

Average = "average"
Sum = "sum"
Adasum = "adasum"
Min = "min"
Max = "max"
Product = "product"

# Horovod's build reports homogeneous hosts (same local size everywhere); so does every
# horovod-rs launcher.
is_homogeneous = True


def handle_average_backwards_compatibility(op, average):
    """Horovod's deprecated ``average=`` argument turned into an ``op`` (Average by default)."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        return Average if average else Sum
    return Average


def check_num_rank_power_of_2(num_rank):
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


def _normalize_name(name):
    """An operation name by TensorFlow's rules."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _names(prefix, tensors, name):
    """One engine name per tensor: ``name`` (numbered in a group); unnamed, a traced tensor's own
    name, or eagerly the operation's (as Horovod's eager ops: one at a time, so a rank that
    failed a collective the others ran does not shift the names of every later one)."""
    if name is None:
        name = prefix if tf.executing_eagerly() else \
            _normalize_name("%s_%s" % (prefix, "_".join(t.name for t in tensors)))
    return [name] if len(tensors) == 1 else ["%s.%d" % (name, i) for i in range(len(tensors))]


@contextlib.contextmanager
def _tf_errors(kind):
    """The engine's errors in collective ``kind`` as TensorFlow's, as Horovod's ops raise them."""
    try:
        yield
    except TimeoutError as e:
        raise tf.errors.DeadlineExceededError(None, None, "%s: %s" % (kind, e)) from e
    except ValueError as e:
        raise tf.errors.InvalidArgumentError(None, None, "%s: %s" % (kind, e)) from e
    except RuntimeError as e:  # HorovodInternalError included
        raise tf.errors.FailedPreconditionError(None, None, "%s: %s" % (kind, e)) from e


def _exchange(kind, tensors, names, process_set, options):
    """Submits collective ``kind`` of every eager tensor in ``tensors``, then waits for all; the
    results as tensors. A step's gradients are copied once each on their way: an allreduce or
    broadcast runs in the tensor's aligned copy, which becomes the result tensor as it is; the
    other collectives read the tensor's own memory into their request."""
    in_place = kind in arrays.IN_PLACE_KINDS
    with _tf_errors(kind):
        with _process_sets.together(process_set, len(tensors)):
            submitted = [arrays.submit(kind, _aligned_copy(t) if in_place else t._numpy(), n, process_set,
                                       in_place=in_place, **options)
                         for t, n in zip(tensors, names)]
        return [_as_tensor(r) for r in arrays.results(s.wait for s in submitted)]


# TensorFlow's kernels assume tensors this aligned (Eigen's largest alignment).
_TENSOR_ALIGNMENT = 64


def _aligned_copy(tensor):
    """A writable numpy copy of an eager tensor's values, aligned as TensorFlow's own tensors."""
    source = tensor._numpy()  # a view of the tensor's memory (``numpy()`` would copy it first)
    if not isinstance(source, np.ndarray) or source.dtype.hasobject:
        return np.array(source)
    buffer = np.empty(source.nbytes + _TENSOR_ALIGNMENT, np.uint8)
    start = -buffer.ctypes.data % _TENSOR_ALIGNMENT
    copy = buffer[start:start + source.nbytes].view(source.dtype).reshape(source.shape)
    np.copyto(copy, source)
    return copy


def _as_tensor(array):
    """``array`` as a tensor, over the array's own memory where TensorFlow can take it (DLPack:
    aligned, a type DLPack has), else copied."""
    if array.ctypes.data % _TENSOR_ALIGNMENT == 0 and array.dtype.kind in "biuf" and array.flags.c_contiguous:
        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    return tf.convert_to_tensor(array)


# The last collective added to each graph (see _in_order).
_last_collective = weakref.WeakKeyDictionary()


def _in_order(make_op):
    """``make_op()``'s outputs, its op running after the graph's previous collective. A traced
    collective blocks one of the graph's threads while it waits for the other ranks; run in
    whatever order a session's threads pick, ranks could each hold every thread waiting for
    collectives the others have not reached. In creation order (the same on every rank) they
    cannot (tf.function already orders stateful ops so; a v1 graph does not)."""
    graph = tf.compat.v1.get_default_graph()
    last = _last_collective.get(graph)
    with tf.control_dependencies([last] if last is not None else []):
        outputs = make_op()
    _last_collective[graph] = outputs[0].op
    return outputs


def _py_function(exchange, inputs, dtypes):
    """``exchange`` (returning one value per type in ``dtypes``) as a graph op. TensorFlow reports
    a Python function's errors as UnknownError (keeping the message), but a ValueError as
    InvalidArgumentError: the argument errors keep their type. In a v1 graph, with the op of
    ``error_op``, every error keeps its type."""
    raise_if_failed = None if tf.inside_function() else error_op.raise_if_failed()
    if raise_if_failed is None:
        def run(*args):
            try:
                return exchange(*args)
            except tf.errors.InvalidArgumentError as e:
                raise ValueError(e.message) from e

        return _in_order(lambda: tf.py_function(run, list(inputs), Tout=list(dtypes)))

    def run_reporting(*args):
        try:
            return list(exchange(*args)) + [0, ""]
        except tf.errors.OpError as e:  # no values: the op raises before anything reads them
            return [np.zeros(0, d.as_numpy_dtype) for d in dtypes] + [e.error_code, e.message]

    def make_op():
        *values, code, message = tf.py_function(run_reporting, list(inputs),
                                                Tout=list(dtypes) + [tf.int32, tf.string])
        return raise_if_failed(code, message, values)

    return _in_order(make_op)


def _run(kind, tensors, names, process_set, shapes, **options):
    """The results of collective ``kind`` of ``tensors``, as tensors; ``shapes`` gives each
    result's static shape when traced."""
    _process_sets.check_added(process_set)  # a ValueError now, traced or not, as Horovod's
    if tf.executing_eagerly():
        return _exchange(kind, tensors, names, process_set, options)

    def exchange(*inputs):
        return _exchange(kind, inputs, names, process_set, options)

    results = _py_function(exchange, tensors, [t.dtype for t in tensors])
    for result, shape in zip(results, shapes):
        result.set_shape(shape)
    return results


def _rows_unknown(tensor):
    """The static shape of a result whose first dimension only the engine knows."""
    return tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else tensor.shape


def _tensors(tensors):
    return [tf.convert_to_tensor(t) for t in tensors]


def _refuse_adasum(op):
    if op == Adasum:
        raise NotImplementedError("horovod_rs.tensorflow does not run op=Adasum; horovod_rs.torch does")


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """The element-wise ``op`` of each tensor over the ranks (of ``process_set``), tensors of the
    same shape and type; differentiable (the gradient is the same allreduce of the gradients)."""
    _refuse_adasum(op)
    tensors = _tensors(tensors)
    names = _names("HorovodGroupedAllreduce" if len(tensors) > 1 else "HorovodAllreduce", tensors, name)

    @tf.custom_gradient
    def allreduce(*xs):
        ys = _run("allreduce", xs, names, process_set, [x.shape for x in xs], op=op, prescale=prescale_factor,
                  postscale=postscale_factor)

        def grad(*dys):
            return _grouped_allreduce(list(dys), op=op, prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor, process_set=process_set)

        return ys, grad

    return list(allreduce(*tensors))


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0, ignore_name_scope=False,
               process_set=global_process_set):
    """The element-wise ``op`` (Sum by default) of ``tensor`` over the ranks; differentiable."""
    return _grouped_allreduce([tensor], name, op, prescale_factor, postscale_factor, ignore_name_scope,
                              process_set)[0]


def _my_rows(grads, inputs, process_set):
    """This rank's rows of each of an allgather's gradients: the gradients of its inputs."""
    counts = grouped_allgather([tf.reshape(tf.shape(x)[0], [1]) for x in inputs], process_set=process_set)
    # This rank's position when the step runs: counts has a row count per rank of that world.
    position = _world_op(lambda: _process_sets.engine(process_set)[0].rank())
    mine = []
    for g, c, x in zip(grads, counts, inputs):
        start = tf.reduce_sum(c[:position])
        rows = g[start:start + c[position]]
        rows.set_shape(x.shape)
        mine.append(rows)
    return mine


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Each tensor's rows from every rank, concatenated in rank order (first dimensions may differ
    between ranks); differentiable."""
    tensors = _tensors(tensors)
    names = _names("HorovodGroupedAllgather" if len(tensors) > 1 else "HorovodAllgather", tensors, name)

    @tf.custom_gradient
    def allgather(*xs):
        ys = _run("allgather", xs, names, process_set, [_rows_unknown(x) for x in xs])

        def grad(*dys):
            # Each rank's gradient reached every rank's rows: average, then keep this rank's rows.
            averaged = [_allreduce(d, op=Average, process_set=process_set) for d in dys]
            return _my_rows(averaged, xs, process_set)

        return ys, grad

    return list(allgather(*tensors))


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """``tensor``'s rows from every rank, concatenated in rank order; differentiable."""
    return grouped_allgather([tensor], name, ignore_name_scope, process_set)[0]


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Rank ``root_rank``'s ``tensor`` on every rank; differentiable (the root gets the averaged
    gradient, the others zero)."""
    tensor = tf.convert_to_tensor(tensor)
    names = _names("HorovodBroadcast", [tensor], name)
    root = _process_sets.root_position(root_rank, process_set)

    @tf.custom_gradient
    def broadcast(x):
        (y,) = _run("broadcast", [x], names, process_set, [x.shape], root=root)

        def grad(dy):
            reduced = _allreduce(dy, op=Average, process_set=process_set)
            return reduced if rank() == root_rank else reduced * 0

        return y, grad

    return broadcast(tensor)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Broadcasts ``variables`` from ``root_rank`` in place (assigns them); returns their new
    values."""
    values = _run("broadcast", _tensors(variables), _names("HorovodBroadcastInplace", variables, name), process_set,
                  [v.shape for v in variables], root=_process_sets.root_position(root_rank, process_set))
    with tf.control_dependencies([v.assign(x) for v, x in zip(variables, values)]):
        return [tf.identity(v) for v in variables]  # (Keras 3's variables have no read_value)


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Rank r's ``splits[i]`` rows (an equal share without ``splits``) go to rank i; returns the
    rows this rank received, in rank order, and with ``splits`` given also how many rows each rank
    sent it. Differentiable: the gradient's rows go back to their senders."""
    tensor = tf.convert_to_tensor(tensor)
    name = _names("HorovodAlltoall", [tensor], name)[0]
    split_values = tf.constant([], dtype=tf.int32) if splits is None else tf.convert_to_tensor(splits)

    def exchange(x, s):
        with _tf_errors("alltoall"):
            return arrays.alltoall(x.numpy(), s.numpy() if s.shape[0] else None, name, process_set)

    @tf.custom_gradient
    def differentiable(x):
        if tf.executing_eagerly():
            rows, received = [tf.convert_to_tensor(r) for r in exchange(x, split_values)]
        else:
            rows, received = _py_function(exchange, [x, split_values], [x.dtype, tf.int32])
            rows.set_shape(_rows_unknown(x))
            received.set_shape([None])

        def grad(drows, _dreceived=None):
            back, _ = alltoall(drows, splits=received, process_set=process_set)
            return back

        return (rows, received), grad

    rows, received = differentiable(tensor)
    return (rows, received) if splits is not None else rows


def _scaled(tensor, factor):
    """``tensor * factor`` as Horovod scales: float16 in float32, other floats in their own
    type, integers in float64 truncated back."""
    if factor == 1.0:
        return tensor
    if tensor.dtype in (tf.float16, tf.bfloat16):
        return tf.cast(tf.cast(tensor, tf.float32) * factor, tensor.dtype)
    if tensor.dtype.is_floating:
        return tensor * tf.cast(factor, tensor.dtype)
    return tf.cast(tf.cast(tensor, tf.float64) * factor, tensor.dtype)


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                           prescale_factor=1.0, postscale_factor=1.0):
    """Each tensor reduced over the ranks, this rank keeping its share of the first dimension;
    differentiable."""
    if op == Adasum:
        raise NotImplementedError("reducescatter does not support Adasum (Horovod's neither)")
    if op not in (Sum, Average):
        raise NotImplementedError("reducescatter supports Sum and Average, not %s" % op)
    tensors = _tensors(tensors)
    if any(t.shape.rank == 0 for t in tensors):
        raise ValueError("reducescatter splits the first dimension: it needs tensors of at least one dimension, "
                         "not a scalar")
    names = _names("HorovodGroupedReducescatter" if len(tensors) > 1 else "HorovodReducescatter", tensors, name)

    @tf.custom_gradient
    def reducescatter(*xs):
        ys = _run("reducescatter", [_scaled(x, prescale_factor) for x in xs], names, process_set,
                  [_rows_unknown(x) for x in xs], op=op)
        ys = [_scaled(y, postscale_factor) for y in ys]

        def grad(*dys):
            return [allgather(arrays.reducescatter_grad_scale(d, op, process_set, prescale_factor, postscale_factor),
                              process_set=process_set) for d in dys]

        return ys, grad

    return list(reducescatter(*tensors))


def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                   prescale_factor=1.0, postscale_factor=1.0):
    return _grouped_reducescatter([tensor], name, op, ignore_name_scope, process_set, prescale_factor,
                                  postscale_factor)[0]


def join():
    """Declares that this rank has run out of data and waits until every rank has; returns the rank
    that joined last, as a scalar tensor. Meanwhile this rank stands in for the collectives the
    others still submit (zeros to allreduces)."""
    if tf.executing_eagerly():
        return tf.constant(_join(), dtype=tf.int32)
    return _py_function(lambda: [np.int32(_join())], [], [tf.int32])[0]


def _join():
    with _tf_errors("join"):
        return arrays.join()


def barrier(process_set=global_process_set):
    """Waits until every rank (of ``process_set``) reaches it."""
    with _tf_errors("barrier"):
        arrays.submit("barrier", np.zeros(0, dtype=np.uint8), None, process_set).wait()


def _process_set(process_set_id):
    if process_set_id == 0:
        return global_process_set
    try:
        return basics.state().process_sets[process_set_id]
    except KeyError:
        raise ValueError("no process set with id %d" % process_set_id) from None


def _world_op(value, name=None):
    """``value()`` (an int) as a tensor: a constant, except in an elastic job's traced function,
    where an op reads it each time the function runs (as Horovod's ``size_op`` and ``rank_op``
    are ops): a reset after the trace may have changed the world."""
    if tf.executing_eagerly() or basics.elastic_member() is None:
        return tf.constant(value(), dtype=tf.int32, name=name)
    result = tf.py_function(lambda: np.int32(value()), [], tf.int32, name=name)
    result.set_shape([])
    return result


def size_op(process_set_id=0, name=None):
    """The number of ranks (of the process set), as a tensor."""
    _process_set(process_set_id)  # an unknown id is a ValueError now, traced or not
    return _world_op(lambda: _process_set(process_set_id).size(), name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank is in the process set, else 0, as a tensor."""
    _process_set(process_set_id)
    return _world_op(lambda: int(_process_set(process_set_id).included()), name)


def local_size_op(name=None):
    return _world_op(local_size, name)


def rank_op(name=None):
    return _world_op(rank, name)


def local_rank_op(name=None):
    return _world_op(local_rank, name)

