"""Rank output on the driver while a job runs: each rank's ``print``s (and the frameworks'
progress lines) are forwarded line by line, prefixed ``[rank]<stdout>:`` as the launcher does.

The driver listens on a port; a rank connects, proves it belongs to the job with the job's output
token (a random value of its own, not the engine's secret), and sends lines. A rank keeps writing
to its own streams too, so the executor's logs hold the same lines.

A Spark Connect client may be out of the executors' reach (a laptop with Databricks Connect): a
rank that cannot connect keeps its last lines instead, and the driver prints them when the job
has ended (``forward_output.undelivered``, ``OutputServer.emit``).
"""

import collections
import datetime
import hmac
import io
import socket
import socketserver
import sys
import threading

# How long a rank tries to reach the driver for its output before it keeps the lines instead.
CONNECT_TIMEOUT_S = 5
# Lines a rank keeps when it cannot send them live (the last ones).
KEPT_LINES = 2000


class OutputServer:
    """Prints the lines the ranks send to ``stdout``/``stderr`` (the driver's by default)."""

    def __init__(self, token, stdout=None, stderr=None, prefix_output_with_timestamp=False):
        self.token = token
        self._targets = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self._lock = threading.Lock()
        self._timestamps = prefix_output_with_timestamp
        emit = self.emit

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                first = self.rfile.readline().decode("utf-8", "replace").strip()
                if not hmac.compare_digest(first, token):
                    return
                for raw in self.rfile:
                    rank, _, rest = raw.decode("utf-8", "replace").partition("\t")
                    stream, _, text = rest.partition("\t")
                    emit(rank, text, stream)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("0.0.0.0", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="horovod_rs-output", daemon=True)
        self._thread.start()

    @property
    def port(self):
        return self._server.server_address[1]

    def emit(self, rank, text, stream="stdout"):
        """Prints one line of ``rank``'s ``stream`` as the launcher does."""
        line = "[%s]<%s>:%s" % (rank, stream, text)
        if self._timestamps:
            line = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y") + "[" + line[1:]
        with self._lock:
            target = self._targets.get(stream, self._targets["stdout"])
            target.write(line if line.endswith("\n") else line + "\n")
            target.flush()

    def close(self):
        self._server.shutdown()
        self._server.server_close()


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

    def __init__(self, address, token, rank):
        self._address, self._token, self._rank = address, token, rank
        self._connection = None
        self._kept = collections.deque(maxlen=KEPT_LINES)

    def __enter__(self):
        self._saved = sys.stdout, sys.stderr
        if self._address is None:
            return self
        host, port = self._address.rsplit(":", 1)
        try:
            self._connection = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
            self._connection.settimeout(None)
            self._connection.sendall((self._token + "\n").encode())
        except OSError as e:
            print("horovod_rs: cannot send output to the driver at %s (%s); it stays in this executor's log and "
                  "reaches the driver when the job ends" % (self._address, e), file=sys.stderr)
            self._connection = None
        lock = threading.Lock()
        sys.stdout = _ForwardingStream(self._saved[0], self._connection, self._rank, "stdout", lock, self._kept)
        sys.stderr = _ForwardingStream(self._saved[1], self._connection, self._rank, "stderr", lock, self._kept)
        return self

    def __exit__(self, *exc):
        if self._address is None:
            return False
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
        return "\n".join("%s\t%s" % kept for kept in self._kept)


def replay(server, rank, undelivered):
    """Prints a rank's ``undelivered`` lines through ``server`` (an ``OutputServer``)."""
    for entry in undelivered.split("\n"):
        stream, _, line = entry.partition("\t")
        server.emit(rank, line, stream)
