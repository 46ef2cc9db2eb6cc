"""Horovod's ``horovod.runner.common.util.network``: a small request/response service between the
processes of a job (Horovod's compute service is one).

A request and its response are each one message: the HMAC-SHA256 of the body under the job's key
(32 bytes), the body's length (4 bytes, big-endian) and the body, an object cloudpickled. A
message whose digest does not match is refused, so only holders of the key are served. A
connection carries one request; a response may be an exception, which the client raises.
"""

import pickle
import queue
import socket
import socketserver
import struct
import threading

import cloudpickle

from horovod_rs.runner.common.util import secret
from horovod_rs.runner.util.threads import in_thread

# The largest message either side accepts: a message length past it is not a peer of this service.
MAX_MESSAGE_BYTES = 1 << 30
# How long the service waits on a connection's reads and writes (not on what a request waits for).
IO_TIMEOUT_S = 60


class PingRequest:
    pass


class NoValidAddressesFound(Exception):
    pass


class PingResponse:
    def __init__(self, service_name, source_address):
        self.service_name = service_name
        """The name of the service that answered."""
        self.source_address = source_address
        """The caller's address as the service saw it."""


class AckResponse:
    """A response that carries nothing."""


class Wire:
    """Writes and reads the messages of a service whose key is ``key``."""

    def __init__(self, key):
        self._key = key

    def write(self, obj, wfile):
        body = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        wfile.write(secret.compute_digest(self._key, body) + struct.pack("!I", len(body)) + body)
        wfile.flush()

    def read(self, rfile):
        digest = _read_exactly(rfile, secret.DIGEST_LENGTH)
        (length,) = struct.unpack("!I", _read_exactly(rfile, 4))
        if length > MAX_MESSAGE_BYTES:
            raise ConnectionError("refused a message of %d bytes: the peer does not speak this service's wire"
                                  % length)
        body = _read_exactly(rfile, length)
        if not secret.check_digest(self._key, body, digest):
            raise PermissionError("Security error: digest did not match the message (the peer has another key).")
        return cloudpickle.loads(body)


def _read_exactly(rfile, count):
    data = rfile.read(count)
    if len(data) != count:
        raise EOFError("the connection ended after %d of %d bytes" % (len(data), count))
    return data


def local_addresses(port, nics=None):
    """``{interface: [(IPv4 address, port)]}`` of this host's interfaces (those in ``nics`` only,
    when given)."""
    result = {}
    for interface, address in _ipv4_interfaces():
        if not nics or interface in nics:
            result.setdefault(interface, []).append((address, port))
    if not result and nics:
        raise NoValidAddressesFound("No available network interface found matching user provided interface: %s"
                                    % sorted(nics))
    return result


def _ipv4_interfaces():
    """(interface, IPv4 address) pairs of this host, with psutil when it is there."""
    try:
        import psutil
    except ImportError:
        return _ipv4_interfaces_ioctl()
    return [(name, entry.address) for name, entries in psutil.net_if_addrs().items()
            for entry in entries if entry.family == socket.AF_INET]


def _ipv4_interfaces_ioctl():
    """The first IPv4 address of each interface, through Linux's SIOCGIFADDR."""
    import fcntl
    siocgifaddr = 0x8915
    pairs = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address on it
            pairs.append((name, socket.inet_ntoa(answer[20:24])))
    return pairs


