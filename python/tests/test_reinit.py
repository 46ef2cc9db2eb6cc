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
