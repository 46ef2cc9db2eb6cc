"""An elastic job (``horovod_rs.spark.run_elastic``): ranks that survive a lost executor go on
with fewer ranks, and new ranks join when Spark gives slots back.

A barrier stage cannot change its size, and Spark aborts every task of it when one fails, so an
elastic job is an ordinary (non-barrier) stage of ``max_num_proc`` tasks, one per slot, and the
world is decided by a coordinator on the driver, which outlives any rank:

- a task connects to the coordinator and stays connected while it runs (a connection that
  closes is a rank lost with its executor or Python worker);
- to join a world, a task opens a rendezvous listener and sends its address; the coordinator
  forms a world (a *generation*) once every running member of the last one asked for the next,
  ranks in the order of the last world, newcomers after them (by slot), at most ``max_num_proc``, at least
  ``min_num_proc`` (else it waits ``elastic_timeout`` for slots), and sends each member its rank
  and everyone's address;
- when a task Spark started later (an executor came back, a slot freed) waits to join, the
  coordinator tells the running world's members, whose next ``state.commit()`` raises
  ``HostsUpdatedInterrupt`` (on every rank at the same commit: rank 0's view is broadcast);
- a member's result or failure travels back over its connection; the coordinator has the job's
  results when every member of a world has returned, and the driver then cancels what is left of
  the stage (tasks Spark is retrying on an executor that never comes back).

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
once no task has been connected for ``LINGER_S``. Its own timeouts bound its life when the
client goes away.
"""

import hmac
import json
import pickle
import socket
import struct
import threading
import time

POLL_S = 0.2
# How long a job that has its results gives its stage to end before cancelling what is left.
SETTLE_S = 5.0
# Worlds in a row whose members could not meet (each rendezvous failed) before the job gives up:
# a fault that outlives a few new worlds (an unreachable port, a bad setting) will not pass.
FAILED_RENDEZVOUS_LIMIT = 3
# How long a task tries to reach the coordinator.
CONNECT_TIMEOUT_S = 30
# How long a coordinator in the cluster stays after its verdict with no task connected (tasks
# Spark starts once the ranks free their slots come for the verdict too).
LINGER_S = 10
# The most it stays after its verdict whatever its connections do.
MAX_LINGER_S = 600
# The columns of an elastic task's row: its slot and attempt, what it printed that the client did
# not get live, and, when the coordinator is in the cluster, its own result, the job's verdict
# (pickled), and why it could not reach the coordinator, if it could not.
TASK_SCHEMA = "slot int, attempt int, output string, result binary, verdict binary, unreachable string"


class ElasticJobError(RuntimeError):
    """The elastic job cannot go on: too few ranks, ``reset_limit`` exceeded, or a rank failed."""


class TaskRestarted(RuntimeError):
    """Fails the task of a rank whose ``fn`` raised when the job went on without it: Spark runs
    the task again, and the new attempt joins the job as a newcomer."""

    def __init__(self, failure):
        super().__init__("the elastic job goes on without this rank, and Spark runs its task again "
                         "(spark.task.maxFailures bounds how often): %s" % failure)


class Retired(BaseException):
    """The job ended while this task waited to join a world: the task has nothing left to do (a
    ``BaseException``, so that a training loop's ``except Exception`` lets it through). Carries
    the coordinator's verdict, when it sends one."""

    def __init__(self, verdict=None):
        super().__init__("the elastic job ended")
        self.verdict = verdict


# The first message a task sends, before it has proven it belongs to the job, is JSON (nothing
# of a stranger's is unpickled); after it, messages are pickled.
HELLO_BYTES = 4096


def send_message(connection, message):
    _send_frame(connection, pickle.dumps(message))


def receive_message(connection):
    """The next (pickled) message, or None when the other end closed the connection."""
    data = _receive_frame(connection)
    return None if data is None else pickle.loads(data)


def send_hello(connection, token, slot, attempt, host):
    _send_frame(connection, json.dumps({"token": token, "slot": slot, "attempt": attempt, "host": host}).encode())


