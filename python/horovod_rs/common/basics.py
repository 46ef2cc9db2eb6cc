"""init() and the job's shape, from the environment the launcher (horovodrs, or
horovod_rs.spark.run) sets; without one, a job of one process, as in Horovod."""

import os
import secrets
import threading

from horovod_rs import _native
from horovod_rs.common import logs

# Horovod's names every framework module re-exports (``from horovod_rs.common.basics import *``).
__all__ = ["init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
           "cross_rank", "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled",
           "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built"]

# Seconds a collective may wait for the other ranks (Horovod's HOROVOD_GLOO_TIMEOUT_SECONDS is 30;
# a training step can legitimately take longer on slow hosts).
COLLECTIVE_TIMEOUT_S = float(os.environ.get("HOROVOD_RS_TIMEOUT_SECONDS", "600"))
# A wait for a collective's result is the last resort: the engine fails the collective first,
# naming the rank (a link silent for COLLECTIVE_TIMEOUT_S; a stall, see STALL_SHARE_OF_TIMEOUT).
DEFAULT_TIMEOUT_S = 1.25 * COLLECTIVE_TIMEOUT_S + 5

# Unless HOROVOD_STALL_SHUTDOWN_TIME_SECONDS says otherwise, the stall check fails a tensor that
# some ranks never submitted at this share of the collective timeout.
STALL_SHARE_OF_TIMEOUT = 0.8

_lock = threading.Lock()
_state = None


class RankSpec:
    """What a process needs to join a job as one of its ranks: read from the launcher's
    environment (``from_env``) or built by an embedding that starts ranks itself (Spark tasks),
    which need not put the job's secret into a reused process's environment."""

    def __init__(self, rank, size, rendezvous, secret, host="127.0.0.1", local_rank=None, local_size=None,
                 cross_rank=0, cross_size=1, connect_timeout=None, engine_config=""):
        self.rank, self.size, self.rendezvous, self.secret, self.host = rank, size, rendezvous, secret, host
        self.local_rank = rank if local_rank is None else local_rank
        self.local_size = size if local_size is None else local_size
        self.cross_rank, self.cross_size = cross_rank, cross_size
        self.connect_timeout = DEFAULT_CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout
        self.engine_config = engine_config

    @classmethod
    def from_env(cls, env):
        """The launcher's variables (horovodrs), or None when there are none."""
        if "HOROVOD_RS_RENDEZVOUS" not in env:
            return None
        rank, size = int(env["HOROVOD_RANK"]), int(env["HOROVOD_SIZE"])
        return cls(rank, size, env["HOROVOD_RS_RENDEZVOUS"], bytes.fromhex(env["HOROVOD_RS_SECRET"]),
                   host=env.get("HOROVOD_HOSTNAME", "127.0.0.1"),
                   local_rank=int(env.get("HOROVOD_LOCAL_RANK", rank)),
                   local_size=int(env.get("HOROVOD_LOCAL_SIZE", size)),
                   cross_rank=int(env.get("HOROVOD_CROSS_RANK", 0)), cross_size=int(env.get("HOROVOD_CROSS_SIZE", 1)),
                   connect_timeout=float(env.get("HOROVOD_RS_CONNECT_TIMEOUT_SECONDS", DEFAULT_CONNECT_TIMEOUT_S)),
                   engine_config=_engine_config(env))


# Seconds a rank waits for the others to join (HOROVOD_RS_CONNECT_TIMEOUT_SECONDS).
DEFAULT_CONNECT_TIMEOUT_S = 120.0


class _State:
    def __init__(self, rank, spec):
        self.rank = rank
        # What a process set's ranks need to connect among themselves.
        self.secret, self.host = spec.secret, spec.host
        self.connect_timeout, self.engine_config = spec.connect_timeout, spec.engine_config
        self.local_rank, self.local_size = spec.local_rank, spec.local_size
        self.cross_rank, self.cross_size = spec.cross_rank, spec.cross_size
        self.counters = {}  # per process set: its ranks name unnamed collectives alike
        self.process_sets = {}  # id -> ProcessSet, beyond the global one


def _engine_config(env):
    lines = []
    if "HOROVOD_FUSION_THRESHOLD" in env:
        lines.append("fusion_threshold_bytes=" + env["HOROVOD_FUSION_THRESHOLD"])
    if "HOROVOD_CYCLE_TIME" in env:  # milliseconds, as in Horovod
        lines.append("cycle_time_ms=" + str(max(1, int(float(env["HOROVOD_CYCLE_TIME"])))))
    # Horovod's stall knobs (seconds): warn about, then fail, a tensor some ranks never submit.
    if "HOROVOD_STALL_CHECK_TIME_SECONDS" in env:
        lines.append("stall_warning_ms=%d" % (float(env["HOROVOD_STALL_CHECK_TIME_SECONDS"]) * 1000))
    stall_timeout_s = float(env.get("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0"))
    if stall_timeout_s <= 0:
        # Before a collective's wait times out, the stall check fails it naming the ranks that never
        # submitted the tensor (the wait's own timeout knows no ranks).
        stall_timeout_s = STALL_SHARE_OF_TIMEOUT * float(env.get("HOROVOD_RS_TIMEOUT_SECONDS", COLLECTIVE_TIMEOUT_S))
    lines.append("stall_timeout_ms=%d" % (stall_timeout_s * 1000))
    return "\n".join(lines)


def init(process_sets=None):
    """Joins the job: connects to every other rank. Every rank must call it. ``process_sets``: a
    list of ``ProcessSet`` to add at once (``add_process_set``), as in Horovod."""
    _init(RankSpec.from_env(os.environ))
    for process_set in process_sets or []:
        from horovod_rs.common.process_sets import add_process_set

        add_process_set(process_set)


def init_rank(spec):
    """Joins the job described by ``spec`` (a ``RankSpec``); ``init()`` after this does nothing."""
    _init(spec)


def _init(spec):
    global _state
    with _lock:
        if _state is not None and _state.rank.stopped() is None:
            return
        _state = None  # a stopped engine (shut down by another rank, or failed) is left for a new one
        local = None
        if spec is None:  # Started without a launcher: a job of one.
            secret = secrets.token_bytes(32)
            local = _native.Rendezvous(secret, 1)
            spec = RankSpec(0, 1, "127.0.0.1:%d" % local.port(), secret, engine_config=_engine_config(os.environ))
        try:
            native = _native.Rank(spec.rank, spec.size, spec.rendezvous, spec.secret, spec.host, spec.connect_timeout,
                                  COLLECTIVE_TIMEOUT_S, spec.engine_config)
        finally:
            if local is not None:
                local.close()
        _state = _State(native, spec)
        logs.start()


def shutdown():
    """Leaves the job; the other ranks' pending collectives fail instead of waiting."""
    global _state
    with _lock:
        _state = None


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
    return state().local_size


def local_rank():
    return state().local_rank


def cross_size():
    return state().cross_size


def cross_rank():
    return state().cross_rank


def next_name(kind, process_set_id=0):
    """Horovod's automatic names: every rank (of the process set) calls unnamed collectives in the
    same order."""
    counters = state().counters
    counters[process_set_id] = counters.get(process_set_id, 0) + 1
    return "%s.noname.%d" % (kind, counters[process_set_id])


# Horovod's build queries: scripts branch on them. This build has its own TCP and shared-memory
# transports (no MPI, Gloo, DDL or oneCCL) and runs collectives on CPU tensors.
def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def gloo_built():
    return False


def gloo_enabled():
    return False


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
