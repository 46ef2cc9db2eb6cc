"""The elastic job's coordinator without Spark (horovod_rs.runner.elastic.coordinator): tasks are
sockets speaking its protocol, so every decision (the worlds, growth, the errors) is checked
exactly, in milliseconds."""

import socket
import threading

import cloudpickle
import pytest

from horovod_rs.runner.elastic.coordinator import (Coordinator, ElasticJobError, receive_message, send_hello,
                                                   send_message)

TOKEN = "token"


def coordinator(num_proc=2, min_np=None, max_np=None, start_timeout=60, elastic_timeout=60, reset_limit=None):
    return Coordinator(TOKEN, num_proc, min_np or num_proc, max_np or num_proc, start_timeout, elastic_timeout,
                       reset_limit)


class FakeTask:
    """A task's side of the protocol: hello, join (with a made-up address), done."""

    def __init__(self, coordinator, slot, attempt=0):
        self.slot = slot
        self.connection = socket.create_connection(("127.0.0.1", coordinator.port))
        self.connection.settimeout(30)
        send_hello(self.connection, TOKEN, slot, attempt, "127.0.0.1")

    def join(self, error=None):
        send_message(self.connection, ("join", "127.0.0.1:%d" % (1000 + self.slot), error))

    def next(self):
        """The next message from the coordinator: ("world", (generation, rank, size, entries)),
        ("hosts", (generation, notice number, HostUpdateResult)) or ("exit", None)."""
        return receive_message(self.connection)

    def done(self, result):
        send_message(self.connection, ("done", (True, cloudpickle.dumps(result))))

    def fail(self, message, consequence=False):
        payload = cloudpickle.dumps({"traceback": "Traceback ...\nValueError: %s" % message,
                                     "consequence": consequence})
        send_message(self.connection, ("done", (False, payload)))

    def die(self):
        self.connection.close()


def in_first_world(coord):
    """Two tasks that joined the coordinator's first world (of 2)."""
    a, b = FakeTask(coord, 0), FakeTask(coord, 1)
    a.join()
    b.join()
    a.next(), b.next()
    return a, b


def waiting(coord):
    """The job's outcome, from a thread: wait() blocks."""
    outcome = {}

    def wait():
        try:
            outcome["results"] = coord.wait()
        except ElasticJobError as e:
            outcome["error"] = e

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, outcome


def results(outcome):
    return [cloudpickle.loads(payload) for _, payload in outcome["results"]]


def test_the_first_world_waits_for_num_proc_and_results_come_in_rank_order():
    coord = coordinator(num_proc=2)
    thread, outcome = waiting(coord)
    a, b = FakeTask(coord, 0), FakeTask(coord, 1)
    a.join()
    b.join()
    worlds = {task.slot: task.next() for task in (a, b)}
    assert {slot: body[1:3] for slot, (_, body) in worlds.items()} == {0: (0, 2), 1: (1, 2)}
    assert worlds[0][1][3] == ["127.0.0.1:1000", "127.0.0.1:1001"]
    b.done("second")
    a.done("first")
    thread.join(10)
    assert results(outcome) == ["first", "second"]
    assert coord.worlds == [2]
    coord.close()


def test_a_lost_rank_makes_a_smaller_world_of_the_survivors_in_their_order_and_a_newcomer_grows_it():
    coord = coordinator(num_proc=3, min_np=2, max_np=3)
    thread, outcome = waiting(coord)
    tasks = [FakeTask(coord, slot) for slot in range(3)]
    for task in tasks:
        task.join()
    assert [task.next()[1][1] for task in tasks] == [0, 1, 2]
    tasks[1].die()  # its executor was lost; the others' collectives fail and they ask again
    tasks[2].join()
    tasks[0].join()
    assert [task.next()[1][1:3] for task in (tasks[0], tasks[2])] == [(0, 2), (1, 2)]
    # Spark retries the lost task: it waits to join, and the running world hears of it once.
    retried = FakeTask(coord, 1, attempt=1)
    retried.join()
    assert [task.next() for task in (tasks[0], tasks[2])] == [("hosts", (1, 1, 2)), ("hosts", (1, 1, 2))]
    tasks[0].join()
    tasks[2].join()
    worlds = [task.next()[1] for task in (tasks[0], tasks[2], retried)]
    assert [(rank, size) for _, rank, size, _ in worlds] == [(0, 3), (1, 3), (2, 3)]
    for number, task in enumerate((tasks[0], tasks[2], retried)):
        task.done(number)
    thread.join(10)
    assert results(outcome) == [0, 1, 2]
    assert coord.worlds == [3, 2, 3]
    coord.close()


