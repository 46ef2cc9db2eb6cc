"""horovod_rs.spark.run_elastic on a real cluster: a rank's executor killed (SIGKILL of its JVM)
mid-run, the survivors going on from their last commit, the world growing back when Spark
restarts the executor; and the errors of a job that cannot go on. The tests taking
``coordinator_at`` run with the job's coordinator on the driver and in the cluster (where a Spark
Connect client's job has it)."""

import os
import signal
import socket
import sys
import time

import cloudpickle
import pytest

import horovod_rs.spark
from horovod_rs.spark.common.output import OutputServer

# The training functions below run on the executors, which cannot import this module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def executor_of(pid):
    """The executor JVM among ``pid``'s ancestors (a rank runs in the executor's Python worker)."""
    while pid > 1:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    return pid
            with open("/proc/%d/stat" % pid) as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return None
    return None


def counting(steps, kill_at, marker, until_regrown=False, fail_at=None, fail_marker=None):
    """A training function after Horovod's elastic examples: each step allreduces a 1 from every
    rank (the world's size), appends it to the state and commits. At step ``kill_at`` the last
    rank kills its own executor once (``marker`` records it). ``until_regrown``: go on past
    ``steps`` until the world grew back after the loss (bounded). ``fail_at``: rank 0 raises from
    that step on, once if ``fail_marker`` is given (it records it)."""

    def fn():
        import time

        import torch

        import horovod_rs.torch as hvd

        hvd.init()
        state = hvd.elastic.ObjectState(bcast_object=hvd.broadcast_object, get_rank=hvd.rank, step=0, sizes=[])

        @hvd.elastic.run
        def train(state):
            while state.step < steps or (until_regrown and not regrown(state.sizes) and state.step < 200 * steps):
                size = int(hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item())
                if fail_at is not None and state.step >= fail_at and hvd.rank() == 0 and not (
                        fail_marker and os.path.exists(fail_marker)):
                    if fail_marker:
                        open(fail_marker, "w").close()
                    print("rank 0 gives up at step %d" % state.step, flush=True)
                    raise ValueError("rank 0 gives up at step %d" % state.step)
                if state.step == kill_at and hvd.rank() == hvd.size() - 1 and not os.path.exists(marker):
                    with open(marker, "w") as f:
                        f.write(str(hvd.rank()))
                    os.kill(executor_of(os.getpid()), signal.SIGKILL)
                    time.sleep(60)  # this worker dies with its executor
                state.sizes.append(size)
                state.step += 1
                state.commit()
                time.sleep(0.05)
            return state.step, state.sizes

        return train(state)

    return fn


@pytest.fixture(params=["driver", "cluster"])
def coordinator_at(request, spark):
    spark.conf.set("spark.horovod.rs.driverRendezvous", "true" if request.param == "driver" else "false")
    yield request.param
    spark.conf.unset("spark.horovod.rs.driverRendezvous")


def coordinator_processes():
    """The pids of the in-cluster coordinators running on this machine."""
    pids = set()
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                if b"horovod_rs.spark.common.elastic_job" in f.read():
                    pids.add(int(entry))
        except (OSError, ValueError):
            pass
    return pids


def regrown(sizes):
    return min(sizes, default=0) < max(sizes, default=0) and sizes[-1] == max(sizes)


def test_a_killed_executor_shrinks_the_world_and_spark_restarting_it_grows_it_back(spark, coordinator_at, tmp_path,
                                                                                    capsys):
    marker = str(tmp_path / "killed")
    results = horovod_rs.spark.run_elastic(counting(20, 5, marker, until_regrown=True), num_proc=3, min_num_proc=2)
    assert os.path.exists(marker)
    steps, sizes = results[0]
    # No committed step lost or repeated: one size per step, every rank ends with the same state.
    assert len(sizes) == steps and steps >= 20
    assert all(result == results[0] for result in results)
    # 3 ranks, then 2 from the step the executor was lost, then 3 again when Spark restarted it.
    assert sizes[:5] == [3] * 5
    assert 2 in sizes and sizes[-1] == 3 and len(results) == 3
    shrunk_at = sizes.index(2)
    assert all(size == 2 for size in sizes[shrunk_at:sizes.index(3, shrunk_at)])
    assert "run_elastic: the world's sizes, in turn: 3 -> 2 -> 3" in capsys.readouterr().out


