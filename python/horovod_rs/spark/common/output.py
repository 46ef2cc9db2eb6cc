"""Rank output on the driver while a job runs: each rank's ``print``s (and the frameworks'
progress lines) are forwarded line by line, prefixed ``[rank]<stdout>:`` as the launcher does.

The driver listens on a port; a rank connects, proves it belongs to the job with the job's output
token (a random value of its own, not the engine's secret), and sends lines. A rank keeps writing
to its own streams too, so the executor's logs hold the same lines.

A Spark Connect client may be out of the executors' reach (a laptop with Databricks Connect): a
rank that cannot connect keeps its last lines instead, and the driver prints them when the job
has ended (``forward_output.undelivered``, ``OutputServer.emit``).

The same connection carries a fit's events (``send_event``: JSON on the ``event`` stream, epoch
and step reports of rank 0, ``horovod_rs.spark.common.progress``) to the driver's ``on_event``,
which may keep a status line under the ranks' lines (``OutputServer.status``).

Back the other way, the driver may ask the ranks something (``OutputServer.request``: one line to
every rank connected now or later); a rank reads what it was asked without waiting
(``asked``). A fit's attempt on fewer ranks than it wants asks ``REGROW`` when the slots are back.
"""

import collections
import datetime
import hmac
import io
import json
import select
import socket
import socketserver
import sys
import threading

# How long a rank tries to reach the driver for its output before it keeps the lines instead.
CONNECT_TIMEOUT_S = 5
# Lines a rank keeps when it cannot send them live (the last ones).
KEPT_LINES = 2000
# The stream name of a fit's events among a rank's lines.
EVENT_STREAM = "event"
# The forwarding in effect in this process (``send_event`` writes to it), or None.
_active = None
# The driver's request that a fit stop after its epoch and run again on more ranks.
REGROW = "regrow"
# How often the server's loop looks for close(), which waits for it: socketserver's default,
# 0.5 s, cost every fit a quarter of a second on average after its job had ended.
SHUTDOWN_POLL_S = 0.02


