"""Horovod's elastic state (``horovod.common.elastic``): training state kept in memory, committed
and restored, and ``run_fn``, which runs a training function again after a collective failed or
the hosts changed.

In an elastic job (``horovod_rs.spark.run_elastic``) the world changes: when a rank is lost, the
others' collectives fail, their state rolls back to its last commit, ``init()`` joins the next
world (fewer ranks), the state is synced from its rank 0 and the function runs again; when new
ranks wait to join, ``commit()`` raises ``HostsUpdatedInterrupt`` on every rank at once and they
join a larger world. The job's driver bounds the resets (``reset_limit``).

Elsewhere the ranks never change; what carries over is the recovery of a job whose ranks all
survive a failed collective (a timeout, a disagreement): every rank joins the job anew, at most
``HOROVOD_RS_ELASTIC_RESET_LIMIT`` times. There, host updates never arrive.
"""

import functools
import os
import queue

from horovod_rs.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovod_rs.runner.elastic.worker import HostUpdateResult, notification_manager


class State:
    """State kept across ranks: ``commit()`` saves it, ``restore()`` returns to the last commit,
    ``sync()`` takes rank 0's. ``bcast_object`` broadcasts an object from rank 0."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages = queue.Queue()  # (timestamp, HostUpdateResult) notices, as Horovod's
        self._last_updated_timestamp = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions to call after every reset (the job joined again)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state, then raises ``HostsUpdatedInterrupt`` if the world should change."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """In an elastic job, raises ``HostsUpdatedInterrupt`` when a notice newer than the last
        one came (tasks wait to join, or the launcher's hosts changed): rank 0's view is broadcast,
        so that every rank raises at the same commit. Only removed hosts: the survivors skip the
        state's sync."""
        from horovod_rs.common import basics

        member = basics.elastic_member()
        if member is None:
            return
        notices = []
        while not self._host_messages.empty():
            notices.append(self._host_messages.get())
        kept = member.notice()  # (a notice that came before this state listened, or during a reset)
        if kept is not None:
            notices.append(kept)
        last_updated_timestamp = prev_timestamp = self._last_updated_timestamp
        all_update = HostUpdateResult.no_update
        for timestamp, update in notices:
            if timestamp > last_updated_timestamp:
                last_updated_timestamp = timestamp
                all_update |= update
        prev_timestamp, self._last_updated_timestamp, all_update = \
            self._bcast_object((prev_timestamp, last_updated_timestamp, all_update))
        if self._last_updated_timestamp > prev_timestamp:
            raise HostsUpdatedInterrupt(all_update == HostUpdateResult.removed)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after the job joined again, before the state is synced."""


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and kept as attributes."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def reset_limit():
    """Outside an elastic job, how many times ``run`` joins the job again before it lets a failure
    through: ``HOROVOD_RS_ELASTIC_RESET_LIMIT`` (3). Without an elastic driver nothing changes
    between attempts, so a failure that is not transient would otherwise repeat forever."""
    return int(os.environ.get("HOROVOD_RS_ELASTIC_RESET_LIMIT", "3"))


def run_fn(func, reset):
    """``func(state, ...)`` after syncing ``state``; when a collective fails
    (``HorovodInternalError``) the state is restored to its last commit, ``reset()`` joins the
    job (its next world, in an elastic job) again, and it runs again: outside an elastic job at
    most ``reset_limit()`` times."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        notification_manager.register_listener(state)
        try:
            return _run_resetting(func, reset, state, *args, **kwargs)
        finally:
            notification_manager.remove_listener(state)

    return wrapper


def _run_resetting(func, reset, state, *args, **kwargs):
    from horovod_rs.common import basics

    skip_sync = False
    resets = 0
    while True:
        try:
            if not skip_sync:
                state.sync()
            return func(state, *args, **kwargs)
        except HorovodInternalError as e:
            state.restore()
            skip_sync = False
            if basics.elastic_member() is None and resets >= reset_limit():
                raise HorovodInternalError("a collective failed again after %d resets "
                                           "(HOROVOD_RS_ELASTIC_RESET_LIMIT): %s" % (resets, e)) from e
        except HostsUpdatedInterrupt as e:
            skip_sync = e.skip_sync
        resets += 1
        reset()
        state.on_reset()
