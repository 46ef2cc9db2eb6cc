"""An elastic job (``horovod_rs.spark.run_elastic``): ranks that survive a lost executor go on
with fewer ranks, and new ranks join when Spark gives slots back.

A barrier stage cannot change its size, and Spark aborts every task of it when one fails, so an
elastic job is an ordinary (non-barrier) stage of ``max_num_proc`` tasks, one per slot, and the
worlds are decided by a coordinator (``horovod_rs.runner.elastic.coordinator``), which outlives
any rank: a task that Spark starts later (an executor came back, a slot freed) joins as a
newcomer at the running world's next commit; the coordinator has the job's results when every
member of a world has returned, and the driver then cancels what is left of the stage (tasks
Spark is retrying on an executor that never comes back).

The first world waits for ``num_proc`` tasks (gang start, up to ``start_timeout``; then
``min_num_proc`` suffice). A rank whose ``fn`` raises its own exception leaves the world as a lost
one does, as in Horovod: once no member still runs, if any went on to the next world (their
``hvd.elastic.run`` caught the failed collective), the failed task raises it, and Spark runs the
task again (``spark.task.maxFailures``), which joins as a newcomer. When no member went on (every
one failed, returned or was lost), the job ends with the rank's traceback. ``reset_limit`` bounds
how many new worlds a job forms after its first.

Where the coordinator runs: on the driver when the driver is in the cluster (a classic session);
else (a Spark Connect client, which the executors may not reach) in a process of its own on an
executor, which a one-task job starts before the elastic stage and which outlives that task. The
job's verdict (which task holds each rank's result, or the error) then travels back in the
elastic stage's rows: the coordinator sends it to every task still connected, each returns it with
its own result, and the coordinator exits
once no task has been connected for ``coordinator.LINGER_S``. Its own timeouts bound its life when the
client goes away.
"""

import json
import pickle

from horovod_rs.runner.elastic.coordinator import POLL_S, Coordinator, ElasticJobError, Member, Retired
from horovod_rs.spark.common import job

# A first world that never formed: the error's first words (Horovod's), and what to do about it.
NOT_STARTED = (job.NOT_STARTED,
               "Add executors or cores, lower min_num_proc, or raise start_timeout / HOROVOD_SPARK_START_TIMEOUT")
# How long a job that has its results gives its stage to end before cancelling what is left.
SETTLE_S = 5.0
# The columns of an elastic task's row: its slot and attempt, what it printed that the client did
# not get live, and, when the coordinator is in the cluster, its own result, the job's verdict
# (pickled), and why it could not reach the coordinator, if it could not.
TASK_SCHEMA = "slot int, attempt int, output string, result binary, verdict binary, unreachable string"


class TaskRestarted(RuntimeError):
    """Fails the task of a rank whose ``fn`` raised when the job went on without it: Spark runs
    the task again, and the new attempt joins the job as a newcomer."""

    def __init__(self, failure):
        super().__init__("the elastic job goes on without this rank, and Spark runs its task again "
                         "(spark.task.maxFailures bounds how often): %s" % failure)


def run_job(spark, payload, num_proc, min_np, max_np, start_timeout, elastic_timeout, reset_limit, env,
            output_options):
    """Runs the cloudpickled ``(fn, args, kwargs)`` as an elastic job on ``spark`` (classic or
    Connect); returns the results of the last world's ranks in rank order and the size of every
    world it formed. ``spark.horovod.rs.driverRendezvous`` places the coordinator as it places
    the ranks' rendezvous: ``true``, on the driver; ``false``, in the cluster; ``auto``, on the
    driver of a classic session."""
    import secrets

    from horovod_rs.runner.common.util.secret import make_secret_key
    from horovod_rs.spark.common import session
    from horovod_rs.spark.common.job import JobSettings, await_slots
    from horovod_rs.spark.common.output import OutputServer

    session.require_pyarrow("horovod_rs.spark.run_elastic")
    settings = JobSettings(spark, env)
    start_timeout = settings.start_timeout if start_timeout is None else start_timeout
    await_slots(spark, min_np, start_timeout)
    token, output_token, secret = secrets.token_hex(16), secrets.token_hex(16), make_secret_key()
    config = dict(token=token, num_proc=num_proc, min_np=min_np, max_np=max_np, start_timeout=start_timeout,
                  elastic_timeout=elastic_timeout, reset_limit=reset_limit, not_started=NOT_STARTED)
    here = session.executors_reach_this_process_at(spark)
    output = OutputServer(output_token, **output_options)
    stage = _Stage(spark, max_np, output, dict(token=token, output_address="%s:%d" % (here, output.port),
                                                output_token=output_token, secret=secret, fields=settings.spec,
                                                env=env, payload=payload))
    try:
        if settings.driver_rendezvous == "on" or (settings.driver_rendezvous == "auto"
                                                  and not session.is_connect(spark)):
            return _coordinated_here(stage, config, here)
        return _coordinated_in_cluster(stage, config, session.driver_host(spark))
    finally:
        output.close()


