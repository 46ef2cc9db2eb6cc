"""The elastic job's coordinator and its members: the worlds of an elastic job, decided in one
process that outlives any rank (``horovod_rs.spark.run_elastic``'s driver, or ``horovodrs``'s
elastic launcher).

- a task (a rank's process) connects to the coordinator and stays connected while it runs (a
  connection that closes is a rank lost);
- to join a world, a task opens a rendezvous listener and sends its address; the coordinator
  forms a world (a *generation*) once every running member of the last one asked for the next,
  ranks in the order of the last world, newcomers after them (by slot), at most ``max_num_proc``, at least
  ``min_num_proc`` (else it waits ``elastic_timeout``), and sends each member its rank and
  everyone's address. A launcher that plans the worlds itself (``plan``) names the slots the next
  world waits for;
- when a task waits to join (or the launcher's hosts changed), the coordinator tells the running
  world's members, whose next ``state.commit()`` raises ``HostsUpdatedInterrupt`` (on every rank
  at the same commit: rank 0's view is broadcast);
- a member's result or failure travels back over its connection; the coordinator has the job's
  results when every member of a world has returned.
"""

import hmac
import json
import pickle
import socket
import struct
import threading
import time

from horovod_rs.runner.elastic.constants import RESET_LIMIT_EXCEEDED_MESSAGE
from horovod_rs.runner.elastic.worker import HostUpdateResult, notification_manager

POLL_S = 0.2
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
# A first world that never formed: the error's first words, and what to do about it.
NOT_STARTED = ("Timed out waiting for the processes to start: ",
               "Start more processes, lower min_num_proc, or raise start_timeout.")


