"""init() and the job's shape, from the environment the launcher (horovodrs, or
horovod_rs.spark.run) sets; without one, a job of one process, as in Horovod."""

import os
import secrets
import threading

from horovod_rs import _native

# Seconds a collective may wait for the other ranks (Horovod's HOROVOD_GLOO_TIMEOUT_SECONDS is 30;
# a training step can legitimately take longer on slow hosts).
DEFAULT_TIMEOUT_S = float(os.environ.get("HOROVOD_RS_TIMEOUT_SECONDS", "600"))

_lock = threading.Lock()
_state = None


class _State:
    def __init__(self, rank, env, secret, host, connect_timeout, engine_config):
        self.rank = rank
        # What a process set's ranks need to connect among themselves.
        self.secret, self.host = secret, host
        self.connect_timeout, self.engine_config = connect_timeout, engine_config
        self.local_rank = int(env.get("HOROVOD_LOCAL_RANK", rank.rank()))
        self.local_size = int(env.get("HOROVOD_LOCAL_SIZE", rank.size()))
        self.cross_rank = int(env.get("HOROVOD_CROSS_RANK", 0))
        self.cross_size = int(env.get("HOROVOD_CROSS_SIZE", 1))
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
    if float(env.get("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0")) > 0:
        lines.append("stall_timeout_ms=%d" % (float(env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"]) * 1000))
    return "\n".join(lines)


def init(process_sets=None):
    """Joins the job: connects to every other rank. Every rank must call it. ``process_sets``: a
    list of ``ProcessSet`` to add at once (``add_process_set``), as in Horovod."""
    _init()
    for process_set in process_sets or []:
        from horovod_rs.common.process_sets import add_process_set

        add_process_set(process_set)


def _init():
    global _state
    with _lock:
        if _state is not None:
            return
        env = os.environ
        if "HOROVOD_RS_RENDEZVOUS" in env:
            rank, size = int(env["HOROVOD_RANK"]), int(env["HOROVOD_SIZE"])
            service = env["HOROVOD_RS_RENDEZVOUS"]
            secret = bytes.fromhex(env["HOROVOD_RS_SECRET"])
            host = env.get("HOROVOD_HOSTNAME", "127.0.0.1")
            local = None
        else:  # Started without a launcher: a job of one.
            rank, size, secret, host = 0, 1, secrets.token_bytes(32), "127.0.0.1"
            local = _native.Rendezvous(secret, 1)
            service = "127.0.0.1:%d" % local.port()
        connect_timeout = float(env.get("HOROVOD_RS_CONNECT_TIMEOUT_SECONDS", "120"))
        native = _native.Rank(rank, size, service, secret, host, connect_timeout, DEFAULT_TIMEOUT_S,
                              _engine_config(env))
        if local is not None:
            local.close()
        _state = _State(native, env, secret, host, connect_timeout, _engine_config(env))


def shutdown():
    """Leaves the job; the other ranks' pending collectives fail instead of waiting."""
    global _state
    with _lock:
        _state = None


def is_initialized():
    return _state is not None


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