def _coordinated_here(stage, config, here):
    """The job with its coordinator in this process (the driver): its results and worlds."""
    import cloudpickle

    from horovod_rs.spark.common.job import HorovodRunError

    coordinator = Coordinator(**config)
    stage.start("%s:%d" % (here, coordinator.port), verdicts=False)
    outcomes = None
    try:
        outcomes = coordinator.wait(stage.failure)
    except ElasticJobError as e:
        raise HorovodRunError(str(e)) from None
    finally:
        stage.replay(coordinator.kept_output())
        coordinator.close()
        # When every task of the stage is a member, they all end right after their results: let
        # them, and keep their workers (tasks still waiting for a slot would never end).
        stage.stop(grace_s=SETTLE_S if outcomes is not None and len(outcomes) == stage.tasks else 0.0)
    return [cloudpickle.loads(result) for _, result in outcomes], list(coordinator.worlds)


def _coordinated_in_cluster(stage, config, driver_host):
    """The job with its coordinator in a process on an executor (started by a one-task job): its
    results and worlds, from the verdict the tasks return."""
    import cloudpickle

    from horovod_rs.spark.common.job import HorovodRunError

    spark = stage.spark
    started = spark.range(0, 1, 1, 1).mapInArrow(_starting_coordinator(config, driver_host), "address string")
    address = started.collect()[0]["address"]
    stage.start(address, verdicts=True)
    rows = stage.wait()
    verdict = next((pickle.loads(row["verdict"]) for row in rows if row["verdict"] is not None), None)
    # The output of tasks Spark ran again (kept by the coordinator) came before the rows'.
    stage.replay(verdict[-1] if verdict is not None else [])
    stage.replay([(row["slot"], row["output"]) for row in rows])
    if verdict is None:
        unreachable = sorted({row["unreachable"] for row in rows if row["unreachable"]})
        raise HorovodRunError(
            "no task of the elastic job heard a verdict from its coordinator (at %s, on an executor): %s"
            % (address, "; ".join(unreachable) if unreachable else "it was lost (its executor's host went away?)"))
    if verdict[0] == "error":
        raise HorovodRunError(verdict[1])
    tasks, worlds = verdict[1], verdict[2]
    results = {(row["slot"], row["attempt"]): row["result"] for row in rows if row["result"] is not None}
    lost = [rank for rank, task in enumerate(tasks) if task not in results]
    if lost:
        raise HorovodRunError("the results of ranks %s of %d were lost: their tasks returned, then ended before "
                              "their rows reached Spark" % (lost, len(tasks)))
    return [cloudpickle.loads(results[task]) for task in tasks], worlds


class _Stage:
    """The elastic stage: ``max_np`` tasks, one per slot, run in a thread of the driver (or the
    Connect client) and cancelled by their tag."""

    def __init__(self, spark, max_np, output, task_options):
        import secrets

        self.spark, self.tasks, self._output, self._task_options = spark, max_np, output, task_options
        self._tag = "horovod_rs.spark.run_elastic [%s]" % secrets.token_hex(6)
        self._rows, self._failure, self._thread = None, None, None

    def start(self, coordinator, verdicts):
        import threading

        from horovod_rs.spark.common import session

        task = _Task(coordinator, verdicts=verdicts, **self._task_options)
        pa = session.require_pyarrow("horovod_rs.spark.run_elastic")
        schema = pa.schema([("slot", pa.int32()), ("attempt", pa.int32()), ("output", pa.string()),
                            ("result", pa.binary()), ("verdict", pa.binary()), ("unreachable", pa.string())])

        def task_rows(batches):
            from horovod_rs.spark.common.job import read_to_end

            row = task.run()
            read_to_end(batches)
            yield pa.RecordBatch.from_pylist([row], schema=schema)

        stage = self.spark.range(0, self.tasks, 1, self.tasks).mapInArrow(task_rows, TASK_SCHEMA)

        def collect():
            try:
                with session.tagged(self.spark, self._tag):
                    self._rows = stage.collect()
            except Exception as e:  # noqa: BLE001  (reported by failure(), unless the job is over)
                self._failure = e

        self._thread = threading.Thread(target=collect, name="horovod_rs-elastic-stage", daemon=True)
        self._thread.start()

    def failure(self):
        """An ``ElasticJobError`` once Spark ended the stage with an error, else None."""
        from horovod_rs.spark.common.job import spark_failure_text

        if self._failure is None:
            return None
        return ElasticJobError("Spark ended the elastic job's stage:\n%s" % spark_failure_text(self._failure))

    def wait(self):
        """The stage's rows once every task returned; a ``HorovodRunError`` when Spark ended the
        stage. Ctrl-C cancels it."""
        from horovod_rs.spark.common.job import HorovodRunError

        try:
            while self._thread.is_alive():
                self._thread.join(POLL_S)
        finally:
            self.stop()
        if self._failure is not None:
            raise HorovodRunError(str(self.failure())) from None
        return self._rows

    def replay(self, outputs):
        """Prints what tasks could not print live: ``[(slot, undelivered output)]``."""
        from horovod_rs.spark.common.output import replay

        for slot, undelivered in outputs:
            if undelivered:
                replay(self._output, slot, undelivered)

    def stop(self, grace_s=0.0):
        """Cancels what is left of the stage (tasks Spark still retries or schedules), after up to
        ``grace_s`` for it to end on its own: a cancelled task takes its Python worker down, so
        the next job would start new ones and import everything again."""
        from horovod_rs.spark.common import session

        self._thread.join(grace_s)
        session.interrupt(self.spark, self._tag)
        self._thread.join(timeout=30)