class ElasticJobError(RuntimeError):
    """The elastic job cannot go on: too few ranks, ``reset_limit`` exceeded, or a rank failed."""


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
                 verdicts=False, not_started=NOT_STARTED):
        self._token = token
        self._verdicts = verdicts  # whether the tasks take the job's verdict back to the client
        self._not_started = not_started  # how a first world that never formed is reported, and the remedy
        self.num_proc, self.min_np, self.max_np = num_proc, min_np, max_np
        self._start_timeout, self._elastic_timeout, self._reset_limit = start_timeout, elastic_timeout, reset_limit
        self._lock = threading.Condition()
        self._workers = []
        self._members = []  # the current world, in rank order
        self._generation = -1
        self._grow_told = -1  # the generation whose members were told newcomers wait
        self._notices = 0  # notices sent that a world should change
        self._failed_rendezvous = 0  # worlds in a row whose members could not meet
        self._need_since = time.time()  # since when a world is needed and none runs
        self._result = self._error = None
        self._last_failure = None  # the last rank's own failure the job went on after, for its errors
        self.worlds = []  # the size of every world formed, in order
        # What the tasks Spark runs again left unprinted ([(slot, output)]): their rows never reach the client.
        self._kept_output = []
        self._plan = None  # a launcher's: the slots the next world waits for, in its order
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
        # A thread blocked in accept() keeps a closed listener accepting (and its port may be
        # bound again by the next job's coordinator): shutdown() ends the accept first.
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()

    def _exit_message_locked(self):
        """What a task is told when the job has ended: with the verdict (``("ok", the (slot, attempt)
        of each rank's task in rank order, world sizes, kept output)`` or ``("error", message, kept
        output)``) when the tasks carry it back; each task carries its own result."""
        if not self._verdicts:
            return ("exit", None)
        if self._error is not None:
            return ("exit", ("error", str(self._error), list(self._kept_output)))
        return ("exit", ("ok", [(w.slot, w.attempt) for w in self._members], list(self.worlds),
                         list(self._kept_output)))

    # What a launcher that plans the worlds says (``horovodrs``'s elastic driver) ---------------

    def plan(self, slots):
        """The slots the next world waits for, in rank order: ``[(slot, when its process
        started)]``. Each has ``start_timeout`` (from its start, or from when the world was
        needed if later) to ask to join; then ``min_num_proc`` of them do. Tasks of other slots
        are left out."""
        with self._lock:
            self._plan = dict(slots)
            self._step_locked()

    def notify(self, update):
        """Tells the running world's members that the hosts changed (``HostUpdateResult``): their
        next commit raises ``HostsUpdatedInterrupt``."""
        with self._lock:
            self._notify_locked(update)

    def kept_output(self):
        """What the tasks that Spark ran again did not get to print: ``[(slot, output)]``, in
        ``forward_output.undelivered``'s form."""
        with self._lock:
            return list(self._kept_output)

    def finished(self):
        """Whether the job has its results or its error."""
        with self._lock:
            return self._result is not None or self._error is not None

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
                elif message[0] == "output":
                    self._kept_output.append((worker.slot, message[1]))
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
        """Members of a running world learn (once per world) that a task waits to join (with a
        launcher's plan, a planned one)."""
        if self._grow_told == self._generation or len(self._members) >= self.max_np:
            return
        if any(w.alive and w.entry is not None and w not in self._members
               and (self._plan is None or w.slot in self._plan) for w in self._workers):
            self._grow_told = self._generation
            self._notify_locked(HostUpdateResult.added)

    def _notify_locked(self, update):
        """Tells the running world's members it should change (``update``: a ``HostUpdateResult``).
        Notices are numbered, so that a member tells a new one from one it has seen."""
        self._notices += 1
        for member in self._running_members():
            member.send(("hosts", (self._generation, self._notices, int(update))))

    def _form_world_locked(self, waiting):
        first = self._generation < 0
        past_limit = None if first else self._past_reset_limit(waiting)
        if past_limit is not None:
            self._fail_locked(past_limit)  # known before any newcomer comes: no need to wait for one
            return
        waiting = self._ready_locked(waiting, first)
        if waiting is None:
            return
        errors = sorted({w.join_error for w in waiting if w.join_error})
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

    def _ready_locked(self, waiting, first):
        """The tasks to form the next world of, once it may form (else None; it fails the job when
        waiting is over): the first world waits for ``num_proc`` tasks (then, after
        ``start_timeout``, ``min_num_proc`` do), later ones for ``min_num_proc``; with a launcher's
        plan, for every planned slot (then, after the timeout, ``min_num_proc`` of them do)."""
        waited = time.time() - self._need_since
        timeout = self._start_timeout if first else self._elastic_timeout
        if self._plan is not None:
            if len(self._plan) < self.min_np:
                return None  # the launcher waits for hosts (its elastic_timeout)
            order = list(self._plan)
            waiting = sorted((w for w in waiting if w.slot in self._plan), key=lambda w: order.index(w.slot))
            arrived = {w.slot for w in waiting}
            # A planned process runs or starts: it has start_timeout to ask to join.
            late = [slot for slot, started in self._plan.items()
                    if slot not in arrived and time.time() - max(started, self._need_since) >= self._start_timeout]
            if len(arrived) + len(late) < len(self._plan):
                return None
            if len(waiting) >= self.min_np:
                return waiting
            timeout, waited = self._start_timeout, self._start_timeout
        elif len(waiting) >= (self.num_proc if first else self.min_np) or \
                (first and waited >= timeout and len(waiting) >= self.min_np):
            return waiting  # (past start_timeout, the gang start gave up on num_proc: min_num_proc will do)
        if waited >= timeout:
            self._fail_locked(self._too_few(waiting, first, timeout))
        return None

    def _past_reset_limit(self, waiting):
        """The job's error when it needs a new world after ``reset_limit`` resets, else None."""
        if self._reset_limit is None or self._generation < self._reset_limit:
            return None
        errors = sorted({w.join_error for w in waiting if w.join_error})
        return ElasticJobError(
            RESET_LIMIT_EXCEEDED_MESSAGE.format(self._reset_limit) +
            " (the elastic job needs a new world after %d resets, its reset_limit; the last world had %d ranks%s%s)"
            % (self._generation, len(self._members), "; its rendezvous failed: " + "; ".join(errors) if errors else "",
               self._after_failure()))

    def _too_few(self, waiting, first, timeout):
        seen = ", ".join(repr(w) for w in waiting) or "none"
        if first:
            prefix, remedy = self._not_started
            return ElasticJobError("%sonly %d of min_num_proc=%d tasks started within start_timeout (%g s); tasks "
                                   "seen: %s. %s" % (prefix, len(waiting), self.min_np, timeout, seen, remedy))
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

    def __init__(self, address, token, slot, attempt, secret, fields, env, launched=False, label=None):
        self.slot, self._secret, self._fields = slot, secret, fields
        self.env = env
        self.launched = launched  # a process horovodrs started, not a Spark task
        host, port = address.rsplit(":", 1)
        self._connection = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        self._connection.settimeout(None)
        # The address the driver reaches this task at is the one the other executors reach it at.
        self.host = self._connection.getsockname()[0]
        self._lock = threading.Condition()
        self._inbox = []
        self._notice = None  # (generation, timestamp, HostUpdateResult): the last word that the world should change
        self._generation = -1
        self._closed = False
        # How the coordinator's errors name this task: its address, or the launcher's host[local rank].
        send_hello(self._connection, token, slot, attempt, label or self.host)
        threading.Thread(target=self._read, name="horovod_rs-elastic-member", daemon=True).start()

    def _read(self):
        while True:
            message = receive_message(self._connection)
            with self._lock:
                if message is None:
                    self._closed = True
                elif message[0] == "hosts":  # (tasks wait to join world generation, or its hosts changed)
                    generation, timestamp, update = message[1]
                    self._notice = (generation, timestamp, HostUpdateResult(update))
                else:
                    self._inbox.append(message)
                self._lock.notify_all()
            if message is not None and message[0] == "hosts":
                notification_manager.handle_hosts_updated(timestamp, HostUpdateResult(update))
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

    def notice(self):
        """``(timestamp, HostUpdateResult)`` when this member's running world should change (tasks
        wait to join it, or the launcher's hosts changed), else None. Kept until the next world,
        so that a state that was not listening when it came still hears it."""
        with self._lock:
            if self._notice is not None and self._notice[0] == self._generation:
                return self._notice[1:]
            return None

    def finish(self, ok, payload):
        """Reports this task's outcome to the coordinator."""
        send_message(self._connection, ("done", (ok, payload)))

    def keep_output(self, undelivered):
        """Leaves what this task could not print with the coordinator, which hands it to the
        client with the job's verdict (a task Spark runs again returns no row)."""
        if undelivered:
            try:
                send_message(self._connection, ("output", undelivered))
            except OSError:
                pass  # the coordinator is gone: the job ended, and the lines stay in the executor's log

    def finish_at_exit(self):
        """For a process ``horovodrs`` started: reports its end as a success when the interpreter
        exits, unless an uncaught exception ended it (then the closed connection tells)."""
        import atexit
        import sys

        failed = []
        previous_hook = sys.excepthook

        def note_failure(*exc_info):
            failed.append(True)
            previous_hook(*exc_info)

        def report():
            if not failed:
                try:
                    self.finish(True, None)
                except OSError:
                    pass  # the coordinator is gone: the job ended

        sys.excepthook = note_failure
        atexit.register(report)

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
        # The reader thread is blocked in recv(), which keeps a merely closed socket open (the
        # coordinator would see this task connected until its process exits): shut it down first.
        try:
            self._connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._connection.close()
