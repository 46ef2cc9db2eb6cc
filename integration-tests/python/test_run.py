"""horovod_rs.spark.run on a real local-cluster, in the Python workers."""

import re
import time

import pytest

import horovod_rs.spark
from horovod_rs.spark.run_api import HorovodRunError

# Runs of the canonical function in the stress test, ranks leaving in either order (before the fix,
# 1 run in 3 put a rank in a job of one); the two tests after it force each order.
STRESS_RUNS = 3


# Functions defined in the tests (not at module level) travel by value: the executors' Python
# workers cannot import this test module.
def sum_of_ranks_fn():
    def sum_of_ranks():
        import torch

        import horovod_rs.torch as hvd

        hvd.init()
        total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)
        return hvd.rank(), hvd.size(), float(total[0])
    return sum_of_ranks


def test_without_the_drivers_service_the_ranks_meet_at_rank_zeros_past_a_taken_port(spark, monkeypatch):
    # As from a Spark Connect client: rank 0's task hosts the rendezvous on the first of the job's
    # candidate ports it can bind. The first is taken here by something else that listens.
    import socket

    from horovod_rs import _native
    from horovod_rs.spark.common import job

    secret = b"a-known-secret-for-this-test-0123"
    monkeypatch.setattr(job, "make_secret_key", lambda: secret)
    stranger = socket.create_server(("0.0.0.0", _native.rank_zero_ports(secret)[0]))
    spark.conf.set("spark.horovod.rs.driverRendezvous", "false")
    try:
        assert horovod_rs.spark.run(sum_of_ranks_fn(), num_proc=2) == [(0, 2, 1.0), (1, 2, 1.0)]
    finally:
        spark.conf.unset("spark.horovod.rs.driverRendezvous")
        stranger.close()


def test_results_come_back_in_rank_order(spark):
    assert horovod_rs.spark.run(sum_of_ranks_fn(), num_proc=2) == [(0, 2, 1.0), (1, 2, 1.0)]


def marks_its_worker_fn(marker):
    def marks_its_worker():
        import horovod_rs

        seen = getattr(horovod_rs, marker, False)
        setattr(horovod_rs, marker, True)
        return seen
    return marks_its_worker


def test_the_next_job_runs_in_the_python_workers_of_the_last(spark):
    # A task that leaves input unread, or is cancelled, takes its Python worker down: every job
    # would start new workers and import horovod_rs and the framework again (seconds each).
    marker = "_test_marker_%d" % time.monotonic_ns()
    assert horovod_rs.spark.run(marks_its_worker_fn(marker), num_proc=2) == [False, False]
    assert horovod_rs.spark.run(marks_its_worker_fn(marker), num_proc=2) == [True, True]
    again = "_test_marker_%d" % time.monotonic_ns()
    assert horovod_rs.spark.run_elastic(marks_its_worker_fn(again), num_proc=2) == [False, False]
    assert horovod_rs.spark.run(marks_its_worker_fn(again), num_proc=2) == [True, True]


def fails_on_rank_one_fn():
    def fails_on_rank_one():
        import horovod_rs.torch as hvd

        hvd.init()
        if hvd.rank() == 1:
            raise ValueError("rank one gives up")
        return hvd.rank()
    return fails_on_rank_one


def test_a_failing_fn_fails_the_job_with_its_traceback(spark):
    with pytest.raises(HorovodRunError, match="(?s)rank 1 of 2 failed.*ValueError: rank one gives up"):
        horovod_rs.spark.run(fails_on_rank_one_fn(), num_proc=2)


def test_more_processes_than_slots_fail_within_the_start_timeout(spark):
    started = time.time()
    # Horovod's first words, which scripts match, then what is short.
    with pytest.raises(TimeoutError, match="^Timed out waiting for Spark tasks to start: the cluster has 2 task slots "
                                           "for 3 processes"):
        horovod_rs.spark.run(sum_of_ranks_fn(), num_proc=3, start_timeout=2)
    assert time.time() - started < 10


def elastic_sum_of_ranks_fn():
    def elastic_sum_of_ranks():
        import torch

        import horovod_rs.torch as hvd

        hvd.init()
        state = hvd.elastic.ObjectState(bcast_object=hvd.broadcast_object, get_rank=hvd.rank, step=0)

        @hvd.elastic.run
        def train(state):
            total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)
            print("rank %d of %d" % (hvd.rank(), hvd.size()))
            state.step += 1
            state.commit()
            return hvd.rank(), hvd.size(), float(total[0]), state.step

        return train(state)
    return elastic_sum_of_ranks


