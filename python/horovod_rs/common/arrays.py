"""Collectives on numpy arrays: what framework bindings without their own tensor plumbing
(tf.keras) build on. Names work as in horovod_rs.torch."""

import numpy as np

from horovod_rs.common import basics
from horovod_rs.common import process_sets

_DTYPES = {np.dtype(t): t for t in ("uint8", "int8", "int32", "int64", "float16", "float32", "float64")}


def _dtype_name(array):
    try:
        return _DTYPES[array.dtype]
    except KeyError:
        raise ValueError("horovod_rs cannot run collectives on arrays of type %s" % array.dtype) from None


def _run(kind, array, name, process_set=None, **options):
    engine, set_id = process_sets.engine(process_set)
    array = np.ascontiguousarray(array)
    work = engine.submit(kind, name or basics.next_name(kind, set_id), array.reshape(-1).view(np.uint8),
                         _dtype_name(array), list(array.shape), **options)
    data, shape = work.wait(basics.DEFAULT_TIMEOUT_S)
    return np.frombuffer(data, dtype=array.dtype).reshape(shape).copy()


def allreduce_many(arrays, names, op="average", process_set=None):
    """Allreduces of several arrays, all submitted before any is waited on (so the engine can fuse
    them); the results in order."""
    engine, _ = process_sets.engine(process_set)
    submitted = []
    for array, name in zip(arrays, names):
        array = np.ascontiguousarray(array)
        work = engine.submit("allreduce", name, array.reshape(-1).view(np.uint8), _dtype_name(array),
                             list(array.shape), op=op)
        submitted.append((work, array.dtype))
    results = []
    for work, dtype in submitted:
        data, shape = work.wait(basics.DEFAULT_TIMEOUT_S)
        results.append(np.frombuffer(data, dtype=dtype).reshape(shape).copy())
    return results


def allreduce(array, op="average", name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return _run("allreduce", array, name, process_set, op=op, prescale=prescale_factor, postscale=postscale_factor)


def broadcast(array, root_rank, name=None, process_set=None):
    return _run("broadcast", array, name, process_set, root=process_sets.root_position(root_rank, process_set))


def allgather(array, name=None, process_set=None):
    return _run("allgather", array, name, process_set)


def allgather_object(obj, name, process_set=None):
    """Every rank's ``obj`` (pickled), in rank order."""
    import pickle

    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    lengths = allgather(np.array([payload.size], dtype=np.int64), name=name + ".lengths", process_set=process_set)
    data = allgather(payload, name=name, process_set=process_set).tobytes()
    objects, offset = [], 0
    for n in lengths.tolist():
        objects.append(pickle.loads(data[offset:offset + n]))
        offset += n
    return objects
