"""A job survives one rank's shutdown: every rank joins again with init(), as Horovod's test
suites do between tests (run under the launcher, every rank alike)."""

import pytest
import torch

import horovod_rs.torch as hvd

hvd.init()


def test_ranks_whose_engine_another_rank_stopped_join_again_with_init():
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    if hvd.rank() == 1:
        hvd.shutdown()
    else:
        # Rank 1 never submits it, and its shutdown stops every rank's engine.
        with pytest.raises(RuntimeError, match="stopped|shut down"):
            hvd.allreduce(torch.ones(1), name="after.shutdown")
    assert not hvd.is_initialized()
    hvd.init()
    assert hvd.is_initialized()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()


def test_elastic_run_restores_the_last_commit_and_joins_again_after_a_failed_collective():
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.constant_(model.weight, float(hvd.rank()))  # rank 0's weight wins at every sync
    state = hvd.elastic.TorchState(model, epoch=0)
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(len(calls))
        with torch.no_grad():
            state.model.weight.add_(1.0)
            state.epoch += 1
            state.commit()
            state.model.weight.add_(100.0)  # not committed: gone after the failure
        if len(calls) == 1:
            hvd.allreduce(torch.ones(hvd.rank() + 1), name="elastic.disagreeing")  # fails on every rank
        return state.model.weight.item(), state.epoch

    # Attempt 1 commits 1.0 and fails; attempt 2 starts from it: 1 + 1 + 100, epoch 2.
    assert train(state) == (102.0, 2)
    assert calls == [0, 1] and hvd.is_initialized()


def test_elastic_run_lets_a_failure_through_after_the_reset_limit(monkeypatch):
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    monkeypatch.setenv("HOROVOD_RS_ELASTIC_RESET_LIMIT", "1")
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(len(calls))
        hvd.allreduce(torch.ones(hvd.rank() + 1), name="elastic.always.disagreeing")

    with pytest.raises(hvd.HorovodInternalError, match="failed again after 1 resets"):
        train(hvd.elastic.TorchState(epoch=0))
    assert calls == [0, 1]
    hvd.init()  # the last failure stopped the engine; the next tests need a job
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()
