"""Horovod's process sets: collectives among a subset of the job's ranks.

Each process set added with ``add_process_set`` gets an engine of its own, connected among its
ranks only (they exchange their new listeners' addresses through the job's engine), so its
collectives are negotiated and run without the other ranks and never block the job's own.
``process_set=`` arguments pick the engine; a rank outside the set is refused with a message.
"""

import contextlib
import json

import numpy as np

from horovod_rs import _native
from horovod_rs.common import basics

# Horovod's names the framework modules re-export (``from ... import *``).
__all__ = ["ProcessSet", "add_process_set", "global_process_set", "remove_process_set"]


class ProcessSet:
    """A subset of the job's ranks (``ranks``), usable once added (``process_set_id`` set)."""

    def __init__(self, ranks):
        self._ranks = sorted({int(r) for r in ranks})
        self.process_set_id = None
        self._rank = None

    @property
    def ranks(self):
        return self._ranks

    def included(self):
        """Whether this process is one of the set's ranks."""
        return basics.rank() in self.ranks

    def rank(self):
        """This process's rank within the set (None outside it)."""
        return self.ranks.index(basics.rank()) if self.included() else None

    def size(self):
        return len(self.ranks)

    def __repr__(self):
        # Horovod's text, whose sets may carry an MPI communicator (never here).
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=None)" % (self.process_set_id, self.ranks)


class _GlobalProcessSet(ProcessSet):
    """Every rank of the job: the default of every ``process_set=`` argument."""

    def __init__(self):
        super().__init__([])
        self.process_set_id = 0

    @property
    def ranks(self):
        return list(range(basics.size()))


global_process_set = _GlobalProcessSet()


def engine(process_set):
    """The engine that runs ``process_set``'s collectives on this rank, and the set's id (for
    automatic names)."""
    if process_set is None or process_set.process_set_id == 0:
        return basics.state().rank, 0
    check_added(process_set)
    if not process_set.included():
        raise ValueError("rank %d is not in %r: only its ranks run its collectives"
                         % (basics.rank(), process_set))
    return process_set._rank, process_set.process_set_id


def check_added(process_set):
    """Refuses a set that is not the job's or one added (and not removed since)."""
    if process_set is None or process_set.process_set_id == 0:
        return
    if basics.state().process_sets.get(process_set.process_set_id) is not process_set:
        raise ValueError("%r has not been added with hvd.add_process_set (or was removed)" % process_set)


@contextlib.contextmanager
def together(process_set=None, count=2):
    """Within the block, ``process_set``'s collectives are submitted as one group: the engine
    takes them into one negotiation cycle, as every rank does, instead of negotiating the first
    alone while the rest wait out a cycle time. ``count``: how many the block submits, where
    known (a lone one needs no hold, which costs a few microseconds)."""
    if count < 2:
        yield
        return
    rank, _ = engine(process_set)
    rank.hold()
    try:
        yield
    finally:
        rank.release()


def root_position(root_rank, process_set):
    """A broadcast's ``root_rank`` (a rank of the job, as in Horovod) as a position in
    ``process_set``."""
    if process_set is None or process_set.process_set_id == 0:
        return root_rank
    if root_rank not in process_set.ranks:
        raise ValueError("broadcast root %d is not in %r" % (root_rank, process_set))
    return process_set.ranks.index(root_rank)


def _allgather_strings(text, name):
    """Every rank's ``text`` in rank order, through the job's engine."""
    rank = basics.state().rank
    data = np.frombuffer(text.encode(), dtype=np.uint8)
    lengths, _ = rank.submit("allgather", name + ".lengths", np.array([data.size], dtype=np.int64).view(np.uint8),
                             "int64", [1]).wait(basics.wait_timeout())
    joined, _ = rank.submit("allgather", name, data, "uint8", [data.size]).wait(basics.wait_timeout())
    texts, at = [], 0
    for n in np.frombuffer(lengths, dtype=np.int64):
        texts.append(joined[at:at + int(n)].decode())
        at += int(n)
    return texts


def add_process_set(process_set):
    """Adds a process set (a ``ProcessSet`` or a list of ranks) and returns it. Every rank of the
    job calls it, with the same ranks, in the same order as other ``add_process_set`` calls."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    state = basics.state()
    size = basics.size()
    if not process_set.ranks or any(r < 0 or r >= size for r in process_set.ranks):
        raise ValueError("a process set needs ranks in 0..%d, not %s" % (size - 1, process_set.ranks))
    if process_set.process_set_id is not None:
        raise ValueError("%r was already added" % process_set)
    existing = [p for p in state.process_sets.values() if p.ranks == process_set.ranks]
    if existing or process_set.ranks == list(range(size)):
        raise ValueError("a process set with ranks %s exists already" % process_set.ranks)
    set_id = max(state.process_sets, default=0) + 1
    name = "process_set.%d" % set_id
    joining = _native.Joining() if process_set.included() else None
    entry = "%s:%d" % (state.host, joining.port()) if joining else ""
    entries = _allgather_strings(entry + "|" + ",".join(map(str, process_set.ranks)), name)
    announced = {e.split("|")[1] for e in entries}
    if len(announced) != 1:
        raise ValueError("ranks passed different ranks to add_process_set %d: %s"
                         % (set_id, sorted(announced)))
    if joining is not None:
        addresses = [entries[r].split("|")[0] for r in process_set.ranks]
        # The job's own spec, for the group's ranks and addresses: the same timeouts and knobs.
        spec = dict(json.loads(state.rank.spec()), rank=process_set.rank(), size=len(process_set.ranks),
                    rendezvous={"entries": addresses})
        process_set._rank = joining.join(json.dumps(spec), state.secret)
    process_set.process_set_id = set_id
    state.process_sets[set_id] = process_set
    return process_set


def add_process_sets(process_sets):
    """``init(process_sets=...)``: adds every one of ``process_sets`` or none (those added before
    one is refused are removed again), so that ``init`` can be called again with other sets, as
    in Horovod."""
    sets = [p if isinstance(p, ProcessSet) else ProcessSet(p) for p in process_sets]
    seen = set()
    for process_set in sets:
        if tuple(process_set.ranks) in seen:
            raise ValueError("process_sets has ranks %s twice" % process_set.ranks)
        seen.add(tuple(process_set.ranks))
    added = []
    try:
        for process_set in sets:
            added.append(add_process_set(process_set))
    except Exception:
        for process_set in added:
            remove_process_set(process_set)
        raise
    return added


def remove_process_set(process_set):
    """Removes a process set added before; its ranks' pending collectives in it fail. Every rank of
    the job calls it. Returns whether it was there."""
    state = basics.state()
    if process_set.process_set_id not in state.process_sets:
        return False
    del state.process_sets[process_set.process_set_id]
    process_set._rank = None  # stops its engine
    process_set.process_set_id = None
    return True