def test_too_few_ranks_for_the_elastic_timeout_fail_naming_the_lost_and_the_waiting():
    coord = coordinator(num_proc=2, min_np=2, elastic_timeout=0.5)
    thread, outcome = waiting(coord)
    a, b = in_first_world(coord)
    b.die()
    a.join()
    thread.join(10)
    message = str(outcome["error"])
    assert "1 ranks remain after losing slot 1 (attempt 0, 127.0.0.1), fewer than min_num_proc=2" in message
    assert "ranks waiting: slot 0" in message
    assert a.next() == ("exit", None)
    coord.close()


def test_every_rank_lost_fails_after_the_elastic_timeout():
    coord = coordinator(num_proc=2, min_np=1, elastic_timeout=0.5)
    thread, outcome = waiting(coord)
    a, b = in_first_world(coord)
    a.die()
    b.die()
    thread.join(10)
    assert "0 ranks remain after losing slot 0 (attempt 0, 127.0.0.1), slot 1" in str(outcome["error"])
    coord.close()


def test_the_first_world_settles_for_min_num_proc_after_the_start_timeout_and_fails_below_it():
    coord = coordinator(num_proc=3, min_np=2, start_timeout=0.5)
    thread, outcome = waiting(coord)
    a, b = FakeTask(coord, 0), FakeTask(coord, 1)
    a.join()
    b.join()
    assert [task.next()[1][1:3] for task in (a, b)] == [(0, 2), (1, 2)]
    a.done(0)
    b.done(1)
    thread.join(10)
    assert results(outcome) == [0, 1]
    coord.close()

    coord = coordinator(num_proc=3, min_np=2, start_timeout=0.5)
    thread, outcome = waiting(coord)
    alone = FakeTask(coord, 0)
    alone.join()
    thread.join(10)
    assert "only 1 of min_num_proc=2 tasks started within start_timeout (0.5 s); tasks seen: slot 0" \
        in str(outcome["error"])
    coord.close()


def test_more_worlds_than_the_reset_limit_fail_with_the_rendezvous_errors():
    coord = coordinator(num_proc=2, reset_limit=1)
    thread, outcome = waiting(coord)
    a, b = FakeTask(coord, 0), FakeTask(coord, 1)
    for attempt in range(2):  # the first world and one reset
        a.join()
        b.join()
        a.next(), b.next()
    a.join("rank 0 of 2: peer unreachable")
    b.join()
    thread.join(10)
    message = str(outcome["error"])
    assert "needs a new world after 1 resets, its reset_limit" in message
    assert "rank 0 of 2: peer unreachable" in message
    coord.close()


def test_a_ranks_own_failure_ends_the_job_when_nobody_goes_on_naming_it_before_the_failures_that_follow():
    coord = coordinator(num_proc=2)
    thread, outcome = waiting(coord)
    a, b = in_first_world(coord)
    b.fail("rank 1 gives up")
    thread.join(0.5)
    assert thread.is_alive()  # rank 0 still runs: it may go on to the next world
    a.fail("a collective failed: rank 1 left", consequence=True)  # it does not recover
    thread.join(10)
    assert "rank 1 of 2 failed:" in str(outcome["error"]) and "rank 1 gives up" in str(outcome["error"])
    assert a.next() == b.next() == ("exit", None)
    coord.close()


def test_a_failed_rank_is_restarted_when_the_others_go_on_and_its_new_task_joins_as_a_newcomer():
    # Horovod's fault tolerance: the failed rank's task fails, Spark runs it again, and the world
    # the survivors wait for takes it in.
    coord = coordinator(num_proc=2)
    thread, outcome = waiting(coord)
    a, b = in_first_world(coord)
    b.fail("rank 1 gives up")
    a.join()  # its hvd.elastic.run caught the failed collective
    kind, failure = b.next()
    assert kind == "restart" and "rank 1 of 2 failed:" in failure and "rank 1 gives up" in failure
    send_message(b.connection, ("output", "stdout\tbefore giving up"))  # its attempt returns no row
    b.die()  # its task raised
    retried = FakeTask(coord, 1, attempt=1)
    retried.join()
    worlds = [task.next()[1] for task in (a, retried)]
    assert [(generation, rank, size) for generation, rank, size, _ in worlds] == [(1, 0, 2), (1, 1, 2)]
    a.done("a")
    retried.done("b")
    thread.join(10)
    assert results(outcome) == ["a", "b"] and coord.worlds == [2, 2]
    assert coord.kept_output() == [(1, "stdout\tbefore giving up")]
    coord.close()


