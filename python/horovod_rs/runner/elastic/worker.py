"""Horovod's ``horovod.runner.elastic.worker``: what a rank of an elastic job hears about host
changes. The coordinator tells the running members when their world should change (hosts added
or removed, tasks waiting to join); the member hands each notice to the states that listen, whose
next ``commit()`` raises ``HostsUpdatedInterrupt``."""

import threading
from enum import IntFlag


class HostUpdateResult(IntFlag):
    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


class WorkerNotificationManager:
    """The states (``hvd.elastic`` states inside ``hvd.elastic.run``) that hear of host updates."""

    def __init__(self):
        self._lock = threading.Lock()
        self._listeners = set()

    def init(self, *args, **kwargs):
        """Horovod's: starts its notification service. A member hears from its coordinator over its
        own connection, so there is nothing to start."""

    def register_listener(self, listener):
        with self._lock:
            self._listeners.add(listener)

    def remove_listener(self, listener):
        with self._lock:
            self._listeners.discard(listener)

    def handle_hosts_updated(self, timestamp, update_res):
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener.on_hosts_updated(timestamp, update_res)


notification_manager = WorkerNotificationManager()
