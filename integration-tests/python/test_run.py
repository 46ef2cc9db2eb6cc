"""horovod_rs.spark.run on a real local-cluster, in the Python workers."""

import time

import pytest

import horovod_rs.spark
from horovod_rs.spark.run_api import HorovodRunError


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


def test_results_come_back_in_rank_order(spark):
    assert horovod_rs.spark.run(sum_of_ranks_fn(), num_proc=2) == [(0, 2, 1.0), (1, 2, 1.0)]


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
    with pytest.raises(TimeoutError, match="the cluster has 2 task slots for 3 processes"):
        horovod_rs.spark.run(sum_of_ranks_fn(), num_proc=3, start_timeout=2)
    assert time.time() - started < 10


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
