"""Gradient compression on the wire, as ``horovod.torch.Compression``."""

import torch

from horovod_rs.common.compression import Compressor, NoneCompressor  # noqa: F401  (Horovod's names)


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 and restores their type after."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx) if ctx is not None else tensor


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
