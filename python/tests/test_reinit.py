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


def test_elastic_sampler_deals_the_unprocessed_indices_and_keeps_its_place_in_the_state():
    n, r = hvd.size(), hvd.rank()
    per_rank = -(-10 // n)
    sampler = hvd.elastic.ElasticSampler(list(range(10)), shuffle=False)
    padded = list(range(10)) + list(range(10))[:per_rank * n - 10]
    assert list(sampler) == padded[r::n] and len(sampler) == per_rank

    state = hvd.elastic.TorchState(sampler=sampler, epoch=0)
    assert state.sampler is sampler
    sampler.record_batch(0, 2)  # 2 samples on every rank
    state.commit()
    sampler.record_batch(1, 2)
    state.restore()  # back to the commit: the last batch is dealt again
    assert sampler.state_dict() == {"epoch": 0, "processed_num": 2 * n}
    rest = list(range(2 * n, 10))
    assert list(sampler) == (rest + rest[:-(-len(rest) // n) * n - len(rest)])[r::n]

    # Fewer indices left than ranks: each rank still gets a share (repeated), none is left idle.
    sampler.load_state_dict({"epoch": 0, "processed_num": 9})
    assert len(list(sampler)) == len(sampler) == 1

    # A sync takes rank 0's position (here: rank 0 ahead of the others).
    sampler.load_state_dict({"epoch": 3, "processed_num": n if r == 0 else 0})
    state.sync()
    assert sampler.state_dict() == {"epoch": 3, "processed_num": n}

    # Shuffled, every rank deals from the same order: together they cover every index once.
    shuffled = hvd.elastic.ElasticSampler(list(range(12 * n)), seed=5)
    shuffled.set_epoch(2)
    dealt = hvd.allgather_object(list(shuffled))
    assert sorted(i for part in dealt for i in part) == list(range(12 * n))
