"""The driver's retry rule: a job that lost a rank outside its code runs again, a bounded number
of times; an error of the ranks' own code is never retried."""

import pytest

from horovod_rs.spark.common.job import HorovodRankLostError, HorovodRunError, fit_attempts, run_attempts


def test_a_lost_rank_runs_the_job_again_until_it_succeeds():
    calls, retries = [], []

    def run(attempt):
        calls.append(attempt)
        if attempt < 3:
            raise HorovodRankLostError("ExecutorLostFailure (executor 1 exited)")
        return "done"

    assert run_attempts(3, run, lambda attempt, error: retries.append((attempt, str(error))), "knob") == "done"
    assert calls == [1, 2, 3]
    assert [attempt for attempt, _ in retries] == [1, 2]


def test_the_last_attempt_fails_naming_the_count_and_the_knob():
    def run(attempt):
        raise HorovodRankLostError("ExecutorLostFailure")

    with pytest.raises(HorovodRankLostError, match=r"(?s)ExecutorLostFailure.*attempt 2 of 2; knob sets"):
        run_attempts(2, run, lambda *_: None, "knob")


def test_an_error_in_the_ranks_code_is_not_retried():
    calls = []

    def run(attempt):
        calls.append(attempt)
        raise HorovodRunError("rank 1 of 2 failed: ValueError")

    with pytest.raises(HorovodRunError, match="rank 1 of 2 failed"):
        run_attempts(5, run, lambda *_: pytest.fail("retried"), "knob")
    assert calls == [1]


class _Conf:
    def __init__(self, value):
        self.value = value

    def get(self, key, default):
        return default if self.value is None else self.value


class _Context:
    def __init__(self, value):
        self.conf = _Conf(value)

    def getConf(self):
        return self.conf


def test_fit_attempts_reads_the_spark_conf_and_refuses_nonsense():
    assert fit_attempts(_Context(None)) == 3
    assert fit_attempts(_Context("1")) == 1
    for bad in ("0", "-2", "three"):
        with pytest.raises(ValueError, match="spark.horovod.rs.fitAttempts must be a whole number"):
            fit_attempts(_Context(bad))
