"""Helpers of ``horovod.common.util`` that scripts and Horovod's tests import."""

import importlib.util
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
