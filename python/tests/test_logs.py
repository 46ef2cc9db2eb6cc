"""The engine's log records reach Python's logging (run under the launcher, every rank alike)."""

import logging
import time

import pytest
import torch

import horovod_rs.torch as hvd

hvd.init()


class Collected(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_engine_warnings_reach_the_horovod_rs_logger_naming_the_rank():
    collected = Collected()
    logger = logging.getLogger("horovod_rs")
    logger.addHandler(collected)
    try:
        with pytest.raises(hvd.HorovodInternalError, match="shape differs"):
            hvd.allreduce(torch.ones(hvd.rank() + 1), name="logged.mismatch")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("logged.mismatch" in r.getMessage()
                                                      for r in collected.records):
            time.sleep(0.05)
    finally:
        logger.removeHandler(collected)
    record = next(r for r in collected.records if "logged.mismatch" in r.getMessage())
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("rank %d: " % hvd.rank()), record.getMessage()
    assert record.rank == hvd.rank() and record.target.startswith("horovod_core")
