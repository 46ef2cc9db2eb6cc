"""horovod-rs's native log records (the engine's stall warnings, failed tensors) in Python's
``logging``, under the logger ``horovod_rs``, each message naming the rank.

The engine's threads never take the GIL: they queue their records, and a daemon thread here
takes them out (waiting without the GIL) and logs them. While logging has no handler for them
they go to standard error as horovod-rs's own lines (time, level, message). The level is the
logger's effective level unless ``HOROVOD_LOG_LEVEL`` is set.
"""

import atexit
import logging
import os
import threading

from horovod_rs import _native

LOGGER = logging.getLogger("horovod_rs")
_LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
           "ERROR": logging.ERROR}
_started = []


def _native_level(python_level):
    for limit, name in ((logging.DEBUG - 1, "trace"), (logging.DEBUG, "debug"), (logging.INFO, "info"),
                        (logging.WARNING, "warning"), (logging.ERROR, "error")):
        if python_level <= limit:
            return name
    return "off"


def _forward():
    from horovod_rs.common import basics

    while _started:
        record = _native.next_log_record(1.0)
        if record is not None:
            level, target, message = record
            # The rank this process is now (a reused Spark worker is a different rank per job).
            rank = basics.rank() if basics.is_initialized() else None
            if rank is not None and not message.startswith("rank "):
                message = "rank %d: %s" % (rank, message)
            if LOGGER.hasHandlers():
                LOGGER.log(_LEVELS.get(level, logging.WARNING), message, extra={"rank": rank, "target": target})
            else:  # logging is not configured: horovod-rs's own lines, with time and level
                _native.log_to_stderr(level, message)


def _stop(thread):
    # The thread must be out of native code before the interpreter finalizes: a daemon thread
    # that wakes up in it then is torn down mid-call and aborts the process.
    _started.clear()
    _native.forward_logs(False)  # wakes it; what was not logged yet goes to standard error
    thread.join(5)


def start():
    """Forwards native records to ``logging`` from now on (once per process: a forked child
    starts its own reader)."""
    if os.getpid() in _started:
        return
    _started[:] = [os.getpid()]
    if "HOROVOD_LOG_LEVEL" not in os.environ:
        _native.set_log_level(_native_level(LOGGER.getEffectiveLevel()))
    _native.forward_logs(True)
    thread = threading.Thread(target=_forward, name="horovod_rs-native-logs", daemon=True)
    thread.start()
    atexit.register(_stop, thread)