def test_without_a_loss_it_returns_every_ranks_result_in_rank_order(spark, coordinator_at):
    # docs/elastic.rst's training function as Horovod prints it (its Spark section has no code; this
    # is the Ray one's), with a model and a step for its "...", without torch.cuda.set_device on
    # this GPU-less host, and returning what the test checks.
    def training_fn():
        import torch

        import horovod_rs.torch as hvd

        hvd.init()
        model = torch.nn.Linear(2, 1)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        epochs, resets = 3, []

        def on_state_reset():
            resets.append(hvd.size())

        @hvd.elastic.run
        def train(state):
            for state.epoch in range(state.epoch, epochs):
                optimizer.zero_grad()
                model(torch.full((4, 2), float(hvd.rank()))).pow(2).mean().backward()
                optimizer.step()
                state.commit()

        state = hvd.elastic.TorchState(model, optimizer, batch=0, epoch=0)
        state.register_reset_callbacks([on_state_reset])
        train(state)
        return hvd.rank(), hvd.size(), state.epoch, resets, [round(float(p.sum()), 6) for p in model.parameters()]

    results = horovod_rs.spark.run_elastic(training_fn, num_proc=3)
    assert [result[:4] for result in results] == [(0, 3, 2, []), (1, 3, 2, []), (2, 3, 2, [])]
    assert results[0][4] == results[1][4] == results[2][4]  # one model: broadcast, then averaged steps


def test_a_ranks_own_exception_fails_its_task_which_spark_runs_again_and_the_job_goes_on(spark, coordinator_at,
                                                                                         tmp_path, capsys,
                                                                                         monkeypatch):
    # As Horovod's test_happy_run_elastic_fault_tolerant: the others go on from their last commit,
    # with the rank whose task Spark ran again.
    refusing = socket.socket()
    refusing.bind(("0.0.0.0", 0))  # bound, never listening: a connection to it is refused
    if coordinator_at == "cluster":
        # As from a client the executors cannot reach (Databricks serverless compute): the ranks'
        # output comes back with the job's end, the failed attempt's too (it returns no row).
        monkeypatch.setattr(OutputServer, "port", property(lambda server: refusing.getsockname()[1]))
    marker = str(tmp_path / "failed")
    try:
        results = horovod_rs.spark.run_elastic(counting(8, -1, str(tmp_path / "none"), fail_at=3,
                                                        fail_marker=marker), num_proc=3)
    finally:
        refusing.close()
    assert os.path.exists(marker)
    assert results == [(8, [3] * 8)] * 3  # every step once, in worlds of 3
    out = capsys.readouterr().out
    assert "run_elastic: the world's sizes, in turn: 3 -> 3" in out
    assert "rank 0 gives up at step 3" in out


def test_a_ranks_exception_that_repeats_ends_the_job_at_its_reset_limit_naming_it(spark, coordinator_at, tmp_path):
    with pytest.raises(Exception, match=r"(?s)needs a new world after 1 resets, its reset_limit.*"
                                        r"before that, rank 0 of 3 failed.*ValueError: rank 0 gives up at step [34]"):
        horovod_rs.spark.run_elastic(counting(10, -1, str(tmp_path / "none"), fail_at=3), num_proc=3, reset_limit=1)


def test_fewer_ranks_than_min_num_proc_after_a_loss_fail_after_the_elastic_timeout(spark, coordinator_at, tmp_path):
    # min_num_proc=3 on a cluster of 3: after the kill only 2 remain until Spark restarts the
    # executor, and elastic_timeout=0 does not wait for it.
    with pytest.raises(Exception, match=r"2 ranks remain after losing .*fewer than min_num_proc=3.*elastic_timeout"):
        horovod_rs.spark.run_elastic(counting(40, 3, str(tmp_path / "killed")), num_proc=3, elastic_timeout=0)


def test_bad_sizes_are_named_before_any_job(spark):
    with pytest.raises(ValueError, match="min_num_proc <= num_proc <= max_num_proc.*min_num_proc=4, num_proc=3"):
        horovod_rs.spark.run_elastic(lambda: None, num_proc=3, min_num_proc=4)


def test_fewer_slots_than_min_num_proc_fail_naming_them(spark):
    with pytest.raises(Exception, match="the cluster has 3 task slots for 4 processes"):
        horovod_rs.spark.run_elastic(lambda: None, num_proc=4, max_num_proc=4, min_num_proc=4, start_timeout=5)


def test_a_coordinator_in_the_cluster_leaves_after_its_verdict(spark, coordinator_at):
    if coordinator_at == "driver":
        pytest.skip("the driver's coordinator is a thread of the driver")
    before = coordinator_processes()
    assert horovod_rs.spark.run_elastic(lambda: 7, num_proc=2, max_num_proc=3) == [7, 7]
    started = coordinator_processes() - before
    assert len(started) == 1
    # It stays LINGER_S (10 s) after its last task left; 120 s allows for a slow machine.
    deadline = time.time() + 120
    while started & coordinator_processes() and time.time() < deadline:
        time.sleep(0.5)
    assert not started & coordinator_processes()
