"""One job of horovod_rs ranks as one Spark barrier stage: the driver's side (task slots, the
rendezvous service, the ranks' output, their outcomes) and each rank's side (joining the job for
the duration of its task).

Every rank reports an outcome instead of failing its task: a failed task would abort the stage
with Spark's generic message, while an outcome carries the rank's own traceback. A rank that
fails leaves the job at once, so the others' collectives fail fast too; the driver then names the
rank whose failure was its own, not the ranks that only lost their peer.

The job's secret reaches the ranks inside the task's closure and joins them through an explicit
``RankSpec``: it never enters the environment of Spark's reused Python workers.
"""

import os
import secrets
import time
import traceback
from contextlib import contextmanager

import cloudpickle

POLL_S = 0.2

# Messages of the engine's errors that follow another rank's failure (the peer's own error is the
# cause worth reporting).
_CONSEQUENCES = ("connection to rank", "the engine has stopped", "unusable after an earlier failure",
                 "HorovodInternalError", "lost its peer")


# Spark's words for a task lost with its executor or Python worker, not failed by its own code.
_RANK_LOST = ("ExecutorLostFailure", "Python worker exited unexpectedly", "Executor heartbeat timed out",
              "worker lost", "Worker crashed")


class HorovodRunError(RuntimeError):
    """A rank of a job failed: the message names the rank and carries its traceback."""


class HorovodRankLostError(HorovodRunError):
    """Spark aborted the job's barrier stage for a reason outside the ranks' code (an executor was
    lost or killed, a Python worker died): a new attempt of the job may succeed."""


# A Spark conf key: how many times a fit runs its barrier job when ranks are lost outside the
# model's code; every attempt after the first resumes from the store's last checkpoint.
FIT_ATTEMPTS_KEY = "spark.horovod.rs.fitAttempts"
DEFAULT_FIT_ATTEMPTS = 3


def fit_attempts(sc):
    value = sc.getConf().get(FIT_ATTEMPTS_KEY, str(DEFAULT_FIT_ATTEMPTS))
    try:
        attempts = int(value)
    except ValueError:
        attempts = 0
    if attempts < 1:
        raise ValueError("%s must be a whole number of at least 1, not %r" % (FIT_ATTEMPTS_KEY, value))
    return attempts


def run_attempts(attempts, run, on_retry, knob):
    """``run(attempt)`` until it succeeds or ``attempts`` runs have lost a rank; before each retry,
    ``on_retry(attempt, error)``. Errors in the ranks' own code are not retried. ``knob`` names
    what sets ``attempts`` (for the final error)."""
    for attempt in range(1, attempts + 1):
        try:
            return run(attempt)
        except HorovodRankLostError as error:
            if attempt == attempts:
                raise HorovodRankLostError("%s\n(attempt %d of %d; %s sets the number of attempts)"
                                           % (error, attempt, attempts, knob)) from None
            on_retry(attempt, error)


def slots(sc):
    jsc = sc._jsc.sc()
    return jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile())


def await_slots(sc, num_proc, start_timeout):
    """Waits until the cluster can run ``num_proc`` tasks at once (a barrier stage needs them all)."""
    deadline = time.time() + start_timeout
    available = slots(sc)
    while available < num_proc:
        if time.time() > deadline:
            raise TimeoutError("the cluster has %d task slots for %d processes after waiting %.0f s (add executors "
                               "or cores, lower num_proc, or raise start_timeout / HOROVOD_SPARK_START_TIMEOUT)"
                               % (available, num_proc, start_timeout))
        time.sleep(POLL_S)
        available = slots(sc)


