"""Helpers of ``horovod.common.util`` that scripts and Horovod's tests import."""

import contextlib
import importlib.util
import os
import re


def _release(ver):
    """The numbers of a version's release part: "2.16.0rc1" -> (2, 16, 0)."""
    return tuple(int(n) for n in re.match(r"\d+(?:\.\d+)*", ver).group(0).split("."))


def is_version_greater_equal_than(ver, target):
    """Whether version string ``ver``'s release is at least ``target``'s."""
    return _release(ver) >= _release(target)


def split_list(items, parts):
    """``items`` in ``parts`` consecutive lists of near-equal length (the first ones longer)."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def gpu_available(ext_base_name, verbose=False):
    """Whether framework ``ext_base_name`` ("torch", "tensorflow") sees a GPU here."""
    if ext_base_name == "torch" and importlib.util.find_spec("torch"):
        import torch

        return torch.cuda.is_available()
    if ext_base_name == "tensorflow" and importlib.util.find_spec("tensorflow"):
        import tensorflow as tf

        return bool(tf.config.list_physical_devices("GPU"))
    return False


def _cache(f):
    """``f`` computed once per arguments (Horovod's memoizer of its costly checks)."""
    cache = {}

    def wrapper(*args, **kwargs):
        key = (args, frozenset(kwargs.items()))
        if key not in cache:
            cache[key] = f(*args, **kwargs)
        return cache[key]

    return wrapper


def _build_query(name):
    """Horovod's ``horovod.common.util.<name>(verbose=False)``: ``basics.<name>()`` (``verbose`` has
    nothing to report: there is no extension to load)."""

    def query(verbose=False):
        from horovod_rs.common import basics

        return getattr(basics, name)()

    query.__name__ = name
    return query


mpi_built, gloo_built, nccl_built, ddl_built, ccl_built = map(
    _build_query, ("mpi_built", "gloo_built", "nccl_built", "ddl_built", "ccl_built"))


def extension_available(ext_base_name, verbose=False):
    """Whether horovod_rs runs framework ``ext_base_name`` ("torch", "tensorflow", "mxnet") here:
    its frameworks have no compiled extension, only the framework itself must import."""
    module = {"torch": "torch", "tensorflow": "tensorflow"}.get(ext_base_name)
    return module is not None and importlib.util.find_spec(module) is not None


@contextlib.contextmanager
def env(**kwargs):
    """Sets the environment variables given (``None`` ones are left alone) for the block and
    restores them after it."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    saved = {k: os.environ.get(k) for k in kwargs}
    os.environ.update(kwargs)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def num_rank_is_power_2(num_rank):
    """Whether ``num_rank`` is a power of 2 (Adasum's condition)."""
    return num_rank != 0 and num_rank & (num_rank - 1) == 0


def is_iterable(x):
    try:
        iter(x)
    except TypeError:
        return False
    return True
