"""Importing TensorFlow in a process that may later import PyTorch's compiler stack, and not
importing it where only TensorBoard's files are written.

TensorFlow and Triton (which ``torch._dynamo``, and so PyTorch Lightning, import) each carry LLVM;
loading Triton after TensorFlow aborts the process ("LLVM ERROR: inconsistency in registered
CommandLine options"), while the other order works. Spark reuses Python workers across tasks, so
a worker that ran a Keras fit may later run a Lightning fit: the Keras side loads Triton first
whenever it is installed.
"""

import importlib.util
import sys
import types


def triton_before_tensorflow():
    """Loads Triton, when it is installed, unless TensorFlow is loaded already (then it is too late)."""
    if "tensorflow" not in sys.modules and "triton" not in sys.modules and importlib.util.find_spec("triton"):
        import triton  # noqa: F401  (see the module's docstring)


def tensorflow():
    """The ``tensorflow`` module, imported after Triton when Triton is installed."""
    triton_before_tensorflow()
    import tensorflow

    return tensorflow


def tensorboard_without_tensorflow():
    """Lets TensorBoard's writers (torch's ``SummaryWriter``, Lightning's ``TensorBoardLogger``)
    write their event files without TensorFlow. When TensorFlow is installed, TensorBoard imports
    it for its file I/O: 2 s and more of a rank's setup in a process without it (and TensorFlow
    before Triton, above), for what TensorBoard's own stub does as well. Its ``notf`` module is
    TensorBoard's switch to the stub; a process that has TensorFlow loaded keeps using it."""
    if "tensorflow" not in sys.modules:
        sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
