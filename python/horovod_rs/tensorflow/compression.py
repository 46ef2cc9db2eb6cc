"""Horovod's gradient compression for TensorFlow tensors (``horovod.tensorflow.compression``)."""

import tensorflow as tf


class Compressor:
    """Interface: ``compress`` returns the tensor to send and what ``decompress`` needs to restore it."""

    @staticmethod
    def compress(tensor):
        pass

    @staticmethod
    def decompress(tensor, ctx):
        pass


class NoneCompressor(Compressor):
    """The default: tensors travel as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


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