def address_toward(host):
    """This machine's address on its route to ``host``: the one ``host``'s side of the network
    reaches it at (this host's name's address when there is no route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, 9))  # no packet leaves: this only picks the route
            return probe.getsockname()[0]
        except OSError:
            return socket.gethostbyname(socket.gethostname())


def _keep_alive(connection):
    """TCP keepalive probes after a minute of silence: a peer that vanished without closing the
    connection (its host lost) fails a blocked read within about two minutes instead of never."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
        if hasattr(socket, option):  # Linux's names; other systems keep their defaults
            connection.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class BasicService:
    """Listens on every interface, on a free port; ``_handle`` answers each request. Subclasses
    answer their own requests and hand the rest to this class's ``_handle``."""

    def __init__(self, service_name, key, nics):
        self._service_name = service_name
        self._wire = Wire(key)
        self._nics = nics

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._in_flight, self._idle = 0, threading.Condition()
        self._server = Server(("0.0.0.0", 0), self._make_handler())
        self._port = self._server.socket.getsockname()[1]
        try:
            self._addresses = local_addresses(self._port, nics)
        except NoValidAddressesFound:
            self._server.server_close()
            raise
        self._thread = in_thread(self._server.serve_forever)

    def _make_handler(self):
        service = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = IO_TIMEOUT_S  # a peer that stops reading or writing does not hold shutdown()

            def handle(self):
                with service._idle:
                    service._in_flight += 1
                try:
                    self._answer()
                finally:
                    with service._idle:
                        service._in_flight -= 1
                        service._idle.notify_all()

            def _answer(self):
                try:
                    request = service._wire.read(self.rfile)
                except (EOFError, OSError):
                    return  # a dropped or silent connection, or not a holder of the key: nothing to answer
                try:
                    response = service._handle(request, self.client_address)
                except Exception as e:  # the client raises it
                    response = e
                if response is None:
                    response = RuntimeError("%s did not answer %s" % (service._service_name,
                                                                       type(request).__name__))
                try:
                    service._wire.write(response, self.wfile)
                except OSError:
                    pass  # the client went away

        return Handler

    def _handle(self, req, client_address):
        if isinstance(req, PingRequest):
            return PingResponse(self._service_name, client_address[0])
        raise NotImplementedError(req)

    def addresses(self):
        return {interface: list(addresses) for interface, addresses in self._addresses.items()}

    def get_port(self):
        return self._port

    def shutdown(self):
        """Stops listening and returns once every request taken has been answered."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0)


class BasicClient:
    """Talks to the service ``service_name`` at the first of ``addresses`` (``{interface: [(host,
    port)]}``) that answers a ping. Requests are retried ``attempts`` times, so each must be
    idempotent."""

    def __init__(self, service_name, addresses, key, verbose, match_intf=False, probe_timeout=20, attempts=3):
        self._verbose = verbose
        self._service_name = service_name
        self._wire = Wire(key)
        self._match_intf = match_intf
        self._probe_timeout = probe_timeout
        self._attempts = attempts
        self._addresses = self._probe(addresses)
        if not self._addresses:
            raise NoValidAddressesFound(
                "Unable to connect to %s on any of the following addresses: %s. Each host of the job needs a "
                "route to one of them (a firewall, or a service that has already shut down, prevents it)."
                % (service_name, addresses))

    def _probe(self, addresses):
        answers = queue.Queue()
        threads = [in_thread(self._probe_one, (interface, tuple(address), answers))
                   for interface, interface_addresses in addresses.items() for address in interface_addresses]
        for thread in threads:
            thread.join()
        result = {}
        while not answers.empty():
            interface, address = answers.get()
            result.setdefault(interface, []).append(address)
        return result

    def _probe_one(self, interface, address, answers):
        for _ in range(self._attempts):
            try:
                response = self._exchange(address, PingRequest(), self._probe_timeout)
            except (OSError, EOFError):
                continue
            if response.service_name != self._service_name:
                return
            if self._match_intf and response.source_address not in [
                    own for name, own in _ipv4_interfaces() if name == interface]:
                if self._verbose >= 2:
                    print("WARNING: Expected to connect the host %s:%d using interface %s, but reached it "
                          "from %s." % (address[0], address[1], interface, response.source_address))
                return
            answers.put((interface, address))
            return

    def _exchange(self, address, request, timeout=None):
        with socket.create_connection(address, timeout=timeout) as connection:
            connection.settimeout(timeout)
            _keep_alive(connection)  # a request may wait for long; a vanished service ends it
            with connection.makefile("rb") as rfile, connection.makefile("wb") as wfile:
                self._wire.write(request, wfile)
                return self._wire.read(rfile)

    def _send_one(self, addr, req):
        for attempt in range(self._attempts):
            try:
                return self._exchange(addr, req)
            except (OSError, EOFError) as e:
                if attempt == self._attempts - 1:
                    raise ConnectionError("%s at %s:%d did not answer %s: %s"
                                          % (self._service_name, addr[0], addr[1], type(req).__name__, e)) from e

    def _send(self, req):
        """Sends ``req`` to the first address that answered the probe; returns the response."""
        address = next(iter(self._addresses.values()))[0]
        return self._send_one(address, req)

    def addresses(self):
        return self._addresses
