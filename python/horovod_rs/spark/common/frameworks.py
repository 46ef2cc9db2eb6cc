"""Importing TensorFlow in a process that may later import PyTorch's compiler stack, and not
importing it where only TensorBoard's event files are written.

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
    """Makes TensorBoard's writers (``torch.utils.tensorboard``, Lightning's logger) use
    TensorBoard's own stub of TensorFlow's file API, unless TensorFlow is loaded already. They
    import TensorFlow whenever it is installed: 4.6 s of a PyTorch rank's start for event files
    the stub writes as well, and a TensorFlow loaded before Triton (see above). The choice holds
    for the process (TensorBoard keeps it); TensorFlow's own summaries do not depend on it."""
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorboard") is None:
        return
    # TensorBoard's switch for this: the module ``tensorboard.compat.notf`` being importable.
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
