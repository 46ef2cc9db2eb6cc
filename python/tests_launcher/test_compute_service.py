"""The compute service (Horovod's ``horovod.runner.common.service.compute_service``) and the
request service under it, without TensorFlow: registrations, waits, their timeouts and the
shutdown, as the processes of a compute job and a training job use them."""

import socket
import threading

import pytest

from horovod_rs.runner.common.service.compute_service import ComputeClient, ComputeService
from horovod_rs.runner.common.util import network, secret
from horovod_rs.runner.common.util.timeout import TimeoutException
from horovod_rs.runner.util.threads import in_thread


@pytest.fixture
def service():
    started = []

    def start(dispatchers, workers_per_dispatcher):
        key = secret.make_secret_key()
        started.append(ComputeService(dispatchers, workers_per_dispatcher, key))
        return started[-1], ComputeClient(started[-1].addresses(), key, verbose=0)

    yield start
    for each in started:
        each.shutdown()


def waiting(call, *args):
    """``call(*args)`` in a thread; the thread and a list that receives its result or error."""
    outcome = []

    def wait():
        try:
            outcome.append(call(*args))
        except Exception as e:
            outcome.append(e)

    return in_thread(wait), outcome


def test_each_dispatcher_waits_for_its_own_workers(service):
    _, client = service(dispatchers=2, workers_per_dispatcher=2)
    first, first_outcome = waiting(client.wait_for_dispatcher_worker_registration, 0, 30)
    second, second_outcome = waiting(client.wait_for_dispatcher_worker_registration, 1, 30)
    client.register_worker_for_dispatcher(0, 0)
    client.register_worker_for_dispatcher(0, 1)
    first.join(30)
    assert not first.is_alive() and first_outcome == [None]
    # Dispatcher 0's workers are not dispatcher 1's.
    second.join(0.5)
    assert second.is_alive()
    client.register_worker_for_dispatcher(1, 2)
    client.register_worker_for_dispatcher(1, 2)  # a retried registration counts once
    second.join(0.5)
    assert second.is_alive()
    client.register_worker_for_dispatcher(1, 3)
    second.join(30)
    assert not second.is_alive() and second_outcome == [None]


def test_a_dispatcher_address_is_handed_to_whoever_waits_for_it(service):
    _, client = service(dispatchers=2, workers_per_dispatcher=1)
    thread, outcome = waiting(client.wait_for_dispatcher_registration, 1, 30)
    client.register_dispatcher(1, "grpc://10.0.0.1:5050")
    client.register_dispatcher(1, "grpc://10.0.0.1:5050")  # the same again is fine
    thread.join(30)
    assert outcome == ["grpc://10.0.0.1:5050"]
    with pytest.raises(ValueError, match="Dispatcher with id 1 has already been registered under different "
                                         "address grpc://10.0.0.1:5050: grpc://10.0.0.2:5050"):
        client.register_dispatcher(1, "grpc://10.0.0.2:5050")
    with pytest.raises(IndexError, match=r"Dispatcher id must be within \[0..1\]: 2"):
        client.register_dispatcher(2, "grpc://10.0.0.1:5051")


def test_a_wait_times_out_with_what_it_waited_for(service):
    _, client = service(dispatchers=1, workers_per_dispatcher=1)
    with pytest.raises(TimeoutException, match="Timed out waiting for workers for dispatcher 0 to register. "
                                               "Try to find out what takes the workers so long to register or "
                                               "increase timeout. Timeout after 0.2 seconds."):
        client.wait_for_dispatcher_worker_registration(0, 0.2)


def test_shutdown_ends_the_waits(service):
    compute, client = service(dispatchers=1, workers_per_dispatcher=1)
    for_shutdown, shutdown_outcome = waiting(client.wait_for_shutdown)
    for_dispatcher, dispatcher_outcome = waiting(client.wait_for_dispatcher_registration, 0, 3600)
    for_shutdown.join(0.5)
    assert for_shutdown.is_alive()
    client.shutdown()
    for_shutdown.join(30)
    for_dispatcher.join(30)
    assert shutdown_outcome == [None]
    # A wait that could never end now is answered with why, not left to its timeout.
    assert isinstance(dispatcher_outcome[0], RuntimeError)
    assert "Compute service shut down while waiting for dispatcher 0 to register" in str(dispatcher_outcome[0])
    with pytest.raises(ConnectionError, match="Compute service at .* did not answer ShutdownRequest"):
        client.shutdown()
    compute.shutdown()  # again: nothing left to do


def test_only_holders_of_the_key_are_answered(service):
    compute, _ = service(dispatchers=1, workers_per_dispatcher=1)
    with pytest.raises(network.NoValidAddressesFound, match="Unable to connect to Compute service"):
        ComputeClient(compute.addresses(), secret.make_secret_key(), verbose=0)
    # Bytes that are not a message of the service's wire are dropped, and the service goes on.
    with socket.create_connection(("127.0.0.1", compute.get_port()), timeout=30) as stranger:
        stranger.sendall(b"GET / HTTP/1.1\r\n\r\n" + b"x" * 64)
        assert stranger.recv(1) == b""


def test_the_service_lists_this_hosts_interfaces():
    key = secret.make_secret_key()
    compute = ComputeService(1, 1, key)
    try:
        addresses = compute.addresses()
        assert ("127.0.0.1", compute.get_port()) in [a for each in addresses.values() for a in each]
        with pytest.raises(network.NoValidAddressesFound, match="no-such-interface"):
            ComputeService(1, 1, key, nics={"no-such-interface"})
    finally:
        compute.shutdown()


def test_counts_must_be_positive():
    with pytest.raises(ValueError, match="The number of dispatchers must be larger than 0: 0"):
        ComputeService(0, 1, secret.make_secret_key())
    with pytest.raises(ValueError, match="The number of workers per dispatcher must be larger than 0: -1"):
        ComputeService(1, -1, secret.make_secret_key())


def test_interfaces_without_psutil_are_read_from_the_kernel():
    assert ("lo", "127.0.0.1") in network._ipv4_interfaces_ioctl()


def test_a_request_in_flight_is_answered_before_shutdown_returns(service):
    compute, client = service(dispatchers=1, workers_per_dispatcher=1)
    thread, outcome = waiting(client.wait_for_shutdown)
    thread.join(0.5)
    stopper = threading.Thread(target=compute.shutdown)
    stopper.start()
    stopper.join(30)
    thread.join(30)
    assert outcome == [None]


class UnknownRequest:
    pass


def test_a_request_the_service_does_not_know_fails_in_the_client(service):
    _, client = service(dispatchers=1, workers_per_dispatcher=1)
    with pytest.raises(NotImplementedError):
        client._send(UnknownRequest())
    client.register_dispatcher(0, "grpc://10.0.0.1:5050")  # and the service goes on