class OutputServer:
    """Prints the lines the ranks send to ``stdout``/``stderr`` (the driver's by default)."""

    def __init__(self, token, stdout=None, stderr=None, prefix_output_with_timestamp=False, on_event=None,
                 status_line=False):
        """``on_event(server, event, live)`` receives the ranks' events (dicts; ``live`` False when
        replayed after the job); without it they are dropped. ``status_line``: ``status`` keeps
        a line rewritten with '\\r' under the ranks' lines (a terminal or a notebook)."""
        self.token = token
        self._targets = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self._lock = threading.RLock()
        self._timestamps = prefix_output_with_timestamp
        self._on_event = on_event
        self._status_line, self._status = status_line, ""
        self._requests, self._connections = [], []
        emit, joined, left = self.emit, self._joined, self._left

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                first = self.rfile.readline().decode("utf-8", "replace").strip()
                if not hmac.compare_digest(first, token):
                    return
                joined(self.connection)
                try:
                    for raw in self.rfile:
                        rank, _, rest = raw.decode("utf-8", "replace").partition("\t")
                        stream, _, text = rest.partition("\t")
                        emit(rank, text.rstrip("\n"), stream, live=True)
                finally:
                    left(self.connection)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("0.0.0.0", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,),
                                        name="horovod_rs-output", daemon=True)
        self._thread.start()

    @property
    def port(self):
        return self._server.server_address[1]

    def request(self, what):
        """Asks every rank ``what`` (a word), those connected now and those that connect later."""
        with self._lock:
            self._requests.append(what)
            for connection in self._connections:
                _send_request(connection, what)

    def _joined(self, connection):
        with self._lock:
            self._connections.append(connection)
            for what in self._requests:
                _send_request(connection, what)

    def _left(self, connection):
        with self._lock:
            self._connections.remove(connection)

    def emit(self, rank, text, stream="stdout", live=False):
        """Prints one line of ``rank``'s ``stream`` as the launcher does (an event goes to
        ``on_event``)."""
        if stream == EVENT_STREAM:
            self._event(text, live)
            return
        line = "[%s]<%s>:%s" % (rank, stream, text)
        if self._timestamps:
            line = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y") + "[" + line[1:]
        self._write(stream, line)

    def note(self, text):
        """Prints one line of the driver's own (under the ranks' lines, above the status line)."""
        self._write("stdout", text)

    def status(self, text):
        """Shows ``text`` as the status line (with ``status_line``; otherwise nothing)."""
        if not self._status_line:
            return
        with self._lock:
            target = self._targets["stdout"]
            target.write("\r" + text + " " * max(0, len(self._status) - len(text)))
            target.flush()
            self._status = text

    def _write(self, stream, line):
        with self._lock:
            target = self._targets.get(stream, self._targets["stdout"])
            shown = self._status
            if shown:  # the status line gives way to the line, then comes back under it
                self._targets["stdout"].write("\r" + " " * len(shown) + "\r")
                self._targets["stdout"].flush()
            target.write(line if line.endswith("\n") else line + "\n")
            target.flush()
            if shown:
                self._targets["stdout"].write(shown)
                self._targets["stdout"].flush()

    def _event(self, text, live):
        if self._on_event is None:
            return
        try:
            self._on_event(self, json.loads(text), live)
        except Exception as e:  # a consumer's fault must not end the ranks' output
            self.note("horovod_rs: a fit event was not handled (%s: %s)" % (type(e).__name__, e))

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            if self._status:  # the last status stays, the next output starts below it
                self._targets["stdout"].write("\n")
                self._targets["stdout"].flush()
                self._status = ""


def _send_request(connection, what):
    try:
        connection.sendall((what + "\n").encode())
    except OSError:
        pass  # that rank is gone: nothing to ask it


class _ForwardingStream(io.TextIOBase):
    """A text stream that writes through to ``original`` and sends complete lines to the driver
    (or, without a connection, keeps them in ``kept``)."""

    def __init__(self, original, connection, rank, name, lock, kept):
        self._original, self._connection, self._rank, self._name, self._lock = original, connection, rank, name, lock
        self._kept = kept
        self._pending = ""

    def writable(self):
        return True

    def isatty(self):
        return False  # progress bars print whole lines, not carriage-return animations

    def write(self, text):
        self._original.write(text)
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._send(line.rsplit("\r", 1)[-1])
        return len(text)

    def flush(self):
        self._original.flush()

    def close_line(self):
        if self._pending:
            self._send(self._pending.rsplit("\r", 1)[-1])
            self._pending = ""

    def _send(self, line):
        if self._connection is None:
            self._kept.append((self._name, line))
            return
        message = ("%d\t%s\t%s\n" % (self._rank, self._name, line)).encode("utf-8", "replace")
        with self._lock:
            try:
                self._connection.sendall(message)
            except OSError:
                pass  # the driver went away: output still reaches this executor's log


class forward_output:
    """Within the block, this process's ``sys.stdout``/``sys.stderr`` also go to the driver at
    ``address`` (none: they stay here); lines that cannot reach it are kept for
    ``undelivered``."""

    def __init__(self, address, token, rank, requests=()):
        """``requests``: what the driver may ask the ranks in this job (``may_ask``)."""
        self._address, self._token, self._rank = address, token, rank
        self.requests = frozenset(requests)
        self._connection = None
        self._kept = collections.deque(maxlen=KEPT_LINES)
        self._kept_events = []
        self._lock = threading.Lock()
        self._asked, self._unread = set(), b""

    def __enter__(self):
        global _active
        self._saved = sys.stdout, sys.stderr
        if self._address is None:
            return self
        _active = self
        host, port = self._address.rsplit(":", 1)
        try:
            self._connection = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
            self._connection.settimeout(None)
            self._connection.sendall((self._token + "\n").encode())
        except OSError as e:
            print("horovod_rs: cannot send output to the driver at %s (%s); it stays in this executor's log and "
                  "reaches the driver when the job ends" % (self._address, e), file=sys.stderr)
            self._connection = None
        lock = self._lock
        sys.stdout = _ForwardingStream(self._saved[0], self._connection, self._rank, "stdout", lock, self._kept)
        sys.stderr = _ForwardingStream(self._saved[1], self._connection, self._rank, "stderr", lock, self._kept)
        return self

    def send_event(self, event, keep):
        """Sends ``event`` (a dict) to the driver's ``on_event``; without a connection, keeps it
        for ``undelivered`` if ``keep`` (a step report is worth nothing late)."""
        text = json.dumps(event)
        if self._connection is None:
            if keep:
                self._kept_events.append(text)
            return
        with self._lock:
            try:
                self._connection.sendall(("%d\t%s\t%s\n" % (self._rank, EVENT_STREAM, text)).encode("utf-8"))
            except OSError:
                pass

    def asked(self, what):
        """Whether the driver asked ``what`` (so far; it does not wait)."""
        if self._connection is not None:
            while select.select([self._connection], [], [], 0)[0]:
                try:
                    data = self._connection.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    break
                *lines, self._unread = (self._unread + data).split(b"\n")
                self._asked.update(line.decode("utf-8", "replace") for line in lines)
        return what in self._asked

    def __exit__(self, *exc):
        global _active
        if self._address is None:
            return False
        _active = None
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, _ForwardingStream):
                stream.close_line()
        sys.stdout, sys.stderr = self._saved
        if self._connection is not None:
            self._connection.close()
        return False

    def undelivered(self):
        """The lines the driver did not get live, one ``stream<TAB>line`` per line, or ``""``
        (``replay`` prints them on the driver)."""
        kept = list(self._kept) + [(EVENT_STREAM, text) for text in self._kept_events]
        return "\n".join("%s\t%s" % entry for entry in kept)


def send_event(event, keep=True):
    """Sends a fit's ``event`` to the driver from this rank (nothing outside a job's forwarding)."""
    if _active is not None:
        _active.send_event(event, keep)


def may_ask(what):
    """Whether the driver of this rank's job may ask it ``what`` (it is the same on every rank)."""
    return _active is not None and what in _active.requests


def asked(what):
    """Whether the driver asked this rank ``what`` (False outside a job's forwarding)."""
    return _active is not None and _active.asked(what)


def replay(server, rank, undelivered):
    """Prints a rank's ``undelivered`` lines through ``server`` (an ``OutputServer``)."""
    for entry in undelivered.split("\n"):
        stream, _, line = entry.partition("\t")
        server.emit(rank, line, stream)
