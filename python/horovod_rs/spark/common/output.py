"""Rank output on the driver while a job runs: each rank's ``print``s (and the frameworks'
progress lines) are forwarded line by line, prefixed ``[rank]<stdout>:`` as the launcher does.

The driver listens on a port; a rank connects, proves it belongs to the job with the job's output
token (a random value of its own, not the engine's secret), and sends lines. A rank keeps writing
to its own streams too, so the executor's logs hold the same lines.
"""

import datetime
import hmac
import io
import socket
import socketserver
import sys
import threading


class OutputServer:
    """Prints the lines the ranks send to ``stdout``/``stderr`` (the driver's by default)."""

    def __init__(self, token, stdout=None, stderr=None, prefix_output_with_timestamp=False):
        self.token = token
        targets = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        lock = threading.Lock()
        timestamps = prefix_output_with_timestamp

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                first = self.rfile.readline().decode("utf-8", "replace").strip()
                if not hmac.compare_digest(first, token):
                    return
                for raw in self.rfile:
                    rank, _, rest = raw.decode("utf-8", "replace").partition("\t")
                    stream, _, text = rest.partition("\t")
                    line = "[%s]<%s>:%s" % (rank, stream, text)
                    if timestamps:
                        line = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y") + "[" + line[1:]
                    with lock:
                        target = targets.get(stream, targets["stdout"])
                        target.write(line if line.endswith("\n") else line + "\n")
                        target.flush()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("0.0.0.0", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="horovod_rs-output", daemon=True)
        self._thread.start()

    @property
    def port(self):
        return self._server.server_address[1]

    def close(self):
        self._server.shutdown()
        self._server.server_close()


class _ForwardingStream(io.TextIOBase):
    """A text stream that writes through to ``original`` and sends complete lines to the driver."""

    def __init__(self, original, connection, rank, name, lock):
        self._original, self._connection, self._rank, self._name, self._lock = original, connection, rank, name, lock
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
        message = ("%d\t%s\t%s\n" % (self._rank, self._name, line)).encode("utf-8", "replace")
        with self._lock:
            try:
                self._connection.sendall(message)
            except OSError:
                pass  # the driver went away: output still reaches this executor's log


class forward_output:
    """Within the block, this process's ``sys.stdout``/``sys.stderr`` also go to the driver."""

    def __init__(self, address, token, rank):
        self._address, self._token, self._rank = address, token, rank

    def __enter__(self):
        self._saved = sys.stdout, sys.stderr
        host, port = self._address.rsplit(":", 1)
        try:
            self._connection = socket.create_connection((host, int(port)), timeout=30)
            self._connection.settimeout(None)
            self._connection.sendall((self._token + "\n").encode())
        except OSError as e:
            print("horovod_rs: cannot forward output to the driver at %s (%s); it stays in this executor's log"
                  % (self._address, e), file=sys.stderr)
            self._connection = None
            return self
        lock = threading.Lock()
        sys.stdout = _ForwardingStream(self._saved[0], self._connection, self._rank, "stdout", lock)
        sys.stderr = _ForwardingStream(self._saved[1], self._connection, self._rank, "stderr", lock)
        return self

    def __exit__(self, *exc):
        if self._connection is not None:
            for stream in (sys.stdout, sys.stderr):
                if isinstance(stream, _ForwardingStream):
                    stream.close_line()
            sys.stdout, sys.stderr = self._saved
            self._connection.close()
        return False
