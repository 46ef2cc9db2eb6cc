"""Horovod's ``horovod.runner.common.service.compute_service``: where the processes of a compute
job (TensorFlow's data service, ``horovod_rs.tensorflow.data``) and of a training job find each
other.

A compute job serves ``dispatchers`` dispatchers, each with ``workers_per_dispatcher`` workers. Its
processes register the dispatchers' addresses and their workers; the training processes wait until
the dispatcher they use and all its workers are there, and finally ask the compute job to shut
down, which ends its processes' wait for it.
"""

import threading

from horovod_rs.runner.common.util import network, timeout
from horovod_rs.runner.common.util.network import AckResponse
from horovod_rs.runner.common.util.timeout import TimeoutException
from horovod_rs.runner.util.threads import in_thread


class RegisterDispatcherRequest:
    """Registers the address of dispatcher ``dispatcher_id`` (from 0)."""

    def __init__(self, dispatcher_id, dispatcher_address):
        self.dispatcher_id = dispatcher_id
        self.dispatcher_address = dispatcher_address


class WaitForDispatcherRegistrationRequest:
    """Waits up to ``timeout`` seconds for dispatcher ``dispatcher_id`` to register."""

    def __init__(self, dispatcher_id, timeout):
        self.dispatcher_id = dispatcher_id
        self.timeout = timeout


class WaitForDispatcherRegistrationResponse:
    def __init__(self, dispatcher_address):
        self.dispatcher_address = dispatcher_address


class RegisterDispatcherWorkerRequest:
    """Registers worker ``worker_id`` of dispatcher ``dispatcher_id``."""

    def __init__(self, dispatcher_id, worker_id):
        self.dispatcher_id = dispatcher_id
        self.worker_id = worker_id


class WaitForDispatcherWorkerRegistrationRequest:
    """Waits up to ``timeout`` seconds for every worker of dispatcher ``dispatcher_id``."""

    def __init__(self, dispatcher_id, timeout):
        self.dispatcher_id = dispatcher_id
        self.timeout = timeout


class ShutdownRequest:
    """Asks the compute job to shut down: it is no longer needed."""


class WaitForShutdownRequest:
    """Waits until the compute job is asked to shut down."""


class ComputeService(network.BasicService):
    NAME = "Compute service"

    def __init__(self, dispatchers, workers_per_dispatcher, key, nics=None):
        if dispatchers <= 0:
            raise ValueError(f'The number of dispatchers must be larger than 0: {dispatchers}')
        if workers_per_dispatcher <= 0:
            raise ValueError(f'The number of workers per dispatcher must be larger than 0: {workers_per_dispatcher}')
        self._dispatcher_addresses = [None] * dispatchers
        self._workers_per_dispatcher = workers_per_dispatcher
        self._dispatcher_worker_ids = [set() for _ in range(dispatchers)]
        self._shutdown = False
        self._changed = threading.Condition()
        super().__init__(ComputeService.NAME, key, nics)

    def _handle(self, req, client_address):
        if isinstance(req, (RegisterDispatcherRequest, WaitForDispatcherRegistrationRequest,
                            RegisterDispatcherWorkerRequest, WaitForDispatcherWorkerRegistrationRequest)):
            if not 0 <= req.dispatcher_id < len(self._dispatcher_addresses):
                return IndexError(f'Dispatcher id must be within [0..{len(self._dispatcher_addresses) - 1}]: '
                                  f'{req.dispatcher_id}')

        if isinstance(req, RegisterDispatcherRequest):
            with self._changed:
                registered = self._dispatcher_addresses[req.dispatcher_id]
                if registered is not None and registered != req.dispatcher_address:
                    return ValueError(f'Dispatcher with id {req.dispatcher_id} has already been registered under '
                                      f'different address {registered}: {req.dispatcher_address}')
                self._dispatcher_addresses[req.dispatcher_id] = req.dispatcher_address
                self._changed.notify_all()
            return AckResponse()

        if isinstance(req, WaitForDispatcherRegistrationRequest):
            failure = self._wait(lambda: self._dispatcher_addresses[req.dispatcher_id] is not None, req.timeout,
                                 f'dispatcher {req.dispatcher_id} to register', 'the dispatcher')
            return failure or WaitForDispatcherRegistrationResponse(self._dispatcher_addresses[req.dispatcher_id])

        if isinstance(req, RegisterDispatcherWorkerRequest):
            with self._changed:
                self._dispatcher_worker_ids[req.dispatcher_id].add(req.worker_id)
                self._changed.notify_all()
            return AckResponse()

        if isinstance(req, WaitForDispatcherWorkerRegistrationRequest):
            # With one dispatcher, every training process waits for its workers, whichever id it asks for.
            dispatcher_id = req.dispatcher_id if len(self._dispatcher_addresses) > 1 else 0
            workers = self._dispatcher_worker_ids[dispatcher_id]
            return self._wait(lambda: len(workers) >= self._workers_per_dispatcher, req.timeout,
                              f'workers for dispatcher {dispatcher_id} to register', 'the workers') or AckResponse()

        if isinstance(req, ShutdownRequest):
            # Answered first: shutdown() waits for every request taken, this one too.
            in_thread(self.shutdown)
            return AckResponse()

        if isinstance(req, WaitForShutdownRequest):
            with self._changed:
                self._changed.wait_for(lambda: self._shutdown)
            return AckResponse()

        return super()._handle(req, client_address)

    def _wait(self, done, seconds, activity, who):
        """None once ``done()``; else the exception to answer with: a ``TimeoutException`` after
        ``seconds``, or a ``RuntimeError`` when the service shuts down first."""
        deadline = timeout.Timeout(timeout=seconds,
                                   message='Timed out waiting for {activity}. Try to find out what takes '
                                           f'{who} so long to register or increase timeout.')
        with self._changed:
            while not done():
                if self._shutdown:
                    return RuntimeError(f'{self.NAME} shut down while waiting for {activity}')
                try:
                    deadline.check_time_out_for(activity)
                except TimeoutException as e:
                    return e
                self._changed.wait(deadline.remaining())
        return None

    def shutdown(self):
        """Ends every wait for the shutdown (and every other wait, with an error), then stops."""
        with self._changed:
            self._shutdown = True
            self._changed.notify_all()
        super().shutdown()


class ComputeClient(network.BasicClient):

    def __init__(self, compute_addresses, key, verbose=1):
        super().__init__(ComputeService.NAME, compute_addresses, key, verbose)

    def register_dispatcher(self, dispatcher_id, dispatcher_address):
        self._send(RegisterDispatcherRequest(dispatcher_id, dispatcher_address))

    def wait_for_dispatcher_registration(self, dispatcher_id, timeout) -> str:
        return self._send(WaitForDispatcherRegistrationRequest(dispatcher_id, timeout)).dispatcher_address

    def register_worker_for_dispatcher(self, dispatcher_id, worker_id):
        self._send(RegisterDispatcherWorkerRequest(dispatcher_id, worker_id))

    def wait_for_dispatcher_worker_registration(self, dispatcher_id, timeout):
        self._send(WaitForDispatcherWorkerRegistrationRequest(dispatcher_id, timeout))

    def shutdown(self):
        self._send(ShutdownRequest())

    def wait_for_shutdown(self):
        self._send(WaitForShutdownRequest())

    def _send(self, req):
        """The service's response; an exception it answered with is raised here."""
        response = super()._send(req)
        if isinstance(response, Exception):
            raise response
        return response
