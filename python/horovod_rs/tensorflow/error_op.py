"""TensorFlow's own error types for the collectives of a v1 graph.

A collective in a graph runs in a ``tf.py_function``, and TensorFlow reports any exception of one
as ``UnknownError`` (only ``ValueError`` and a few others keep a type of their own), where
Horovod's ops fail with ``FailedPreconditionError`` and its kin. So in a v1 graph
(``tf.compat.v1`` sessions) the exchange returns its error's code and message, and a small op of
this package (``error_op.cc``) raises them.

A TensorFlow op is C++ built against the TensorFlow it runs in: the op is compiled with the
host's C++ compiler (``CXX``, else ``c++``; about 10 s) the first time a v1 graph needs it, once
per TensorFlow version, and kept in the user's cache directory (``$XDG_CACHE_HOME/horovod_rs``,
else ``~/.cache/horovod_rs``, else the temporary directory). Without a compiler the errors stay
``UnknownError`` with the same message, and a warning says why once. Inside ``tf.function``
nothing is built: a Keras fit's first trace does not wait for a compiler.
"""

import fcntl
import hashlib
import os
import subprocess
import tempfile
import threading

import tensorflow as tf

from horovod_rs.common.logs import LOGGER

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "error_op.cc")
OP_TYPE = "HorovodRsRaiseIfFailed"
BUILD_TIMEOUT_S = 600

_lock = threading.Lock()
_loaded = {}


def raise_if_failed():
    """The op's function ``(code, message, values) -> values``, or None where it cannot be built
    (the reason logged once)."""
    with _lock:
        if "op" not in _loaded:
            try:
                _loaded["op"] = tf.load_op_library(_library()).horovod_rs_raise_if_failed
                tf.RegisterGradient(OP_TYPE)(_pass_gradients)
            except Exception as e:  # noqa: BLE001 (any failure leaves the errors as they were)
                LOGGER.warning("collectives in TensorFlow v1 graphs report their errors as UnknownError (with their "
                               "message): horovod_rs could not build its TensorFlow op: %s", e)
                _loaded["op"] = None
        return _loaded["op"]


def _pass_gradients(op, *grads):
    """The op passes its values through: so do their gradients (none for the code and message)."""
    return [None, None] + list(grads)


def _library():
    """The built op's path: built now unless this TensorFlow's build is in the cache already. The
    ranks of a host build it once, the others waiting for it."""
    flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
    with open(SOURCE, "rb") as f:
        key = hashlib.sha256(f.read() + "\0".join([tf.__version__] + flags).encode()).hexdigest()[:16]
    library = os.path.join(_cache_dir(), "tf-error-op-%s-%s.so" % (tf.__version__, key))
    with open(library + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(library):
            compiler = os.environ.get("CXX", "c++")
            LOGGER.info("building horovod_rs's TensorFlow op with %s, once for TensorFlow %s, into %s", compiler,
                        tf.__version__, library)
            partial = "%s.%d.tmp" % (library, os.getpid())
            try:
                built = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-w", SOURCE, "-o", partial] + flags,
                                       capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
                if built.returncode != 0:
                    raise RuntimeError("%s failed: %s" % (compiler, built.stderr.strip()[-2000:]))
                os.replace(partial, library)
            finally:
                if os.path.exists(partial):  # a failed or timed-out build leaves no file behind
                    os.remove(partial)
    return library


def _cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates = [os.path.join(base, "horovod_rs"), os.path.join(tempfile.gettempdir(), "horovod_rs-%d" % os.getuid())]
    for directory in candidates:
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return directory
    raise OSError("no writable cache directory among %s" % candidates)