def default_start_timeout():
    return float(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", "600"))


class BarrierJob:
    """The driver's side of one job: ``with BarrierJob(sc, n) as job:`` run a barrier stage whose
    tasks call ``job.ranks.session()``, then ``job.results(outcomes)``."""

    def __init__(self, sc, num_proc, start_timeout=None, env=None, stdout=None, stderr=None,
                 prefix_output_with_timestamp=False, forward_output=True):
        self.sc, self.num_proc = sc, num_proc
        self._start_timeout = default_start_timeout() if start_timeout is None else start_timeout
        self._env = dict(env or {})
        self._output_options = dict(stdout=stdout, stderr=stderr,
                                    prefix_output_with_timestamp=prefix_output_with_timestamp)
        self._forward_output = forward_output
        self._service = self._output = None

    def __enter__(self):
        from horovod_rs import _native
        from horovod_rs.spark.common.output import OutputServer

        await_slots(self.sc, self.num_proc, self._start_timeout)
        secret = secrets.token_bytes(32)
        self._service = _native.Rendezvous(secret, self.num_proc)
        host = self.sc.getConf().get("spark.driver.host")
        output_address = token = None
        if self._forward_output:
            token = secrets.token_hex(16)
            self._output = OutputServer(token, **self._output_options)
            output_address = "%s:%d" % (host, self._output.port)
        # Horovod's knobs set on the driver reach the ranks, as in Horovod; ``env`` wins over them.
        env = {name: os.environ[name] for name in _native.spec_variables() if name in os.environ}
        env.update(self._env)
        self.ranks = RankContext(
            size=self.num_proc, rendezvous="%s:%d" % (host, self._service.port()), secret=secret, env=env,
            output_address=output_address, output_token=token)
        return self

    def __exit__(self, *exc):
        if self._service is not None:
            self._service.close()
        if self._output is not None:
            self._output.close()
        return False

    def collect(self, frame_or_rdd):
        """Runs the stage (``collect``) and returns its outcomes; a task that failed outside
        ``RankContext.outcome`` (Spark aborted the stage) becomes a ``HorovodRunError``."""
        try:
            return frame_or_rdd.collect()
        except Exception as e:  # py4j's or pyspark's error for an aborted stage
            lost = any(marker in str(e) for marker in _RANK_LOST)
            raise (HorovodRankLostError if lost else HorovodRunError)(
                "the horovod_rs job of %d processes failed in Spark:\n%s" % (self.num_proc, _spark_failure(e))) from None

    def results(self, outcomes):
        """The ranks' results in rank order, or a ``HorovodRunError`` naming the rank that failed."""
        outcomes = sorted((int(rank), bool(ok), bytes(payload)) for rank, ok, payload in outcomes)
        missing = sorted(set(range(self.num_proc)) - {rank for rank, _, _ in outcomes})
        if missing:
            raise HorovodRunError("ranks %s of %d reported nothing" % (missing, self.num_proc))
        failures = [(rank, cloudpickle.loads(payload)) for rank, ok, payload in outcomes if not ok]
        if failures:
            own = [(rank, f) for rank, f in failures if not f["consequence"]] or failures
            rank, failure = own[0]
            followers = sorted(r for r, _ in failures if r != rank)
            also = " (then ranks %s failed too)" % followers if followers else ""
            raise HorovodRunError("rank %d of %d failed%s:\n%s" % (rank, self.num_proc, also, failure["traceback"]))
        return [cloudpickle.loads(payload) for _, _, payload in outcomes]


def _spark_failure(error):
    """The useful part of an aborted stage's error: the Python traceback, when there is one."""
    text = str(error)
    start = text.find("Traceback (most recent call last)")
    return text[start:] if start >= 0 else text


class RankContext:
    """What each task needs to join the job (shipped inside the task's closure)."""

    def __init__(self, size, rendezvous, secret, env, output_address, output_token):
        self.size, self.rendezvous, self.secret, self.env = size, rendezvous, secret, env
        self.output_address, self.output_token = output_address, output_token

    def outcome(self, fn, *args, **kwargs):
        """Runs ``fn(rank, ...)`` as this task's rank of the job; returns ``(rank, ok, payload)``."""
        from pyspark import BarrierTaskContext

        rank = BarrierTaskContext.get().partitionId()
        try:
            with self.session() as rank:
                return rank, True, cloudpickle.dumps(fn(rank, *args, **kwargs))
        except BaseException as e:
            failure = {"traceback": traceback.format_exc(), "consequence": _is_consequence(e)}
            return rank, False, cloudpickle.dumps(failure)

    @contextmanager
    def session(self):
        """Within the block this process is a rank of the job: joined, with the job's environment
        and its output forwarded to the driver; it leaves the job and restores its environment after."""
        from pyspark import BarrierTaskContext

        from horovod_rs.common import basics
        from horovod_rs.spark.common.output import forward_output

        ctx = BarrierTaskContext.get()
        rank = ctx.partitionId()
        host = ctx.getTaskInfos()[rank].address.rsplit(":", 1)[0]
        gpus = ctx.resources().get("gpu")
        saved = dict(os.environ)
        os.environ.update(self.env)
        os.environ["HOROVOD_RS_GPUS"] = ",".join(gpus.addresses) if gpus else ""
        try:
            output = forward_output(self.output_address, self.output_token, rank) if self.output_address \
                else _nothing()
            with output:
                # Horovod's variables among the job's environment (set above) fill in the knobs.
                basics.init_rank(basics.RankSpec(rank, self.size, self.rendezvous, self.secret, host=host))
                try:
                    yield rank
                finally:
                    basics.shutdown()
        finally:
            os.environ.clear()
            os.environ.update(saved)


@contextmanager
def _nothing():
    yield


def _is_consequence(error):
    text = "%s: %s" % (type(error).__name__, error)
    return any(marker in text for marker in _CONSEQUENCES)
