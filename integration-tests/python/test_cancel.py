"""Cancelling a running job from the client: Ctrl-C (SIGINT) or ``spark.interruptAll()`` stops the
barrier job and every rank within 10 s, and leaves no shared-memory segment behind, from a
classic session and from a Spark Connect one."""

import glob
import os
import signal
import threading
import time

import pytest

import horovod_rs.spark
from horovod_rs.spark.common.session import is_connect, spark_version
from horovod_rs.spark.run_api import HorovodRunError

SHM_SEGMENTS = "/dev/shm/horovod-rs-*"
# What the issue promises; a rank notices cancellation within Spark's task kill timeout (2 s).
STOP_WITHIN_S = 10


def beating_fn(beats):
    """Every rank allreduces forever, touching ``beats/<rank>`` after each step."""
    def beating():
        import torch

        import horovod_rs.torch as hvd

        hvd.init()
        path = os.path.join(beats, str(hvd.rank()))
        while True:
            hvd.allreduce(torch.ones(1), name="beat")
            with open(path, "w") as f:
                f.write(str(time.time()))
    return beating


def _when_every_rank_beats(beats, ranks, action):
    def wait_then_act():
        while len(os.listdir(beats)) < ranks:
            time.sleep(0.05)
        action()

    threading.Thread(target=wait_then_act, daemon=True).start()


def _last_beat(beats):
    return max(os.path.getmtime(os.path.join(beats, name)) for name in os.listdir(beats))


def _assert_ranks_stop(beats, segments_before):
    cancelled = time.time()
    while time.time() - _last_beat(beats) < 1.0 and time.time() - cancelled < STOP_WITHIN_S:
        time.sleep(0.1)
    assert time.time() - _last_beat(beats) >= 1.0, "a rank still runs %.0f s after the cancel" % STOP_WITHIN_S
    assert _last_beat(beats) - cancelled < STOP_WITHIN_S
    deadline = time.time() + STOP_WITHIN_S
    while set(glob.glob(SHM_SEGMENTS)) - segments_before and time.time() < deadline:
        time.sleep(0.1)
    assert not set(glob.glob(SHM_SEGMENTS)) - segments_before


def test_ctrl_c_in_the_client_cancels_the_job_and_stops_every_rank(spark, tmp_path):
    beats = str(tmp_path)
    segments_before = set(glob.glob(SHM_SEGMENTS))
    _when_every_rank_beats(beats, 2, lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        horovod_rs.spark.run(beating_fn(beats), num_proc=2)
    _assert_ranks_stop(beats, segments_before)
    # The cluster is free again for the next job.
    assert horovod_rs.spark.run(lambda: "after", num_proc=2) == ["after", "after"]


def test_interrupt_all_cancels_the_job_and_stops_every_rank(spark, tmp_path):
    if not is_connect(spark) and spark_version(spark) < (4, 0):
        pytest.skip("Spark 3.5's classic session has no interruptAll")
    beats = str(tmp_path)
    segments_before = set(glob.glob(SHM_SEGMENTS))
    _when_every_rank_beats(beats, 2, spark.interruptAll)
    with pytest.raises(HorovodRunError, match="failed in Spark"):
        horovod_rs.spark.run(beating_fn(beats), num_proc=2)
    _assert_ranks_stop(beats, segments_before)