def _starting_coordinator(config, driver_host):
    """The one-task job's function: starts the coordinator in a process of its own (which outlives
    the task and its Python worker) and returns the address the executors reach it at."""

    def start(batches):
        import subprocess
        import sys

        import pyarrow as pa

        from horovod_rs.spark.common import session
        from horovod_rs.spark.common.job import read_to_end

        process = subprocess.Popen([sys.executable, "-m", "horovod_rs.spark.common.elastic_job"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        process.stdin.write(json.dumps(config).encode())
        process.stdin.close()
        first = process.stdout.readline().decode()
        if not first.startswith("port "):
            raise RuntimeError("the elastic job's coordinator did not start on this executor:\n%s%s"
                               % (first, process.stdout.read().decode()))
        process.stdout.close()
        address = "%s:%d" % (session.address_toward(driver_host), int(first.split()[1]))
        read_to_end(batches)
        yield pa.RecordBatch.from_pydict({"address": [address]})

    return start


def _serve_in_cluster():
    """The coordinator's own process (``python -m horovod_rs.spark.common.elastic_job``): reads its
    settings from stdin, prints its port, and serves the job until its verdict has gone out."""
    import os
    import sys

    coordinator = Coordinator(verdicts=True, **json.load(sys.stdin))
    print("port %d" % coordinator.port, flush=True)
    quiet = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(quiet, stream)  # the task that started this process no longer reads its pipe
    try:
        coordinator.wait()
    except ElasticJobError:
        pass  # the verdict the tasks take back
    coordinator.linger()
    coordinator.close()


class _Task:
    """What each task of an elastic job runs (shipped in the task's closure): it joins the
    coordinator, runs ``fn`` as a member of the worlds it is given, reports the outcome and, when
    the tasks carry it, waits for the job's verdict."""

    def __init__(self, coordinator, token, output_address, output_token, secret, fields, env, payload, verdicts):
        self.coordinator, self.token, self.verdicts = coordinator, token, verdicts
        self.output_address, self.output_token = output_address, output_token
        self.secret, self.fields, self.env, self.payload = secret, fields, env, payload

    def run(self):
        """Runs the task's part; returns its row (``TASK_SCHEMA``) as a dict."""
        import cloudpickle
        from pyspark import TaskContext

        from horovod_rs.common import basics
        from horovod_rs.spark.common.job import environment, failure_payload
        from horovod_rs.spark.common.output import forward_output

        context = TaskContext.get()
        slot = context.partitionId()
        row = dict(slot=slot, attempt=context.attemptNumber(), output=None, result=None, verdict=None,
                   unreachable=None)
        try:
            member = Member(self.coordinator, self.token, slot, row["attempt"], self.secret, self.fields, self.env)
        except OSError as e:
            # Spark started this task after the coordinator left (the job had ended), or the
            # coordinator cannot be reached at all: the client tells which from every task's row.
            row["unreachable"] = "slot %d could not reach it: %s" % (slot, e)
            return row
        try:
            output = forward_output(self.output_address, self.output_token, slot)
            with output, environment(self.env):
                error = None
                try:
                    basics.join_elastic_task(member)
                    fn, args, kwargs = cloudpickle.loads(self.payload)
                    outcome = (True, cloudpickle.dumps(fn(*args, **kwargs)))
                except Retired as retired:
                    outcome = None
                    verdict = retired.verdict
                except BaseException as e:  # noqa: BLE001  (the coordinator reports it)
                    error = e
                    outcome = (False, failure_payload(e))
                finally:
                    basics.leave_task(error)
            if outcome is not None:
                member.finish(*outcome)
                heard = member.word_after_outcome() if self.verdicts or not outcome[0] else None
                if heard is not None and heard[0] == "restart":
                    member.keep_output(output.undelivered())  # this attempt returns no row
                    raise TaskRestarted(heard[1])
                verdict = heard[1] if heard is not None and self.verdicts else None
                if self.verdicts and outcome[0]:
                    row["result"] = outcome[1]
            row["output"] = output.undelivered() or None
            row["verdict"] = pickle.dumps(verdict) if verdict is not None else None
            return row
        finally:
            member.close()


if __name__ == "__main__":
    _serve_in_cluster()
