"""Importing TensorFlow in a process that may later import PyTorch's compiler stack.

TensorFlow and Triton (which ``torch._dynamo``, and so PyTorch Lightning, import) each carry LLVM;
loading Triton after TensorFlow aborts the process ("LLVM ERROR: inconsistency in registered
CommandLine options"), while the other order works. Spark reuses Python workers across tasks, so
a worker that ran a Keras fit may later run a Lightning fit: the Keras side loads Triton first
whenever it is installed.
"""

import importlib.util
import sys


def triton_before_tensorflow():
    """Loads Triton, when it is installed, unless TensorFlow is loaded already (then it is too late)."""
    if "tensorflow" not in sys.modules and "triton" not in sys.modules and importlib.util.find_spec("triton"):
        import triton  # noqa: F401  (see the module's docstring)


def tensorflow():
    """The ``tensorflow`` module, imported after Triton when Triton is installed."""
    triton_before_tensorflow()
    import tensorflow

    return tensorflow
