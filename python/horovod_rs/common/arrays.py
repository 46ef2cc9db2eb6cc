"""Collectives on numpy arrays: what framework bindings without their own tensor plumbing
(TensorFlow, Keras) build on. Names work as in horovod_rs.torch.

Reductions need a type the engine computes in. Collectives that only move data (broadcast,
allgather, alltoall) take any fixed-size type: one the engine lacks travels as its bytes (a
trailing axis of ``itemsize`` uint8), so bool, uint16 or complex tensors broadcast as Horovod's do.
"""

import pickle

import numpy as np

from horovod_rs.common import basics
from horovod_rs.common import process_sets
from horovod_rs.common.exceptions import HorovodInternalError

_DTYPES = {np.dtype(t): t for t in ("uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")}
_MOVES_DATA = ("broadcast", "allgather", "alltoall")
# The collectives whose result has the input's shape, which can run in the input's own memory.
IN_PLACE_KINDS = ("allreduce", "broadcast")


def _dumps(obj):
    """``obj`` as bytes ``pickle.loads`` reads: through cloudpickle when installed (as Horovod), so
    lambdas and classes defined in ``__main__`` travel too."""
    try:
        import cloudpickle
    except ImportError:
        return pickle.dumps(obj)
    return cloudpickle.dumps(obj)


def engine_dtype(dtype):
    """The engine's name for numpy ``dtype``, or None if the engine has no such type."""
    dtype = np.dtype(dtype)
    # bfloat16 is not numpy's own: TensorFlow's arrays carry ml_dtypes' type of that name.
    return _DTYPES.get(dtype) or ("bfloat16" if dtype.name == "bfloat16" else None)


class Submitted:
    """A submitted collective: ``wait()`` returns its result as an array of the input's type."""

    def __init__(self, work, dtype, as_bytes, shape=None, lent=None):
        # ``shape``: the result's, when the input's decides it (the engine's results are never 0-d).
        # ``lent``: the array the collective runs in (submitted in place), which is the result.
        self.work, self.dtype, self.as_bytes, self.shape, self.lent = work, dtype, as_bytes, shape, lent

    def done(self):
        return self.work.done()

    def wait(self):
        """The result; a collective the engine failed raises ``HorovodInternalError`` (what
        ``hvd.elastic.run`` recovers from), as Horovod's object collectives do."""
        try:
            if self.lent is not None:
                self.work.wait_into(self.lent.reshape(-1).view(np.uint8), basics.wait_timeout())
                return self.lent
            data, shape = self.work.wait(basics.wait_timeout())
        except HorovodInternalError:
            raise
        except RuntimeError as e:
            raise HorovodInternalError(str(e)) from e
        if self.shape is not None:
            shape = self.shape
        elif self.as_bytes:
            shape = shape[:-1]  # the trailing axis held each element's bytes
        return np.frombuffer(data, dtype=self.dtype).reshape(shape).copy()


def submit(kind, array, name=None, process_set=None, in_place=False, **options):
    """Submits collective ``kind`` of ``array`` (named ``name``, or automatically in call order) on
    ``process_set``'s engine; ``options`` are the engine's (op, root, prescale, splits...).
    ``in_place``: an allreduce or broadcast of a writable, contiguous array runs in the array's
    memory, with no copies, and ``wait()`` returns that array; the caller lends it, and leaves it
    alone until then."""
    engine, set_id = process_sets.engine(process_set)
    array = np.asarray(array)  # (np.ascontiguousarray would make a 0-d array 1-d)
    dtype_name, as_bytes = engine_dtype(array.dtype), False
    if dtype_name is None:
        if kind not in _MOVES_DATA or array.dtype.hasobject or array.dtype.itemsize == 0:
            raise ValueError("horovod_rs cannot run %s on tensors of type %s" % (kind, array.dtype))
        dtype_name, as_bytes = "uint8", True
    shape = list(array.shape) + ([array.dtype.itemsize] if as_bytes else [])
    data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    lend = in_place and kind in IN_PLACE_KINDS and not as_bytes and array.flags.writeable \
        and array.flags.c_contiguous
    work = engine.submit(kind, name or basics.next_name(kind, set_id), data, dtype_name, shape, in_place=lend,
                         **options)
    return Submitted(work, array.dtype, as_bytes, array.shape if kind in IN_PLACE_KINDS else None,
                     array if lend else None)


def allreduce(array, op="average", name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return submit("allreduce", array, name, process_set, op=op, prescale=prescale_factor,
                  postscale=postscale_factor).wait()


def results(waits):
    """Calls every one of ``waits`` (each a handle's wait) in order and returns their results.
    Each is called even after one raised, so that every handle's result is taken and its name
    free for the next submission (a name stays taken until then); the first error is raised."""
    out, first_error = [], None
    for wait in waits:
        try:
            out.append(wait())
        except Exception as e:
            first_error = first_error or e
    if first_error is not None:
        raise first_error
    return out


def allreduce_many(arrays, names, op="average", process_set=None):
    """Allreduces of several arrays, all submitted before any is waited on (so the engine can fuse
    them); the results in order."""
    with process_sets.together(process_set, len(arrays)):
        submitted = [submit("allreduce", a, n, process_set, op=op) for a, n in zip(arrays, names)]
    return results(s.wait for s in submitted)


def broadcast(array, root_rank, name=None, process_set=None):
    return submit("broadcast", array, name, process_set,
                  root=process_sets.root_position(root_rank, process_set)).wait()


def broadcast_many(arrays, root_rank, names, process_set=None):
    """Broadcasts of several arrays from ``root_rank``, all submitted before any is waited on."""
    root = process_sets.root_position(root_rank, process_set)
    with process_sets.together(process_set, len(arrays)):
        submitted = [submit("broadcast", a, n, process_set, root=root) for a, n in zip(arrays, names)]
    return results(s.wait for s in submitted)


def allgather(array, name=None, process_set=None):
    return submit("allgather", array, name, process_set).wait()


def alltoall_splits(splits, rows, ranks):
    """The rows ``rows`` of an alltoall's input send to each of ``ranks`` ranks: ``splits`` (any
    sequence of integers) checked, or an equal share when it is None."""
    if splits is None:
        if rows % ranks:
            raise ValueError("alltoall without splits needs a first dimension divisible by %d, not %d" % (ranks, rows))
        return [rows // ranks] * ranks
    splits = np.asarray(splits).reshape(-1)
    if splits.size and splits.dtype.kind not in "iu":
        # Refused on every rank: read as numbers, they might add up on some ranks only, which would
        # then wait for the others.
        raise ValueError("alltoall splits must be integers, not %s" % splits.dtype)
    splits = [int(s) for s in splits]
    if len(splits) != ranks or sum(splits) != rows or min(splits, default=0) < 0:
        raise ValueError("alltoall splits %s need one entry per rank (%d), none negative, summing to the first "
                         "dimension %d" % (splits, ranks, rows))
    return splits


def reducescatter_grad_scale(grad, op, process_set, prescale_factor, postscale_factor):
    """Horovod's rule for a reducescatter's gradient before it is gathered (any framework's
    tensor): times the ranks for Sum, times the scale factors."""
    factor = prescale_factor * postscale_factor
    if op == "sum":
        factor *= process_sets.engine(process_set)[0].size()
    return grad * factor if factor != 1.0 else grad


def alltoall(array, splits=None, name=None, process_set=None):
    """Rank r's ``splits[i]`` rows go to rank i. Returns the rows this rank received, by sender, and
    how many each rank sent it."""
    engine, set_id = process_sets.engine(process_set)
    array = np.asarray(array)
    if array.ndim == 0:
        raise ValueError("alltoall splits the first dimension: it needs a tensor of at least one dimension")
    n = engine.size()
    splits = alltoall_splits(splits, array.shape[0], n)
    name = name or basics.next_name("alltoall", set_id)
    # Rank j learns how many rows rank r sends it from a one-row-per-rank alltoall of the splits.
    with process_sets.together(process_set):
        received = submit("alltoall", np.array(splits, dtype=np.int32).reshape(n, 1), name + ".splits", process_set,
                          splits=[1] * n)
        rows = submit("alltoall", array, name, process_set, splits=splits)
    rows, received = results([rows.wait, received.wait])
    return rows, received.reshape(-1)


def join():
    """Horovod's join: waits until every rank has joined; the rank that joined last."""
    return int(submit("join", np.zeros((), dtype=np.int32), "join").wait())


# Unnamed object collectives take a fixed name, the same on every rank whatever it passes (Horovod
# names them by the object's type, which differs on ranks passing None) and however many other
# unnamed collectives it ran (a counted name goes out of step when one rank ran more, as around
# join). The calls wait for their result, so one name never has two calls in flight.
def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """``obj`` from ``root_rank`` on every rank (pickled)."""
    name = name or "broadcast_object"
    payload = np.frombuffer(_dumps(obj), dtype=np.uint8)
    length = broadcast(np.array([payload.size], dtype=np.int64), root_rank, name + ".length", process_set)
    if basics.rank() != root_rank:
        payload = np.zeros(int(length[0]), dtype=np.uint8)
    return pickle.loads(broadcast(payload, root_rank, name, process_set).tobytes())


def allgather_object(obj, name=None, process_set=None):
    """Every rank's ``obj`` (pickled), in rank order."""
    name = name or "allgather_object"
    payload = np.frombuffer(_dumps(obj), dtype=np.uint8)
    lengths = allgather(np.array([payload.size], dtype=np.int64), name=name + ".lengths", process_set=process_set)
    data = allgather(payload, name=name, process_set=process_set).tobytes()
    objects, offset = [], 0
    for n in lengths.tolist():
        objects.append(pickle.loads(data[offset:offset + n]))
        offset += n
    return objects