def receive_hello(connection, token):
    """``(slot, attempt, host)`` of a task that sent the job's token first, else None."""
    data = _receive_frame(connection, HELLO_BYTES)
    try:
        hello = json.loads(data)
        if not hmac.compare_digest(str(hello["token"]), token):
            return None
        return int(hello["slot"]), int(hello["attempt"]), str(hello["host"])
    except (TypeError, ValueError, KeyError):
        return None


def _send_frame(connection, data):
    connection.sendall(struct.pack(">I", len(data)) + data)


def _receive_frame(connection, limit=None):
    header = _receive_exactly(connection, 4)
    if header is None:
        return None
    size = struct.unpack(">I", header)[0]
    if limit is not None and size > limit:
        return None
    return _receive_exactly(connection, size)


def _receive_exactly(connection, size):
    chunks = []
    while size:
        try:
            chunk = connection.recv(min(size, 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class _Worker:
    """A task the coordinator knows: its connection, its slot, and where it stands."""

    def __init__(self, number, connection, slot, attempt, host):
        self.number, self.connection, self.slot, self.attempt, self.host = number, connection, slot, attempt, host
        self.alive = True
        self.entry = None  # the address it waits to join the next world at
        self.join_error = None  # why its last rendezvous failed, if it did
        self.outcome = None  # (ok, payload) once it returned
        self.restarting = False  # failed, and told to fail its task so that Spark runs it again
        self.send_lock = threading.Lock()

    def send(self, message):
        with self.send_lock:
            try:
                send_message(self.connection, message)
            except OSError:
                pass  # the reader sees the connection close

    def __repr__(self):
        return "slot %d (attempt %d, %s)" % (self.slot, self.attempt, self.host)


class Coordinator:
    """The driver's side: listens for tasks and decides the worlds. ``wait()`` returns the last
    world's ``(ok, payload)`` outcomes in rank order or raises ``ElasticJobError``."""

    def __init__(self, token, num_proc, min_np, max_np, start_timeout, elastic_timeout, reset_limit,
                 verdicts=False):
        self._token = token
        self._verdicts = verdicts  # whether the tasks take the job's verdict back to the client
        self.num_proc, self.min_np, self.max_np = num_proc, min_np, max_np
        self._start_timeout, self._elastic_timeout, self._reset_limit = start_timeout, elastic_timeout, reset_limit
        self._lock = threading.Condition()
        self._workers = []
        self._members = []  # the current world, in rank order
        self._generation = -1
        self._grow_told = -1  # the generation whose members were told newcomers wait
        self._failed_rendezvous = 0  # worlds in a row whose members could not meet
        self._need_since = time.time()  # since when a world is needed and none runs
        self._result = self._error = None
        self._last_failure = None  # the last rank's own failure the job went on after, for its errors
        self.worlds = []  # the size of every world formed, in order
        self._listener = socket.create_server(("0.0.0.0", 0), backlog=128)
        self._closed = False
        threading.Thread(target=self._accept, name="horovod_rs-elastic-accept", daemon=True).start()
        threading.Thread(target=self._tick, name="horovod_rs-elastic-timer", daemon=True).start()

    @property
    def port(self):
        return self._listener.getsockname()[1]

    def wait(self, stop=None):
        """Blocks until the job has its results (returned) or cannot go on (raised).
        ``stop()``, polled, returns an exception to end the wait with instead (Spark gave up)."""
        with self._lock:
            while self._result is None and self._error is None:
                if stop is not None:
                    error = stop()
                    if error is not None:
                        self._fail_locked(error)
                        break
                self._lock.wait(POLL_S)
            if self._error is not None:
                raise self._error
            return self._result

    def linger(self):
        """Blocks until no task has been connected for ``LINGER_S`` (at most ``MAX_LINGER_S``)."""
        started = quiet_since = time.time()
        with self._lock:
            while time.time() - started < MAX_LINGER_S:
                if any(w.alive for w in self._workers):
                    quiet_since = time.time()
                elif time.time() - quiet_since >= LINGER_S:
                    return
                self._lock.wait(POLL_S)

    def close(self):
        with self._lock:
            self._closed = True
            if self._result is None and self._error is None:
                self._error = ElasticJobError("the elastic job was closed")
            workers, exit_message = list(self._workers), self._exit_message_locked()
        for worker in workers:
            worker.send(exit_message)
        self._listener.close()

    def _exit_message_locked(self):
        """What a task is told when the job has ended: with the verdict (``("ok", the (slot, attempt)
        of each rank's task in rank order, world sizes)`` or ``("error", message)``) when the tasks
        carry it back; each task carries its own result."""
        if not self._verdicts:
            return ("exit", None)
        if self._error is not None:
            return ("exit", ("error", str(self._error)))
        return ("exit", ("ok", [(w.slot, w.attempt) for w in self._members], list(self.worlds)))

    # The tasks' connections ------------------------------------------------------------------

    def _accept(self):
        number = 0
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            number += 1
            threading.Thread(target=self._serve, args=(connection, number), daemon=True,
                             name="horovod_rs-elastic-task").start()

    def _serve(self, connection, number):
        connection.settimeout(CONNECT_TIMEOUT_S)  # a silent stranger does not keep a thread forever
        hello = receive_hello(connection, self._token)
        if hello is None:
            connection.close()
            return
        connection.settimeout(None)
        worker = _Worker(number, connection, *hello)
        with self._lock:
            if self._result is not None or self._error is not None:
                worker.send(self._exit_message_locked())
                connection.close()
                return
            self._workers.append(worker)
        while True:
            message = receive_message(connection)
            with self._lock:
                if message is None:
                    worker.alive = False
                    worker.entry = None
                elif message[0] == "join":
                    worker.entry, worker.join_error = message[1], message[2]
                    worker.outcome = None
                elif message[0] == "done":
                    worker.outcome = message[1]
                self._step_locked()
                self._lock.notify_all()
            if message is None:
                connection.close()
                return

    def _tick(self):
        while True:
            time.sleep(POLL_S)
            with self._lock:
                if self._closed or self._result is not None or self._error is not None:
                    return
                self._step_locked()

    # Deciding the worlds (under the lock) ---------------------------------------------------

    def _running_members(self):
        return [w for w in self._members if w.alive and w.entry is None and w.outcome is None]

    def _step_locked(self):
        if self._result is not None or self._error is not None:
            return
        failed = [w for w in self._members if w.outcome is not None and not w.outcome[0] and not w.restarting]
        if failed:
            if self._running_members():
                return  # their collectives fail next: they go on to the next world, or fail too
            if not self._restart_failed_locked(failed):
                return
        if self._members and all(w.outcome is not None for w in self._members):
            self._result = [w.outcome for w in self._members]
            self._exit_everyone_else_locked()
            return
        if self._running_members():
            self._need_since = None
            self._tell_about_newcomers_locked()
            return
        if self._need_since is None:
            self._need_since = time.time()
        self._form_world_locked([w for w in self._workers if w.alive and w.entry is not None])

    def _restart_failed_locked(self, failed):
        """Members whose ``fn`` raised, once no member still runs. As in Horovod, the job goes on
        without them when others went on to the next world: their tasks fail, and Spark runs them
        again. Else (or past ``reset_limit``) it fails with the rank's traceback. Returns whether
        it goes on."""
        going_on = [w for w in self._members if w.alive and w.entry is not None]
        self._last_failure = self._rank_failed(failed)
        error = self._past_reset_limit(going_on) if going_on else self._last_failure
        if error is not None:
            self._fail_locked(error)
            return False
        for worker in failed:
            worker.restarting = True
            worker.send(("restart", str(self._last_failure)))
        return True

    def _rank_failed(self, failed):
        """The job's error when members returned failing: a rank's own failure first; a rank that
        only lost its peers (its ``fn`` did not recover: no ``hvd.elastic.run``) names them."""
        import cloudpickle

        failures = [(w, cloudpickle.loads(w.outcome[1])) for w in failed]
        worker, failure = next(((w, f) for w, f in failures if not f["consequence"]), failures[0])
        lost = [self._members.index(w) for w in self._members if not w.alive and w.outcome is None]
        after = " after losing rank(s) %s (its fn does not recover: use hvd.elastic.run)" % lost \
            if failure["consequence"] and lost else ""
        return ElasticJobError("rank %d of %d failed%s:\n%s" % (self._members.index(worker), len(self._members),
                                                                after, failure["traceback"]))

    def _tell_about_newcomers_locked(self):
        """Members of a running world learn (once per world) that a task waits to join."""
        if self._grow_told == self._generation or len(self._members) >= self.max_np:
            return
        if any(w.alive and w.entry is not None and w not in self._members for w in self._workers):
            self._grow_told = self._generation
            for member in self._running_members():
                member.send(("grow", self._generation))

    def _form_world_locked(self, waiting):
        first = self._generation < 0
        past_limit = None if first else self._past_reset_limit(waiting)
        if past_limit is not None:
            self._fail_locked(past_limit)  # known before any newcomer comes: no need to wait for one
            return
        errors = sorted({w.join_error for w in waiting if w.join_error})
        wanted = self.num_proc if first else self.min_np
        waited = time.time() - self._need_since
        timeout = self._start_timeout if first else self._elastic_timeout
        if len(waiting) < wanted:
            if first and waited >= timeout and len(waiting) >= self.min_np:
                pass  # the gang start gave up waiting for num_proc; min_num_proc will do
            elif waited >= timeout:
                self._fail_locked(self._too_few(waiting, first, timeout))
                return
            else:
                return
        # A world none of whose members could meet (every one asks again with an error) did not run.
        previous_met = not self._members or any(w in waiting and not w.join_error for w in self._members)
        self._failed_rendezvous = 0 if previous_met else self._failed_rendezvous + 1
        if self._failed_rendezvous >= FAILED_RENDEZVOUS_LIMIT:
            self._fail_locked(ElasticJobError(
                "%d worlds in a row could not rendezvous: %s" % (self._failed_rendezvous, "; ".join(errors))))
            return
        previous = [w for w in self._members if w in waiting]
        newcomers = sorted((w for w in waiting if w not in previous), key=lambda w: (w.slot, w.attempt))
        members = (previous + newcomers)[:self.max_np]
        entries = [w.entry for w in members]
        self._generation += 1
        self._members = members
        self.worlds.append(len(members))
        for rank, member in enumerate(members):
            member.entry = None
            member.send(("world", (self._generation, rank, len(members), entries)))

    def _past_reset_limit(self, waiting):
        """The job's error when it needs a new world after ``reset_limit`` resets, else None."""
        if self._reset_limit is None or self._generation < self._reset_limit:
            return None
        errors = sorted({w.join_error for w in waiting if w.join_error})
        return ElasticJobError(
            "the elastic job needs a new world after %d resets, its reset_limit; the last world had %d ranks%s%s"
            % (self._generation, len(self._members), "; its rendezvous failed: " + "; ".join(errors) if errors else "",
               self._after_failure()))

    def _too_few(self, waiting, first, timeout):
        seen = ", ".join(repr(w) for w in waiting) or "none"
        if first:
            from horovod_rs.spark.common.job import NOT_STARTED

            return ElasticJobError(NOT_STARTED +
                "only %d of min_num_proc=%d tasks started within start_timeout (%g s); tasks seen: %s. Add "
                "executors or cores, lower min_num_proc, or raise start_timeout / HOROVOD_SPARK_START_TIMEOUT"
                % (len(waiting), self.min_np, timeout, seen))
        lost = [repr(w) for w in self._members if not w.alive or w.restarting]
        return ElasticJobError(
            "%d ranks remain after losing %s, fewer than min_num_proc=%d, and no new task joined within "
            "elastic_timeout (%g s); ranks waiting: %s. The last committed state was world %d's%s"
            % (len(waiting), ", ".join(lost) or "none", self.min_np, timeout, seen, self._generation,
               self._after_failure()))

    def _after_failure(self):
        return "; before that, %s" % self._last_failure if self._last_failure is not None else ""

    def _fail_locked(self, error):
        if self._result is None and self._error is None:
            self._error = error
            self._exit_everyone_else_locked()
            self._lock.notify_all()

    def _exit_everyone_else_locked(self):
        """Tells the tasks the job ended: those still running or waiting, and, when the tasks carry
        the verdict, those that returned too (they wait for it)."""
        exit_message = self._exit_message_locked()
        for worker in self._workers:
            # (A rank that failed waits to learn whether its task is run again.)
            if worker.alive and (worker.outcome is None or self._verdicts or not worker.outcome[0]):
                worker.send(exit_message)
        self._lock.notify_all()


class Member:
    """A task's side: its connection to the coordinator, and the worlds it joins
    (``next_world``, which ``hvd.init()`` calls inside the task)."""

    def __init__(self, address, token, slot, attempt, secret, fields, env):
        self.slot, self._secret, self._fields = slot, secret, fields
        self.env = env
        host, port = address.rsplit(":", 1)
        self._connection = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        self._connection.settimeout(None)
        # The address the driver reaches this task at is the one the other executors reach it at.
        self.host = self._connection.getsockname()[0]
        self._lock = threading.Condition()
        self._inbox = []
        self._grow_generation = -1
        self._generation = -1
        self._closed = False
        send_hello(self._connection, token, slot, attempt, self.host)
        threading.Thread(target=self._read, name="horovod_rs-elastic-member", daemon=True).start()

    def _read(self):
        while True:
            message = receive_message(self._connection)
            with self._lock:
                if message is None:
                    self._closed = True
                elif message[0] == "grow":
                    self._grow_generation = message[1]
                else:
                    self._inbox.append(message)
                self._lock.notify_all()
            if message is None:
                return

    def next_world(self):
        """Joins the next world the coordinator forms; returns ``(native rank, spec)``. Raises
        ``Retired`` when the job ended first. A rendezvous that fails (a member lost while
        joining) asks for another world."""
        from horovod_rs import _native
        from horovod_rs.common import basics

        error = None
        while True:
            joining = _native.Joining()
            send_message(self._connection, ("join", "%s:%d" % (self.host, joining.port()), error))
            kind, body = self._next_message()
            if kind == "exit":
                raise Retired(body)
            self._generation, rank, size, entries = body
            spec = basics.RankSpec(rank, size, list(entries), self._secret, host=self.host, fields=self._fields)
            try:
                return joining.join(spec.to_json(), self._secret), spec
            except Exception as e:  # noqa: BLE001  (a member lost while joining: ask for another world)
                error = "rank %d of %d: %s" % (rank, size, e)

    def _next_message(self):
        from horovod_rs.common.exceptions import HorovodInternalError

        with self._lock:
            while not self._inbox:
                if self._closed:
                    raise HorovodInternalError("the elastic job's coordinator on the driver closed the connection")
                self._lock.wait()
            return self._inbox.pop(0)

    def newcomers_wait(self):
        """Whether tasks wait to join while this member's world runs."""
        with self._lock:
            return self._grow_generation == self._generation

    def finish(self, ok, payload):
        """Reports this task's outcome to the coordinator."""
        send_message(self._connection, ("done", (ok, payload)))

    def word_after_outcome(self):
        """The coordinator's word after this task's outcome: the job's verdict (``("exit",
        verdict)``), or, after a failure, ``("restart", the failure)`` when the job went on without
        this rank; None when the connection closed first."""
        from horovod_rs.common.exceptions import HorovodInternalError

        try:
            return self._next_message()
        except HorovodInternalError:
            return None

    def close(self):
        self._connection.close()


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
                  elastic_timeout=elastic_timeout, reset_limit=reset_limit)
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
        """The stage's rows once every task returned (the output the client did not get live
        printed); a ``HorovodRunError`` when Spark ended the stage. Ctrl-C cancels it."""
        from horovod_rs.spark.common.job import HorovodRunError
        from horovod_rs.spark.common.output import replay

        try:
            while self._thread.is_alive():
                self._thread.join(POLL_S)
        finally:
            self.stop()
        if self._failure is not None:
            raise HorovodRunError(str(self.failure())) from None
        for row in self._rows:
            if row["output"]:
                replay(self._output, row["slot"], row["output"])
        return self._rows

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
