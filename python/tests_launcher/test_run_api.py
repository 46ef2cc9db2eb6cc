"""horovod_rs.run (Horovod's horovod.run): a function run as a job's ranks, results back in rank order."""

import os
import socket
import time

import pytest

import horovod_rs
from horovod_rs.runner.task_data import TaskDataServer, fetch_call
from test_runner import _with_fake_ssh


def test_results_come_back_in_rank_order_from_this_host_and_over_ssh(tmp_path, monkeypatch):
    env, seen = _with_fake_ssh(tmp_path)
    for key in ("HOROVOD_RS_SSH", "HOSTS_SEEN"):
        monkeypatch.setenv(key, env[key])

    def fn(a, b, c=0):
        import torch

        import horovod_rs.torch as hvd

        hvd.init()
        total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)
        return {"rank": hvd.rank(), "size": hvd.size(), "sum": int(total), "args": a + b + c}

    results = horovod_rs.run(fn, (1, 20), {"c": 300}, num_proc=3, hosts="localhost:1,127.0.0.2:2")
    assert results == [{"rank": r, "size": 3, "sum": 3, "args": 321} for r in range(3)]
    assert seen.read_text().split() == ["127.0.0.2", "127.0.0.2"]  # ranks 1 and 2 started over ssh


def test_a_failing_rank_ends_the_job_naming_it():
    def fn():
        import time

        import horovod_rs.torch as hvd

        hvd.init()
        if hvd.rank() == 1:
            raise RuntimeError("rank one fails on purpose")
        time.sleep(120)  # stopped by the launcher long before

    started = time.time()
    with pytest.raises(RuntimeError, match="Horovod detected that one or more processes exited.*\nProcess name: 1"):
        horovod_rs.run(fn, np=2)
    assert time.time() - started < 60


def test_a_rank_that_exits_without_returning_is_named():
    def fn():
        import os

        if os.environ["HOROVOD_RANK"] == "1":
            os._exit(0)
        return "rank 0's"

    with pytest.raises(RuntimeError, match="rank 1 ended without a result"):
        horovod_rs.run(fn, num_proc=2)


@pytest.mark.parametrize("options", [{"use_mpi": True}, {"min_num_proc": 1}, {"hosts": "a:1", "hostfile": "hosts"},
                                     {"output_filename": "out"}, {"reset_limit": 2}])
def test_what_horovod_rs_does_not_run_is_refused_before_anything_starts(options):
    with pytest.raises(ValueError):
        horovod_rs.run(lambda: None, num_proc=2, **options)


def test_the_call_is_served_only_to_the_jobs_ranks():
    secret = os.urandom(32)
    server = TaskDataServer(secret, b"the call", 2)
    try:
        address = "127.0.0.1:%d" % server.port()
        assert fetch_call(address, secret) == b"the call"
        with socket.create_connection(("127.0.0.1", server.port()), timeout=10) as stranger:
            stranger.sendall(os.urandom(32) + b"F")
            stranger.shutdown(socket.SHUT_WR)
            assert stranger.recv(100) == b""  # no answer: the connection just closes
    finally:
        server.close()
