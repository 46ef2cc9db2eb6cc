"""horovodrs's elastic runs (horovod_rs.runner.elastic): hosts from a discovery script joining and
leaving a running job, a failing process's host set aside, and the job's end and errors."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from horovod_rs.runner.elastic import discovery
from horovod_rs.runner.elastic.worker import HostUpdateResult

HOROVODRS = [os.path.join(os.path.dirname(sys.executable), "horovodrs")]

# A training loop in Horovod's elastic shape. Rank 0 logs each epoch's world; it changes the hosts
# file the discovery script prints as the test's schedule says, then waits for the driver's notice.
TRAIN = r"""
import json, os, sys, time
import torch
import horovod_rs.torch as hvd

logfile, hostsfile, schedule, fail_at = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
hvd.init()
start_rank = int(os.environ["HOROVOD_RANK"])
model = torch.nn.Linear(2, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                      named_parameters=model.named_parameters())

@hvd.elastic.run
def train(state):
    while state.epoch < 4:
        if [state.epoch, start_rank] == fail_at:
            raise RuntimeError("start rank %d fails in epoch %d" % (start_rank, state.epoch))
        for _ in range(5):
            optimizer.zero_grad()
            model(torch.ones(4, 2)).sum().backward()
            optimizer.step()
            state.steps += 1
            state.commit()
        if hvd.rank() == 0:
            with open(logfile, "a") as f:
                f.write(json.dumps({"epoch": state.epoch, "size": hvd.size(), "steps": state.steps,
                                    "start_rank": start_rank, "host": os.environ["HOROVOD_HOSTNAME"]}) + "\n")
            hosts = schedule.get(str(state.epoch + 1))
            if hosts is not None:
                with open(hostsfile, "w") as f:
                    f.write("\n".join(hosts) + "\n")
                deadline = time.time() + 60
                while state._host_messages.empty() and time.time() < deadline:
                    time.sleep(0.05)
        state.epoch += 1
        state.commit()

train(hvd.elastic.TorchState(model, optimizer, epoch=0, steps=0))
"""


def write_script(tmp_path, name, text, executable=False):
    path = tmp_path / name
    path.write_text(text)
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def elastic_run(tmp_path, options, schedule, fail_at=None, first_hosts=("localhost:2",)):
    hostsfile = write_script(tmp_path, "hosts", "\n".join(first_hosts) + "\n")
    discover = write_script(tmp_path, "discover.sh", "#!/bin/sh\ncat %s\n" % hostsfile, executable=True)
    train = write_script(tmp_path, "train.py", TRAIN)
    logfile = str(tmp_path / "log")
    out = subprocess.run(HOROVODRS + options + ["--host-discovery-script", discover, sys.executable, train, logfile,
                                                hostsfile, json.dumps(schedule), json.dumps(fail_at)],
                         capture_output=True, text=True, timeout=600)
    epochs = [json.loads(line) for line in open(logfile)] if os.path.exists(logfile) else []
    return out, epochs


def test_hosts_join_and_a_failing_hosts_processes_leave_while_the_job_goes_on(tmp_path):
    # Epoch 0 on localhost's 2 slots; 127.0.0.1 joins with 1 (a world of 3 from epoch 1); its
    # process fails in epoch 2: 127.0.0.1 is set aside and the job ends on localhost's 2.
    out, epochs = elastic_run(tmp_path, ["-np", "2", "--min-np", "2", "--max-np", "4"],
                              schedule={"1": ["localhost:2", "127.0.0.1:1"]}, fail_at=[2, 2])
    assert out.returncode == 0, out.stdout + out.stderr
    assert [e["size"] for e in epochs] == [2, 3, 2, 2], epochs
    assert "127.0.0.1[0] exited with code 1; its host 127.0.0.1 leaves the job" in out.stdout
    # Rank 0 stayed the first process, and the state went on from each world's last commit.
    assert {e["start_rank"] for e in epochs} == {0} and [e["steps"] for e in epochs] == [5, 10, 15, 20]


def test_a_job_whose_every_process_fails_ends_with_horovods_message(tmp_path):
    out, epochs = elastic_run(tmp_path, ["-np", "1", "--min-np", "1"], schedule={}, fail_at=[0, 0],
                              first_hosts=("localhost:1",))
    assert out.returncode == 1
    assert "Horovod detected that one or more processes exited with non-zero status" in out.stderr
    assert "Process name: localhost[0]" in out.stderr and "start rank 0 fails in epoch 0" in out.stdout + out.stderr
    assert epochs == []


def test_an_elastic_function_returns_its_last_worlds_results_in_rank_order(tmp_path):
    import horovod_rs

    def fn(base):
        import horovod_rs.torch as hvd

        hvd.init()
        return base + hvd.rank()

    discover = write_script(tmp_path, "discover.sh", "#!/bin/sh\necho localhost:2\n", executable=True)
    assert horovod_rs.run(fn, args=(10,), num_proc=2, min_num_proc=2, host_discovery_script=discover) == [10, 11]


def test_elastic_options_are_checked_before_anything_starts(tmp_path):
    for options, why in ((["--reset-limit", "1"], "an elastic job's"),
                         (["--min-np", "2", "-H", "localhost:2"], "fewer than 2 hosts"),
                         (["--min-np", "2", "-H", "localhost:1,127.0.0.1:1", "--blacklist-cooldown-range", "0", "5"],
                          "cooldown range")):
        out = subprocess.run(HOROVODRS + ["-np", "2"] + options + [sys.executable, "-c", "print('ran')"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert out.returncode in (1, 2) and why in out.stderr and "ran" not in out.stdout, (options, out.stderr)


def test_discovery_reads_hosts_in_order_and_sets_aside_failed_ones_for_their_cooldown(tmp_path):
    script = write_script(tmp_path, "discover.sh", "#!/bin/sh\necho b:2\necho a\necho\n", executable=True)
    assert list(discovery.HostDiscoveryScript(script, 3).find_available_hosts_and_slots().items()) == \
        [("b", 2), ("a", 3)]
    bad = write_script(tmp_path, "bad.sh", "#!/bin/sh\necho b:two\n", executable=True)
    with pytest.raises(ValueError, match="printed 'b:two'"):
        discovery.HostDiscoveryScript(bad, 1).find_available_hosts_and_slots()
    failing = write_script(tmp_path, "failing.sh", "#!/bin/sh\nexit 3\n", executable=True)
    with pytest.raises(RuntimeError, match="Exit code: 3"):
        discovery.HostDiscoveryScript(failing, 1).find_available_hosts_and_slots()

    fixed = discovery.FixedHosts({"a": 1})
    hosts = discovery.HostManager(fixed, cooldown_range=(1, 2))
    assert hosts.update_available_hosts() == HostUpdateResult.added and hosts.current_hosts == [("a", 1)]
    fixed.set({"b": 2, "a": 1})
    assert hosts.update_available_hosts() == HostUpdateResult.added
    assert hosts.current_hosts == [("a", 1), ("b", 2)]  # older hosts first
    hosts.blacklist("a")
    assert hosts.current_hosts == [("b", 2)]
    fixed.set({"b": 1, "a": 1})
    assert hosts.update_available_hosts() == HostUpdateResult.removed
    deadline = time.time() + 60
    while hosts.update_available_hosts() != HostUpdateResult.added:  # the cooldown: 2 to 3 s at first
        assert time.time() < deadline
        time.sleep(0.1)
    assert hosts.current_hosts == [("a", 1), ("b", 1)]
