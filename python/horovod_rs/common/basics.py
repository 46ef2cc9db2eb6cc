"""init() and the job's shape.

Which job ``init()`` joins, in order: the job of the Spark task this process runs (a task of
``horovod_rs.spark.run`` or of an estimator joins it when it starts, ``join_task``; a task of
``run_elastic`` joins the world its coordinator gives it, ``join_elastic_task``); else the job
the launcher (``horovodrs``) describes in the environment (an elastic one's: the worlds of its
coordinator); else a job of one process, as in Horovod. Inside a Spark task ``init()`` never
starts another job: when the task's job has stopped because a rank failed, it fails naming that
rank; when ranks only finished, the world stays the job's (their collectives, not ``init()``,
fail).
"""

import json
import os
import threading

from horovod_rs import _native
from horovod_rs.common import logs
from horovod_rs.common.exceptions import HorovodInternalError
from horovod_rs.runner.common.util.secret import make_secret_key

# Horovod's names every framework module re-exports (``from horovod_rs.common.basics import *``).
__all__ = ["init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
           "cross_rank", "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled",
           "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "start_timeline", "stop_timeline"]

_lock = threading.Lock()
_state = None
# The RankSpec of the Spark task this process runs, while it runs (``join_task``), or its elastic
# job's member (``join_elastic_task``).
_task_job = None


class RankSpec:
    """What a process needs to join a job as one of its ranks: read from the launcher's
    environment (``from_env``) or built by an embedding that starts ranks itself (Spark tasks),
    which need not put the job's secret into a reused process's environment.

    ``rendezvous``: the ``host:port`` of the job's rendezvous service (or rank 0's candidates,
    comma-separated), or every rank's address in rank order (exchanged already). ``fields``: rank-spec fields the job's settings set (the
    driver's ``spark.horovod.rs.*`` keys and Horovod's variables); the native side fills the rest
    (timeouts, the engine's knobs, encryption) from Horovod's variables in this process's
    environment, then from its defaults. ``connect_timeout`` (seconds) overrides both."""

    def __init__(self, rank, size, rendezvous, secret, host="127.0.0.1", connect_timeout=None, fields=None):
        self.rank, self.size, self.rendezvous, self.secret, self.host = rank, size, rendezvous, secret, host
        self.connect_timeout = connect_timeout
        self.fields = dict(fields or {})

    @classmethod
    def from_env(cls, env):
        """The launcher's variables (horovodrs), or None when there are none."""
        if "HOROVOD_RS_RENDEZVOUS" not in env:
            return None
        return cls(int(env["HOROVOD_RANK"]), int(env["HOROVOD_SIZE"]), env["HOROVOD_RS_RENDEZVOUS"],
                   bytes.fromhex(env["HOROVOD_RS_SECRET"]), host=env.get("HOROVOD_RS_HOST", "127.0.0.1"))

    def to_json(self):
        """The spec the native join reads (native/core's ``launch::RankSpec``), without the secret."""
        rendezvous = {"entries": self.rendezvous} if isinstance(self.rendezvous, list) else \
            {"service": {"address": self.rendezvous, "host": self.host}}
        spec = dict(self.fields, rank=self.rank, size=self.size, rendezvous=rendezvous)
        if self.connect_timeout is not None:
            spec["connect_timeout_ms"] = max(1, int(self.connect_timeout * 1000))
        return json.dumps(spec)


class _State:
    def __init__(self, rank, spec):
        self.rank = rank
        self.spec = spec
        # What a process set's ranks need to connect among themselves.
        self.secret, self.host = spec.secret, spec.host
        self.counters = {}  # per process set: its ranks name unnamed collectives alike
        self.process_sets = {}  # id -> ProcessSet, beyond the global one


def wait_timeout():
    """Seconds a wait for a collective's result may take: the last resort, since the engine fails
    the collective first, naming the rank (a link silent for the collective timeout; a stall)."""
    return 1.25 * state().rank.collective_timeout_s() + 5


def init(process_sets=None):
    """Joins the job: connects to every other rank. Every rank must call it. ``process_sets``: a
    list of ``ProcessSet`` to add at once, all or none (``add_process_sets``), as in Horovod."""
    _init(RankSpec.from_env(os.environ))
    if process_sets:
        from horovod_rs.common.process_sets import add_process_sets

        add_process_sets(process_sets)


def _get_process_set_ids_and_ranks():
    """Horovod's internal that its process-set tests read (as ``mpi_ops._basics``): every process
    set's id and ranks."""
    return dict([(0, list(range(size())))] + [(set_id, p.ranks) for set_id, p in sorted(state().process_sets.items())])


def join_task(spec):
    """Joins the job of the Spark task this process runs, as ``spec`` (a ``RankSpec``) says;
    until ``leave_task``, ``init()`` means this job and no other."""
    global _state, _task_job
    with _lock:
        _state, _task_job = None, spec
        _state = _State(_native.Rank(spec.to_json(), spec.secret), spec)
        logs.start()


def join_elastic_task(member):
    """Joins the first world of the elastic job whose task this process runs (``member``: the
    task's ``horovod_rs.runner.elastic.coordinator.Member``); until ``leave_task``, ``init()`` after
    a shutdown joins the job's next world, which may have other ranks and another size."""
    global _state, _task_job
    with _lock:
        _state, _task_job = None, member
        _state = _State(*member.next_world())
        logs.start()


def elastic_member():
    """The elastic job's member this process's task is, or None outside an elastic job."""
    job = _task_job
    return job if job is not None and not isinstance(job, RankSpec) else None


def leave_task(error=None):
    """Leaves the task's job: the other ranks learn that this one returned, or failed with
    ``error``; this process is no longer bound to the job."""
    global _state, _task_job
    with _lock:
        state, _state, _task_job = _state, None, None
    _leave(state, _native.departure(None if error is None else "%s: %s" % (type(error).__name__, error)))


def _leave(state, reason):
    """Stops ``state``'s engines (the job's and its process sets'), telling the other ranks why."""
    if state is None:
        return
    for process_set in state.process_sets.values():
        if process_set._rank is not None:
            process_set._rank.leave(reason)
    state.rank.leave(reason)


def _init(spec):
    global _state, _task_job
    with _lock:
        if _state is not None and _state.rank.stopped() is None:
            return
        if _task_job is None:
            _task_job = _launched_elastic_member(os.environ)
        if _task_job is not None and not isinstance(_task_job, RankSpec):
            # An elastic job: the world stays until a shutdown (``hvd.elastic.run``'s reset after a
            # failed collective), as peers that only returned stop the engine too; then the next.
            if _state is None:
                _state = _next_world(_task_job)
            logs.start()
            return
        if _task_job is not None:
            _check_task_job()
            return
        _state = None  # a stopped engine (shut down by another rank, or failed) is left for a new one
        local = None
        if spec is None:  # Started without a launcher: a job of one.
            secret = make_secret_key()
            local = _native.Rendezvous(secret, 1)
            spec = RankSpec(0, 1, "127.0.0.1:%d" % local.port(), secret)
        try:
            native = _native.Rank(spec.to_json(), spec.secret)
        finally:
            if local is not None:
                local.close()
        _state = _State(native, spec)
        logs.start()


def _launched_elastic_member(env):
    """The member of ``horovodrs``'s elastic job this process is (the launcher's variables), or None."""
    if "HOROVOD_RS_ELASTIC_COORDINATOR" not in env:
        return None
    from horovod_rs.runner.elastic.coordinator import Member

    member = Member(env["HOROVOD_RS_ELASTIC_COORDINATOR"], env["HOROVOD_RS_ELASTIC_TOKEN"],
                    int(env["HOROVOD_RS_ELASTIC_SLOT"]), int(env["HOROVOD_RS_ELASTIC_ATTEMPT"]),
                    bytes.fromhex(env["HOROVOD_RS_SECRET"]), None, None, launched=True,
                    label="%s[%s]" % (env.get("HOROVOD_HOSTNAME"), env.get("HOROVOD_LOCAL_RANK")))
    member.finish_at_exit()
    return member


def _next_world(member):
    """The state of ``member``'s next world. A process the launcher started has nothing left to do
    when the job ended while it waited to join: it exits quietly (the launcher has the verdict)."""
    from horovod_rs.runner.elastic.coordinator import Retired

    try:
        return _State(*member.next_world())
    except Retired:
        if member.launched:
            raise SystemExit(0) from None
        raise


def _check_task_job():
    """Inside a Spark task whose job's engine stopped: fine when ranks only finished (this rank
    keeps the job's world; its collectives fail naming them), an error naming the rank that
    failed (or what stopped the engine) otherwise."""
    if _state is None or _state.spec is not _task_job:
        raise HorovodInternalError(
            "this rank of a horovod_rs Spark job was shut down (hvd.shutdown()): a Spark task's rank joins its "
            "job once, when the task starts, and cannot join another")
    departures = _state.rank.departures()
    if departures and not any(_native.departed_failing(reason) for _, reason in departures):
        return
    raise HorovodInternalError("rank %d's horovod_rs job has stopped: %s" % (_state.spec.rank, _state.rank.stopped()))


def shutdown():
    """Leaves the job; the other ranks' pending collectives fail instead of waiting."""
    global _state
    with _lock:
        state, _state = _state, None
    _leave(state, "shut down")


def is_initialized():
    """Whether this process is in a running job: false again once its engine stopped (a rank
    shut down or failed), as then ``init()`` joins a new one."""
    return _state is not None and _state.rank.stopped() is None


def state():
    if _state is None:
        raise ValueError("horovod_rs has not been initialized; call hvd.init() first")
    return _state


def size():
    return state().rank.size()


def rank():
    return state().rank.rank()


def local_size():
    return state().rank.local_size()


def local_rank():
    return state().rank.local_rank()


def cross_size():
    return state().rank.cross_size()


def cross_rank():
    return state().rank.cross_rank()


def next_name(kind, process_set_id=0):
    """Horovod's automatic names: every rank (of the process set) calls unnamed collectives in the
    same order."""
    counters = state().counters
    counters[process_set_id] = counters.get(process_set_id, 0) + 1
    return "%s.noname.%d" % (kind, counters[process_set_id])


# Horovod's build queries: scripts branch on them. This build has its own TCP and shared-memory
# transports (no MPI, DDL or oneCCL) and runs collectives on CPU tensors. Its controller takes
# Gloo's place: ranks start as Horovod's Gloo launcher starts them (HOROVOD_RANK, HOROVOD_SIZE,
# ... and no MPI), which is what Horovod's scripts and tests ask gloo_built()/gloo_enabled().
def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def gloo_built():
    return True


def gloo_enabled():
    return True


def nccl_built():
    """Non-zero when GPU tensors' allreduce and broadcast run on NCCL (loaded at run time)."""
    return 1 if cuda_built() else 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """Whether this build has CUDA support (the binding's `cuda` feature)."""
    return _native.cuda_built()


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Horovod's timeline is not recorded by horovod-rs; accepted so that scripts run."""


def stop_timeline():
    """See ``start_timeline``."""
