"""The driver's retry rule: a job that lost a rank outside its code runs again, a bounded number
of times; an error of the ranks' own code is never retried."""

import pytest

from horovod_rs.spark.common.job import HorovodRankLostError, HorovodRunError, JobSettings, run_attempts


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


def test_a_result_called_not_final_runs_again_without_counting_as_a_lost_attempt():
    calls = []

    def run(attempt):
        calls.append(attempt)
        if attempt == 1:
            raise HorovodRankLostError("ExecutorLostFailure")
        return "regrow" if attempt < 4 else "done"

    again = lambda attempt, result: result == "regrow"  # noqa: E731
    assert run_attempts(2, run, lambda *_: None, "knob", again=again) == "done"
    assert calls == [1, 2, 3, 4]


def test_an_error_in_the_ranks_code_is_not_retried():
    calls = []

    def run(attempt):
        calls.append(attempt)
        raise HorovodRunError("rank 1 of 2 failed: ValueError")

    with pytest.raises(HorovodRunError, match="rank 1 of 2 failed"):
        run_attempts(5, run, lambda *_: pytest.fail("retried"), "knob")
    assert calls == [1]


class _Conf:
    def __init__(self, values):
        self._values = values

    def get(self, key, default=None):
        return self._values.get(key, default)


class _Session:
    """What JobSettings reads of a classic SparkSession: its version and its conf."""

    version = "4.3.0"

    def __init__(self, **conf):
        self.conf = _Conf(conf)


def test_job_settings_read_the_spark_conf_and_horovods_variables(monkeypatch):
    monkeypatch.delenv("HOROVOD_SPARK_START_TIMEOUT", raising=False)
    defaults = JobSettings(_Session())
    assert (defaults.fit_attempts, defaults.start_timeout, defaults.driver_rendezvous, defaults.spec) == \
        (3, 600.0, "auto", {})
    monkeypatch.setenv("HOROVOD_SPARK_START_TIMEOUT", "30")
    monkeypatch.setenv("HOROVOD_RS_TIMEOUT_SECONDS", "77")
    settings = JobSettings(_Session(**{"spark.horovod.rs.fitAttempts": "1", "spark.horovod.rs.cycleTime": "5ms",
                                       "spark.other": "x"}), env={"HOROVOD_CYCLE_TIME": "2"})
    assert (settings.fit_attempts, settings.start_timeout) == (1, 30.0)
    # A key wins over a variable; the job's env over the driver's environment.
    assert settings.spec == {"collective_timeout_ms": 77000, "engine": {"cycle_time_ms": 5}}
    for bad in ("0", "-2", "three"):
        with pytest.raises(ValueError, match='spark.horovod.rs.fitAttempts="%s"' % bad):
            JobSettings(_Session(**{"spark.horovod.rs.fitAttempts": bad}))