def test_later_errors_name_the_failure_the_job_went_on_after():
    coord = coordinator(num_proc=2, elastic_timeout=0.5)
    thread, outcome = waiting(coord)
    a, b = in_first_world(coord)
    b.fail("rank 1 gives up")
    a.join()
    assert b.next()[0] == "restart"
    thread.join(10)  # no task comes back within the elastic timeout
    message = str(outcome["error"])
    assert "1 ranks remain after losing slot 1 (attempt 0, 127.0.0.1)" in message
    assert "before that, rank 1 of 2 failed:" in message and "rank 1 gives up" in message
    coord.close()

    # At its reset_limit the job ends at once, and the failed rank's task is not failed for nothing.
    coord = coordinator(num_proc=2, reset_limit=0)
    thread, outcome = waiting(coord)
    a, b = in_first_world(coord)
    b.fail("rank 1 gives up")
    a.join()
    thread.join(10)
    message = str(outcome["error"])
    assert "needs a new world after 0 resets, its reset_limit" in message and "rank 1 gives up" in message
    assert a.next() == b.next() == ("exit", None)
    coord.close()


def test_a_stranger_without_the_token_is_ignored():
    coord = coordinator(num_proc=1)
    thread, outcome = waiting(coord)
    stranger = socket.create_connection(("127.0.0.1", coord.port))
    send_hello(stranger, "wrong", 0, 0, "127.0.0.1")
    assert receive_message(stranger) is None  # closed on it
    task = FakeTask(coord, 0)
    task.join()
    assert task.next()[1][1:3] == (0, 1)
    task.done("ok")
    thread.join(10)
    assert results(outcome) == ["ok"]
    coord.close()


# A pickle a stranger sends is never unpickled: the first message must be the JSON hello.
@pytest.mark.parametrize("garbage", [b"\x00\x00\x00\x04abcd", b"\xff\xff\xff\xff", b"",
                                     b"\x00\x00\x00\x05" + b"cos\nsystem\n"[:5]])
def test_garbage_on_the_port_does_not_disturb_the_job(garbage):
    coord = coordinator(num_proc=1)
    thread, outcome = waiting(coord)
    stranger = socket.create_connection(("127.0.0.1", coord.port))
    stranger.sendall(garbage)
    stranger.close()
    task = FakeTask(coord, 0)
    task.join()
    assert task.next()[0] == "world"
    task.done(1)
    thread.join(10)
    assert results(outcome) == [1]
    coord.close()


def test_worlds_that_cannot_rendezvous_again_and_again_end_the_job_with_the_errors():
    coord = coordinator(num_proc=2)
    thread, outcome = waiting(coord)
    a, b = FakeTask(coord, 0), FakeTask(coord, 1)
    a.join()
    b.join()
    for _ in range(3):
        a.next(), b.next()
        a.join("rank 0 of 2: connection refused")
        b.join("rank 1 of 2: timed out")
    thread.join(10)
    assert str(outcome["error"]) == ("3 worlds in a row could not rendezvous: rank 0 of 2: connection refused; "
                                     "rank 1 of 2: timed out")
    coord.close()


def test_a_member_that_closes_is_gone_for_the_coordinator_while_its_process_lives(monkeypatch):
    # A coordinator in the cluster lingers until no task is connected; a Spark task's Python
    # worker outlives the task, so the member's close() itself must end the connection.
    import time

    from horovod_rs.runner.elastic import coordinator as module

    monkeypatch.setattr(module, "LINGER_S", 0.5)
    monkeypatch.setattr(module, "MAX_LINGER_S", 60)  # what linger() takes if the task still seems connected
    coord = coordinator(num_proc=1)
    member = module.Member("127.0.0.1:%d" % coord.port, TOKEN, 0, 0, secret=b"", fields=None, env={})
    try:
        deadline = time.time() + 30
        while not coord._workers and time.time() < deadline:
            time.sleep(0.05)
        assert coord._workers
    finally:
        member.close()
    started = time.time()
    coord.linger()
    coord.close()
    # Before, the connection stayed open until the process exited: linger() took its maximum.
    assert time.time() - started < 30


def test_a_verdict_carries_the_output_of_the_tasks_spark_ran_again():
    # A coordinator in the cluster: the client learns the job's outcome from the tasks' rows, and
    # a task that Spark runs again returns none.
    coord = Coordinator(TOKEN, 2, 2, 2, 60, 60, None, verdicts=True)
    thread, outcome = waiting(coord)
    a, b = in_first_world(coord)
    b.fail("rank 1 gives up")
    a.join()
    assert b.next()[0] == "restart"
    send_message(b.connection, ("output", "stderr\tTraceback ..."))
    b.die()
    retried = FakeTask(coord, 1, attempt=1)
    retried.join()
    a.next(), retried.next()
    a.done("a")
    retried.done("b")
    assert a.next() == ("exit", ("ok", [(0, 0), (1, 1)], [2, 2], [(1, "stderr\tTraceback ...")]))
    thread.join(10)
    coord.close()
