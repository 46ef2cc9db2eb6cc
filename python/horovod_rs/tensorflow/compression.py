"""Horovod's gradient compression for TensorFlow tensors (``horovod.tensorflow.compression``)."""

import tensorflow as tf

from horovod_rs.common.compression import Compressor, NoneCompressor  # noqa: F401  (Horovod's names)


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 (half the bytes of float32) and come back in their
    own type."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tf.cast(tensor, ctx) if ctx is not None and ctx.is_floating else tensor


class Compression:
    """Optional gradient compression used during allreduce."""

    none = NoneCompressor
    fp16 = FP16Compressor
