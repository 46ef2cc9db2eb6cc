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
