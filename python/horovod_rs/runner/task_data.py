"""The function ``horovod_rs.runner.run`` runs, and its ranks' results, between the launching
process and the ranks (Horovod's KV store of ``horovod.run``).

The launching process serves the cloudpickled call on a port; a rank (``run_task``) fetches it,
runs it and sends back its cloudpickled result. Every request starts with a token derived from
the job's secret, which the launcher gives every rank, so only the job's ranks are answered.
Requests: ``F`` (the call, length-prefixed), ``R`` + rank + length + result (acknowledged ``K``).
"""

import contextlib
import hashlib
import hmac
import socket
import socketserver
import struct
import threading

# How long a rank waits for the launching process to answer.
TIMEOUT_S = 60


def _token(secret):
    return hmac.new(secret, b"horovod_rs.runner.run", hashlib.sha256).digest()


def _read_exactly(stream, count):
    data = stream.read(count)
    if len(data) != count:
        raise ConnectionError("the connection ended after %d of %d bytes" % (len(data), count))
    return data


class TaskDataServer:
    """Serves ``call`` (bytes) to the ranks of a job of ``num_proc`` and keeps their results."""

    def __init__(self, secret, call, num_proc, host="127.0.0.1"):
        token, results, lock = _token(secret), {}, threading.Lock()
        self._results, self._lock = results, lock

        class Handler(socketserver.StreamRequestHandler):
            timeout = TIMEOUT_S  # a connection that stops sending does not hold its thread for ever

            def handle(self):
                if not hmac.compare_digest(self.rfile.read(len(token)), token):
                    return  # not one of the job's ranks
                op = self.rfile.read(1)
                if op == b"F":
                    self.wfile.write(struct.pack("!Q", len(call)) + call)
                elif op == b"R":
                    rank, length = struct.unpack("!IQ", _read_exactly(self.rfile, 12))
                    payload = _read_exactly(self.rfile, length)
                    if rank < num_proc:
                        with lock:
                            results[rank] = payload
                        self.wfile.write(b"K")

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def host(self):
        return self._server.server_address[0]

    def port(self):
        return self._server.server_address[1]

    def results(self):
        """``{rank: result bytes}`` of the ranks that sent one."""
        with self._lock:
            return dict(self._results)

    def close(self):
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def _stream(address):
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as connection, \
            connection.makefile("rwb") as stream:
        yield stream


def fetch_call(address, secret):
    """The call the launching process at ``address`` serves."""
    with _stream(address) as stream:
        stream.write(_token(secret) + b"F")
        stream.flush()
        (length,) = struct.unpack("!Q", _read_exactly(stream, 8))
        return _read_exactly(stream, length)


def send_result(address, secret, rank, payload):
    """Hands rank ``rank``'s result to the launching process at ``address``."""
    with _stream(address) as stream:
        stream.write(_token(secret) + b"R" + struct.pack("!IQ", rank, len(payload)) + payload)
        stream.flush()
        if stream.read(1) != b"K":
            raise ConnectionError("the launching process at %s did not take rank %d's result" % (address, rank))