def test_run_elastic_returns_results_in_rank_order_and_its_ranks_output(spark, capsys):
    # Room for a third rank that never comes (the cluster has two slots): the job ends without it.
    results = horovod_rs.spark.run_elastic(elastic_sum_of_ranks_fn(), num_proc=2, max_num_proc=3)
    assert results == [(0, 2, 1.0, 1), (1, 2, 1.0, 1)]
    out = capsys.readouterr().out
    assert "rank 0 of 2" in out and "rank 1 of 2" in out


def test_run_elastic_names_a_failing_rank(spark):
    with pytest.raises(HorovodRunError, match="(?s)rank 1 of 2 failed.*ValueError: rank one gives up"):
        horovod_rs.spark.run_elastic(fails_on_rank_one_fn(), num_proc=2)


def placement_and_timeout_fn():
    def placement_and_timeout():
        import horovod_rs.torch as hvd
        from horovod_rs.common import basics

        hvd.init()
        return (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(),
                basics.state().rank.collective_timeout_s())
    return placement_and_timeout


def test_the_drivers_horovod_variables_reach_the_ranks_and_env_overrides_them(spark, monkeypatch):
    # Both executors of local-cluster are on one host: local ranks 0 and 1 of 2, one cross rank each.
    monkeypatch.setenv("HOROVOD_RS_TIMEOUT_SECONDS", "77")
    assert horovod_rs.spark.run(placement_and_timeout_fn(), num_proc=2) == [(0, 2, 0, 1, 77.0), (1, 2, 0, 1, 77.0)]
    results = horovod_rs.spark.run(placement_and_timeout_fn(), num_proc=2, env={"HOROVOD_RS_TIMEOUT_SECONDS": "88"})
    assert [timeout for *_, timeout in results] == [88.0, 88.0]


# Horovod's canonical Run API function. A rank's task leaves the job as soon as its function
# returns; a rank that calls init() after that must still be in the job's world, never a job of one.
def world_fn():
    def world():
        import horovod_rs.torch as hvd

        hvd.init()
        return hvd.rank(), hvd.size(), hvd.local_rank()
    return world


def test_every_rank_sees_its_jobs_world_however_the_ranks_interleave(spark):
    for _ in range(STRESS_RUNS):
        assert horovod_rs.spark.run(world_fn(), num_proc=2) == [(0, 2, 0), (1, 2, 1)]


def after_rank_one_left_fn(rank_one_raises):
    def after_rank_one_left():
        from horovod_rs.common import basics

        import horovod_rs.torch as hvd

        if basics.state().rank.rank() == 1:
            if rank_one_raises:
                raise ValueError("rank one gives up before init")
            return "rank one returned at once"
        # Rank 0 calls init() only once rank 1 has left the job (its engine says so).
        while basics.state().rank.stopped() is None:
            time.sleep(0.01)
        try:
            hvd.init()
        except Exception as e:
            return "init failed: %s: %s" % (type(e).__name__, e)
        return hvd.rank(), hvd.size(), hvd.local_rank()
    return after_rank_one_left


def test_init_after_a_peer_returned_keeps_the_jobs_world(spark):
    assert horovod_rs.spark.run(after_rank_one_left_fn(False), num_proc=2) == [(0, 2, 0), "rank one returned at once"]


def test_init_after_a_peer_failed_names_it_instead_of_starting_a_job_of_one(spark, tmp_path):
    def record(fn, path):
        def recorded():
            result = fn()
            with open(path, "w") as f:
                f.write(str(result))
            return result
        return recorded

    seen = str(tmp_path / "rank0")
    with pytest.raises(HorovodRunError, match="(?s)rank 1 of 2 failed.*ValueError: rank one gives up before init"):
        horovod_rs.spark.run(record(after_rank_one_left_fn(True), seen), num_proc=2)
    with open(seen) as f:
        assert re.fullmatch(r"init failed: HorovodInternalError: rank 0's horovod_rs job has stopped: rank 1 left the "
                            r"job \(its function failed at [0-9:]+ UTC: ValueError: rank one gives up before init\)",
                            f.read())
