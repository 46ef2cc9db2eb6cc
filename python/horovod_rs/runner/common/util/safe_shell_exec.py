"""Horovod's ``horovod.runner.common.util.safe_shell_exec``: runs a shell command, forwards its
output line by line, and stops it with everything it started when one of the given events is set,
when this process is interrupted, or (on Linux) when this process dies."""

import codecs
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time

# How long a stopped command's processes get between SIGTERM and SIGKILL.
GRACEFUL_TERMINATION_TIME_S = 5
# How often the events are looked at while the command runs.
EVENT_POLL_S = 0.1
_PR_SET_PDEATHSIG = 1


def execute(command, env=None, stdout=None, stderr=None, index=None, events=None,
            prefix_output_with_timestamp=False):
    """Runs ``command`` in a shell with ``env``; its output goes to the text streams ``stdout`` and
    ``stderr`` (``sys.stdout``/``sys.stderr`` by default), each line prefixed ``[index]<stdout>:``
    (and the time, with ``prefix_output_with_timestamp``) when ``index`` is given. Returns its exit
    code, 128 + the signal's number when a signal ended it."""
    process = subprocess.Popen(command, shell=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, preexec_fn=_stop_with_parent())
    forwarders = [threading.Thread(target=_forward, args=(pipe, stream, tag, index, prefix_output_with_timestamp),
                                   daemon=True)
                  for pipe, stream, tag in ((process.stdout, stdout or sys.stdout, "stdout"),
                                            (process.stderr, stderr or sys.stderr, "stderr"))]
    for forwarder in forwarders:
        forwarder.start()
    events = list(events or ())
    try:
        while process.poll() is None:
            if any(event.is_set() for event in events):
                terminate(process)
                break
            time.sleep(EVENT_POLL_S)
    finally:
        if process.poll() is None:  # interrupted
            terminate(process)
    for forwarder in forwarders:
        forwarder.join()
    code = process.wait()
    return 128 - code if code < 0 else code


def terminate(process):
    """Stops ``process`` and every process of its session: SIGTERM, then SIGKILL to whatever is
    left after ``GRACEFUL_TERMINATION_TIME_S``."""
    if not _signal_group(process, signal.SIGTERM):
        return
    deadline = time.time() + GRACEFUL_TERMINATION_TIME_S
    while time.time() < deadline:
        process.poll()  # reaps the shell once it ended: then only live processes keep the group
        if not _signal_group(process, 0):
            return
        time.sleep(0.05)
    _signal_group(process, signal.SIGKILL)
    process.wait()


def _signal_group(process, sig):
    """Sends ``sig`` to the command's processes; whether any was there."""
    try:
        os.killpg(process.pid, sig)
        return True
    except ProcessLookupError:
        return False


def _stop_with_parent():
    """What the command's shell runs before it starts, on Linux: the kernel sends it SIGTERM when
    this process dies. (The C function is looked up here: a forked child of a threaded process
    should not load anything.)"""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _forward(pipe, stream, tag, index, with_timestamp):
    """Copies ``pipe`` to the text ``stream``, a line (ended by ``\\n``, or ``\\r`` for progress
    bars) at a time, prefixed when ``index`` is given."""
    def write(text):
        if index is not None:
            moment = time.asctime() if with_timestamp else ""
            text = "%s[%s]<%s>:%s" % (moment, index, tag, text)
        stream.write(text)
        stream.flush()

    decoder = codecs.getincrementaldecoder("utf8")(errors="replace")
    pending = ""
    while True:
        chunk = os.read(pipe.fileno(), 65536)
        for piece in re.split("([\r\n])", decoder.decode(chunk, final=not chunk)):
            pending += piece
            if piece in ("\r", "\n"):
                write(pending)
                pending = ""
        if not chunk:
            break
    if pending:
        write(pending)
    pipe.close()
