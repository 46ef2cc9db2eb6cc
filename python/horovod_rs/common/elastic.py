"""Horovod's elastic state (``horovod.common.elastic``): training state kept in memory, committed
and restored, and ``run_fn``, which runs a training function again after a collective failed.

horovod-rs has no elastic driver: the ranks never change. What carries over is the recovery of
a job whose ranks all survive a failed collective (a timeout, a disagreement): the state rolls
back to its last commit, every rank joins the job anew (``init()`` after the engine stopped), the
state is synced from rank 0, and the function runs again (a bounded number of times:
``reset_limit``). Host updates never arrive, so ``check_host_updates`` never raises.
"""

import functools
import os

from horovod_rs.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


class State:
    """State kept across ranks: ``commit()`` saves it, ``restore()`` returns to the last commit,
    ``sync()`` takes rank 0's. ``bcast_object`` broadcasts an object from rank 0."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions to call after every reset (the job joined again)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (and would check for host changes, which horovod-rs never has)."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Horovod raises ``HostsUpdatedInterrupt`` here when hosts changed; they never do here."""

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
    """How many times ``run`` joins the job again before it lets a failure through:
    ``HOROVOD_RS_ELASTIC_RESET_LIMIT`` (3). Without an elastic driver nothing changes between
    attempts, so a failure that is not transient would otherwise repeat forever."""
    return int(os.environ.get("HOROVOD_RS_ELASTIC_RESET_LIMIT", "3"))


def run_fn(func, reset):
    """``func(state, ...)`` after syncing ``state``; when a collective fails
    (``HorovodInternalError``) the state is restored to its last commit, ``reset()`` joins the
    job again, and it runs again, at most ``reset_limit()`` times."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
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
                if resets >= reset_limit():
                    raise HorovodInternalError("a collective failed again after %d resets "
                                               "(HOROVOD_RS_ELASTIC_RESET_LIMIT): %s" % (resets, e)) from e
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            resets += 1
            reset()
            state.on_reset()

    return wrapper
