"""What every framework's ``Compression`` shares: the interface and the default, which sends
tensors as they are."""


class Compressor:
    """``compress`` returns the tensor to send and what ``decompress`` needs to restore it."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """The default: tensors travel as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor
