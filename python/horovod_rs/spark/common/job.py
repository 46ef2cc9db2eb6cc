"""One job of horovod_rs ranks as one Spark barrier stage: the driver's side (settings, task slots,
the rendezvous, the ranks' output, cancelling, their outcomes) and each rank's side (joining the
job for the duration of its task).

The one Spark driver path of the Python package, for a classic session and a Spark Connect one
alike: the stage is a DataFrame's barrier ``mapInArrow`` (``spark.range(n, numPartitions=n)`` for
the Run API, the training DataFrame for a fit), settings come from ``spark.conf`` and Horovod's
variables through the native settings table, and the job is cancelled by its session tag.

Where the ranks find each other: through a rendezvous service on the driver when the driver runs
in the cluster (a classic session), else through one that rank 0's task hosts on a port derived
from the job's secret, since a Connect client may be out of the executors' reach.
``spark.horovod.rs.driverRendezvous`` forces either way.

Every rank reports an outcome instead of failing its task: a failed task would abort the stage
with Spark's generic message, while an outcome carries the rank's own traceback. A rank that
fails leaves the job at once, telling the others why, so their collectives fail fast too; the
driver then names the rank whose failure was its own, not the ranks that only lost their peer.

The job's secret and settings reach the ranks inside the task's closure and the rank spec: they
never enter the environment of Spark's reused Python workers.
"""

import json
import os
import secrets
import signal
import threading
import time
import traceback
from contextlib import contextmanager

import cloudpickle

from horovod_rs.runner.common.util.secret import make_secret_key
from horovod_rs.spark.common import session

POLL_S = 0.2
# How often a fit's attempt on fewer ranks than it wants counts the cluster's task slots.
REGROW_POLL_S = 2.0
# How often a job waiting for task slots says what it waits for (the first time after executors
# that are only starting would usually be up).
WAITING_NOTE_S = 30.0
FIRST_WAITING_NOTE_S = 5.0
# How every error of a job whose ranks could not all start begins: Horovod's words, which scripts match.
NOT_STARTED = "Timed out waiting for Spark tasks to start: "
# The columns of a rank's outcome row.
OUTCOME_SCHEMA = "rank int, ok boolean, payload binary, output string"


class HorovodRunError(RuntimeError):
    """A rank of a job failed: the message names the rank and carries its traceback."""


class HorovodRankLostError(HorovodRunError):
    """Spark aborted the job's barrier stage for a reason outside the ranks' code (an executor was
    lost or killed, a Python worker died): a new attempt of the job may succeed."""


# A Spark conf key: how many times a fit runs its barrier job when ranks are lost outside the
# model's code; every attempt after the first resumes from the store's last checkpoint.
FIT_ATTEMPTS_KEY = "spark.horovod.rs.fitAttempts"
# How few ranks a fit's attempt after the first may run with (unset: all of num_proc).
FIT_MIN_PROCESSES_KEY = "spark.horovod.rs.fitMinProcesses"


class JobSettings:
    """A job's settings, read once on the driver from the session's ``spark.horovod.rs.*`` keys
    and Horovod's variables (this process's, then the job's ``env``) through the native table:
    ``spec`` (the rank-spec fields they set, sent to every rank) and the driver's own."""

    def __init__(self, spark, env=None):
        from horovod_rs import _native

        keys = session.confs(spark, _native.setting_keys())
        variables = {name: os.environ[name] for name in _native.setting_variables() if name in os.environ}
        variables.update({k: str(v) for k, v in (env or {}).items() if k in _native.setting_variables()})
        settings = json.loads(_native.job_settings(keys, variables))
        self.spec = settings["spec"]
        driver = settings["driver"]
        self.start_timeout = driver["start_timeout_s"]
        self.fit_attempts = driver["fit_attempts"]
        self.fit_min_processes = driver["fit_min_processes"]
        self.driver_rendezvous = driver["driver_rendezvous"]


def run_attempts(attempts, run, on_retry, knob, again=None):
    """``run(attempt)`` until it succeeds or ``attempts`` runs have lost a rank; before each retry,
    ``on_retry(attempt, error)``. Errors in the ranks' own code are not retried. ``knob`` names
    what sets ``attempts`` (for the final error). ``again(attempt, result)``, when given, may call
    a result not final (a fit stopped to run on more ranks): the next attempt runs, and it does
    not count as a lost one."""
    attempt = lost = 0
    while True:
        attempt += 1
        try:
            result = run(attempt)
        except HorovodRankLostError as error:
            lost += 1
            if lost == attempts:
                raise HorovodRankLostError("%s\n(attempt %d of %d; %s sets the number of attempts)"
                                           % (error, lost, attempts, knob)) from None
            on_retry(attempt, error)
            continue
        if again is None or not again(attempt, result):
            return result


def read_to_end(batches):
    """Reads what is left of a task's input. Spark reuses a Python worker for the next task only
    when its task read all of its input: otherwise every job starts new workers, which import
    horovod_rs and the framework again (4 s for torch, each job, on a 2-core host)."""
    for _ in batches:
        pass


def await_slots(spark, num_proc, start_timeout):
    """Returns once the cluster can run ``num_proc`` tasks at once (a barrier stage needs them
    all). More processes than a cluster that cannot grow is configured for fail at once; else
    the scheduler's count (a classic session's) is waited for up to ``start_timeout`` (executors
    starting, dynamic allocation), saying what for after 5 s and every 30 s."""
    configured = session.configured_slots(spark)
    if configured is not None and configured < num_proc and not session.cluster_can_grow(spark):
        raise TimeoutError(NOT_STARTED + "the cluster has %d task slots for %d processes, and it cannot grow "
                           "(master %s): lower num_proc or start a larger cluster"
                           % (configured, num_proc, session.conf(spark, "spark.master")))
    available = session.task_slots(spark)
    if available is None:
        return
    started = time.time()
    said = started - WAITING_NOTE_S + FIRST_WAITING_NOTE_S
    while available < num_proc:
        if time.time() - started > start_timeout:
            raise TimeoutError(NOT_STARTED + "the cluster has %d task slots for %d processes after waiting %.0f s "
                               "(add executors or cores, lower num_proc, or raise start_timeout / "
                               "HOROVOD_SPARK_START_TIMEOUT)" % (available, num_proc, start_timeout))
        if time.time() - said >= WAITING_NOTE_S:
            print("horovod_rs: waiting for %d task slots; the cluster has %d (executors starting or dynamic "
                  "allocation); giving up after %.0f s" % (num_proc, available, start_timeout), flush=True)
            said = time.time()
        time.sleep(POLL_S)
        available = session.task_slots(spark)


class BarrierJob:
    """The driver's side of one job: ``with BarrierJob(spark, n) as job: job.run(fn, df)``."""

    def __init__(self, spark, num_proc, start_timeout=None, env=None, stdout=None, stderr=None,
                 prefix_output_with_timestamp=False, forward_output=True, use_gpu=False,
                 description="horovod_rs", monitor=None, grow_to=None):
        """``grow_to``: a fit's attempt on fewer ranks than it wants; once the cluster has that
        many task slots, the ranks are asked to stop after their epoch (``output.REGROW``)."""
        self.spark, self.num_proc, self._grow_to = spark, num_proc, grow_to
        self._start_timeout = start_timeout
        self._env = {str(k): str(v) for k, v in (env or {}).items()}
        self._output_options = dict(stdout=stdout, stderr=stderr,
                                    prefix_output_with_timestamp=prefix_output_with_timestamp)
        if monitor is not None:  # a fit's events: its progress line, MLflow (progress.FitMonitor)
            self._output_options.update(on_event=monitor.on_event, status_line=monitor.status_line)
        self._forward_output = forward_output
        self._use_gpu = use_gpu
        self._description = description
        self._monitor = monitor
        self._service = self._output = None

    def __enter__(self):
        from horovod_rs import _native
        from horovod_rs.spark.common.output import REGROW, OutputServer

        if self.num_proc < 1:
            raise ValueError("num_proc must be at least 1, not %r" % (self.num_proc,))
        session.require_pyarrow(self._description)
        if session.spark_version(self.spark) < (3, 5):
            raise RuntimeError("horovod_rs runs its ranks as a barrier stage of a DataFrame, which needs Spark 3.5 or "
                               "newer; this session's Spark is %s" % self.spark.version)
        settings = JobSettings(self.spark, self._env)
        if self._start_timeout is None:
            self._start_timeout = settings.start_timeout
        await_slots(self.spark, self.num_proc, self._start_timeout)
        secret = make_secret_key()
        rendezvous = None
        if settings.driver_rendezvous == "on" or (settings.driver_rendezvous == "auto"
                                                  and not session.is_connect(self.spark)):
            self._service = _native.Rendezvous(secret, self.num_proc)
            rendezvous = "%s:%d" % (session.executors_reach_this_process_at(self.spark), self._service.port())
        output_address = token = None
        if self._forward_output:
            token = secrets.token_hex(16)
            self._output = OutputServer(token, **self._output_options)
            output_address = "%s:%d" % (session.executors_reach_this_process_at(self.spark), self._output.port)
        requests = (REGROW,) if self._grow_to is not None and output_address is not None else ()
        self.ranks = RankContext(size=self.num_proc, secret=secret, spec=settings.spec, rendezvous=rendezvous,
                                 env=self._env, output_address=output_address, output_token=token,
                                 requests=requests)
        return self

    def __exit__(self, *exc):
        if self._service is not None:
            self._service.close()
        if self._output is not None:
            self._output.close()
        return False

    def run(self, fn, df=None):
        """Runs ``fn(rank, batches)`` on every rank, ``batches`` iterating over the rank's partition
        of ``df`` as Arrow record batches (``df`` is repartitioned to one partition per rank; by
        default there is no data); returns the results in rank order."""
        import pyarrow as pa

        ranks, n = self.ranks, self.num_proc

        def task(batches):
            rank, ok, payload, output = ranks.outcome(fn, batches)
            if ok:
                read_to_end(batches)
            yield pa.RecordBatch.from_pydict({"rank": [rank], "ok": [ok], "payload": [payload], "output": [output]},
                                             schema=pa.schema([("rank", pa.int32()), ("ok", pa.bool_()),
                                                               ("payload", pa.binary()), ("output", pa.string())]))

        data = df
        if df is None:
            df = self.spark.range(0, n, 1, n)
        elif session.num_partitions(df) != n:
            df = df.repartition(n)
        stage = df.mapInArrow(task, OUTCOME_SCHEMA, barrier=True, **self._resources())
        outcomes = self.collect(stage)
        if not outcomes and data is not None:
            # Spark plans a DataFrame it knows to be empty (limit(0), a false filter) with no tasks.
            raise ValueError("the DataFrame has no rows: Spark ran no task over it")
        return self.results(outcomes)

    def _resources(self):
        """A GPU per rank, when asked (a task resource profile of the stage)."""
        if not self._use_gpu:
            return {}
        if session.spark_version(self.spark) < (4, 0):
            raise ValueError("use_gpu needs Spark 4 (a barrier stage of a DataFrame with a resource profile); on "
                             "Spark 3.5 give every task a GPU with spark.task.resource.gpu.amount=1 instead")
        from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

        return {"profile": ResourceProfileBuilder().require(TaskResourceRequests().cpus(1).resource("gpu", 1)).build}

    def collect(self, stage):
        """Runs the stage and returns its outcome rows. Ctrl-C (or any exception here) cancels the
        job on the cluster; a task that failed outside ``RankContext.outcome`` (Spark aborted the
        stage) becomes a ``HorovodRunError``; a Connect session that reports progress bounds the
        wait for every rank to start by the start timeout."""
        from horovod_rs import _native

        # The tag names the job in Spark's UI too (tags may not hold commas).
        tag = "%s [%s]" % (self._description.replace(",", ";"), secrets.token_hex(6))
        start = _StartWatch(self.spark, self.num_proc, self._start_timeout, tag)
        regrow = _RegrowWatch(self.spark, self._grow_to, self._output) if self.ranks.requests else None
        if self._monitor is not None:
            self._monitor.submitted()
        try:
            with session.tagged(self.spark, tag), _CtrlC() as ctrl_c:
                rows = stage.collect()
            if self._monitor is not None:
                self._monitor.job_done()
        except BaseException as e:
            session.interrupt(self.spark, tag)
            if ctrl_c.pressed:
                raise KeyboardInterrupt() from None  # whatever the blocked call made of it
            if start.timed_out:
                raise TimeoutError(NOT_STARTED + "only %d of %d ranks started within %.0f s: other jobs hold the "
                                   "cluster's task slots (free them, lower num_proc, or raise start_timeout / "
                                   "spark.horovod.rs.startTimeout)"
                                   % (start.most, self.num_proc, self._start_timeout)) from None
            if not isinstance(e, Exception):
                raise  # Ctrl-C: the job is cancelled, nothing to report
            lost = _native.rank_lost(str(e))
            raise (HorovodRankLostError if lost else HorovodRunError)(
                "the horovod_rs job of %d processes failed in Spark:\n%s" % (self.num_proc, spark_failure_text(e))) from None
        finally:
            start.stop()
            if regrow is not None:
                regrow.stop()
        return [(row["rank"], row["ok"], row["payload"], row["output"]) for row in rows]

    def results(self, outcomes):
        """The ranks' results in rank order, or a ``HorovodRunError`` naming the rank that failed.
        Output the ranks could not send live is printed first."""
        outcomes = sorted((int(rank), bool(ok), bytes(payload), output) for rank, ok, payload, output in outcomes)
        self._print_late_output(outcomes)
        missing = sorted(set(range(self.num_proc)) - {rank for rank, _, _, _ in outcomes})
        if missing:
            raise HorovodRunError("ranks %s of %d reported nothing" % (missing, self.num_proc))
        failures = [(rank, cloudpickle.loads(payload)) for rank, ok, payload, _ in outcomes if not ok]
        if failures:
            own = [(rank, f) for rank, f in failures if not f["consequence"]] or failures
            rank, failure = own[0]
            followers = sorted(r for r, _ in failures if r != rank)
            also = " (then ranks %s failed too)" % followers if followers else ""
            raise HorovodRunError("rank %d of %d failed%s:\n%s" % (rank, self.num_proc, also, failure["traceback"]))
        return [cloudpickle.loads(payload) for _, _, payload, _ in outcomes]

    def _print_late_output(self, outcomes):
        from horovod_rs.spark.common.output import replay

        late = [(rank, output) for rank, _, _, output in outcomes if output]
        if not late or self._output is None:
            return
        print("horovod_rs: the ranks could not reach this process for live output (%s); what they printed:"
              % self.ranks.output_address, flush=True)
        for rank, output in late:
            replay(self._output, rank, output)


class _CtrlC:
    """Within the block, notes a Ctrl-C (SIGINT) in the main thread before raising
    ``KeyboardInterrupt`` as usual: a call blocked in py4j may turn it into a ``Py4JError``, and
    the job must be cancelled and the interrupt surface as one either way."""

    def __enter__(self):
        self.pressed = self._installed = False
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def _handle(self, signum, frame):
        self.pressed = True
        raise KeyboardInterrupt()

    def __exit__(self, *exc):
        if self._installed:  # None: a handler not set from Python, which the default stands for
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.SIG_DFL)
        return False


class _StartWatch:
    """Under a Connect session that reports progress: cancels the job (by ``tag``) when fewer than
    ``num_proc`` tasks ran within ``timeout`` seconds of submission. Only a server that reports
    can tell: without a report nothing is cancelled. A classic session waited for its slots before
    submitting (``await_slots``); there a started stage runs every rank at once."""

    def __init__(self, spark, num_proc, timeout, tag):
        self.most, self.reports, self.timed_out = 0, 0, False
        self._num_proc = num_proc
        self._done = threading.Event()
        self._stop_progress = session.watch_progress(spark, self._progress)
        if self._stop_progress is None:
            return

        def watch():
            if not self._done.wait(timeout) and self.reports and self.most < num_proc:
                self.timed_out = True
                session.interrupt(spark, tag)

        threading.Thread(target=watch, name="horovod_rs-start-watch", daemon=True).start()

    def _progress(self, inflight_tasks):
        self.reports += 1
        self.most = max(self.most, inflight_tasks)
        if self.most >= self._num_proc:
            self._done.set()

    def stop(self):
        self._done.set()
        if self._stop_progress is not None:
            self._stop_progress()


class _RegrowWatch:
    """A fit's attempt on fewer ranks than it wants: asks its ranks to stop after their epoch
    (``output.REGROW``), to run again on more, once the cluster has ``grow_to`` task slots (an
    executor restarted or added). Only a classic session counts slots."""

    def __init__(self, spark, grow_to, output):
        from horovod_rs.spark.common.output import REGROW

        self._done = threading.Event()

        def watch():
            while not self._done.wait(REGROW_POLL_S):
                try:
                    slots = session.task_slots(spark)
                except Exception:  # noqa: BLE001 (the session is stopping: the attempt just does not grow)
                    return
                if slots is not None and slots >= grow_to:
                    output.request(REGROW)
                    return

        threading.Thread(target=watch, name="horovod_rs-regrow-watch", daemon=True).start()

    def stop(self):
        self._done.set()


def spark_failure_text(error):
    """The useful part of an aborted stage's error: the Python traceback, when there is one, else
    Spark's reason without the JVM's stack frames."""
    text = str(error)
    start = text.find("Traceback (most recent call last)")
    if start >= 0:
        return text[start:]
    return "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("at ")).strip()


class RankContext:
    """What each task needs to join the job (shipped inside the task's closure): the job's size and
    secret, the spec fields its settings set, the driver's rendezvous service (None: the ranks
    host one in rank 0's task), the ``env`` the function runs with, and
    where to send output (and what the driver may ask back, ``output.forward_output``)."""

    def __init__(self, size, secret, spec, rendezvous, env, output_address, output_token, requests=()):
        self.size, self.secret, self.spec, self.rendezvous, self.env = size, secret, spec, rendezvous, env
        self.output_address, self.output_token, self.requests = output_address, output_token, tuple(requests)

    def outcome(self, fn, *args, **kwargs):
        """Runs ``fn(rank, ...)`` as this task's rank of the job; returns ``(rank, ok, payload,
        output)``, ``output`` being what the rank printed when it could not send it live."""
        from pyspark import BarrierTaskContext

        from horovod_rs.spark.common import timings
        from horovod_rs.spark.common.output import forward_output

        timings.task_started()
        rank = BarrierTaskContext.get().partitionId()
        output = forward_output(self.output_address, self.output_token, rank, self.requests)
        try:
            with output:
                with self.session() as rank:
                    result = cloudpickle.dumps(fn(rank, *args, **kwargs))
            return rank, True, result, output.undelivered()
        except BaseException as e:
            return rank, False, failure_payload(e), output.undelivered()

    @contextmanager
    def session(self):
        """Within the block this process is a rank of the job, with the job's ``env`` in its
        environment (Horovod's ``env``); after it, the rank has left the job (telling the others
        whether it returned or failed) and the environment is as it was."""
        from pyspark import BarrierTaskContext

        from horovod_rs import _native
        from horovod_rs.common import basics

        ctx = BarrierTaskContext.get()
        rank = ctx.partitionId()
        hosts = [info.address.rsplit(":", 1)[0] for info in ctx.getTaskInfos()]
        error = service = None
        with environment(self.env):
            try:
                rendezvous = self.rendezvous
                if rendezvous is None:  # rank 0's task hosts it (native/core's rendezvous_service/rank_zero.rs)
                    rendezvous = _native.rank_zero_candidates(hosts[0], self.secret)
                    if rank == 0:
                        service = _native.Rendezvous.for_rank_zero(self.secret, self.size)
                        rendezvous = "%s:%d" % (hosts[0], service.port())
                spec = basics.RankSpec(rank, self.size, rendezvous, self.secret, host=hosts[rank], fields=self.spec)
                try:
                    basics.join_task(spec)
                finally:
                    # Rank 0 has its list once every rank registered, and closing leaves the replies
                    # under way alone: the service is done (joined or not), and a retried stage's
                    # rank 0 finds the job's first port free again.
                    if service is not None:
                        service.close()
                yield rank
            except BaseException as e:
                error = e
                raise
            finally:
                basics.leave_task(error)


def failure_payload(error):
    """A rank's failure as its outcome carries it: the traceback being handled, and whether the
    failure only follows a peer's (a collective failed because another rank left or failed)."""
    from horovod_rs import _native

    consequence = _native.follows_peer("%s: %s" % (type(error).__name__, error))
    return cloudpickle.dumps({"traceback": traceback.format_exc(), "consequence": consequence})


def environment(env):
    """``env`` set in this process's environment within the block, then restored."""
    from horovod_rs.common.util import env as environment_of

    return environment_of(**env)
