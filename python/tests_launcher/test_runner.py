"""The launcher itself: rank-prefixed output, and one failing rank ends the whole job."""

import subprocess
import sys
import time

HOROVODRS = [sys.executable, "-m", "horovod_rs.runner"]


def test_output_is_prefixed_with_the_rank():
    script = "import horovod_rs.torch as hvd; hvd.init(); print('hello from', hvd.rank(), 'of', hvd.size())"
    out = subprocess.run(HOROVODRS + ["-np", "2", sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.splitlines())
    assert lines == ["[0]<stdout>:hello from 0 of 2", "[1]<stdout>:hello from 1 of 2"]


def test_a_failing_rank_stops_the_job_with_its_exit_code():
    script = "import os, sys, time; r = int(os.environ['HOROVOD_RANK']); time.sleep(60) if r == 0 else sys.exit(3)"
    started = time.time()
    out = subprocess.run(HOROVODRS + ["-np", "2", sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 3
    assert time.time() - started < 20, "the sleeping rank should have been stopped"
    assert "rank 1 exited with code 3; stopping the other ranks" in out.stderr


def test_a_rank_that_never_joins_is_a_timeout_not_a_hang():
    script = ("import os, sys; import horovod_rs.torch as hvd\n"
              "if os.environ['HOROVOD_RANK'] == '1': sys.exit(0)\n"
              "try:\n    hvd.init()\nexcept Exception as e:\n    print('init failed:', e); sys.exit(4)\n")
    env_timeout = {"HOROVOD_RS_CONNECT_TIMEOUT_SECONDS": "3"}
    out = subprocess.run(HOROVODRS + ["-np", "2", sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env={**__import__("os").environ, **env_timeout})
    assert out.returncode == 4, out.stdout + out.stderr
    assert "init failed" in out.stdout


FAKE_SSH = """#!/bin/sh
# Stands in for ssh: records the host, runs the remote script here (127.0.0.2 is this host too)
# in a fresh environment, as a login on another host would.
while [ "$#" -gt 2 ]; do shift; done
echo "$1" >> "$HOSTS_SEEN"
exec env -i HOME="$HOME" sh -c "$2"
"""


def _with_fake_ssh(tmp_path):
    ssh = tmp_path / "ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    seen = tmp_path / "hosts"
    return dict(__import__("os").environ, HOROVOD_RS_SSH=str(ssh), HOSTS_SEEN=str(seen)), seen


def test_hosts_are_filled_in_order_and_other_hosts_start_over_ssh(tmp_path):
    env, seen = _with_fake_ssh(tmp_path)
    # The stand-in runs the remote side from this environment: drop a variable that must not be
    # forwarded, to see that remote ranks get only what the launcher forwards.
    env.update(HOROVOD_TEST_KNOB="7", UNRELATED_VARIABLE="here")
    script = ("import os, torch; import horovod_rs.torch as hvd; hvd.init()\n"
              "s = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)\n"
              "key = os.environ['HOROVOD_RS_SECRET']\n"
              "argv = [open('/proc/%d/cmdline' % p).read() for p in (os.getpid(), os.getppid())]\n"
              "print(hvd.rank(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), int(s),\n"
              "      'secret on a command line' if any(key in a for a in argv) else 'ok',\n"
              "      os.environ.get('HOROVOD_TEST_KNOB'), os.environ.get('UNRELATED_VARIABLE'))\n")
    out = subprocess.run(HOROVODRS + ["-H", "localhost:1,127.0.0.2:2", "-np", "3", sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(out.stdout.splitlines()) == ["[0]<stdout>:0 0 1 0 3 ok 7 here", "[1]<stdout>:1 0 2 1 3 ok 7 None",
                                               "[2]<stdout>:2 1 2 0 3 ok 7 None"]
    assert seen.read_text().split() == ["127.0.0.2", "127.0.0.2"]


def test_a_failing_remote_rank_stops_the_job_and_the_sleeping_remote_one(tmp_path):
    env, _ = _with_fake_ssh(tmp_path)
    marker = tmp_path / "survived"
    script = ("import os, sys, time; r = int(os.environ['HOROVOD_RANK'])\n"
              "if r == 2: sys.exit(5)\n"
              "time.sleep(30); open(%r, 'w').write('still running')\n" % str(marker))
    started = time.time()
    out = subprocess.run(HOROVODRS + ["-H", "localhost:1,127.0.0.2:2", "-np", "3", sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 5, out.stdout + out.stderr
    assert "rank 2 exited with code 5" in out.stderr
    assert time.time() - started < 20
    time.sleep(1)
    assert not marker.exists()


def test_too_few_slots_is_refused_before_anything_starts():
    out = subprocess.run(HOROVODRS + ["-H", "a:1,b:2", "-np", "4", "true"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert "-np 4 needs 4 slots; -H offers 3" in out.stderr


def test_a_stalled_tensor_is_reported_on_stderr_naming_the_missing_rank():
    script = ("import time, torch; import horovod_rs.torch as hvd; hvd.init()\n"
              "time.sleep(1.5 * hvd.rank())\n"
              "hvd.allreduce(torch.ones(1), name='late')\n")
    env = dict(__import__("os").environ, HOROVOD_STALL_CHECK_TIME_SECONDS="0.3")
    out = subprocess.run(HOROVODRS + ["-np", "2", sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    warnings = [line for line in out.stderr.splitlines() if "tensor 'late' has waited" in line]
    assert warnings and warnings[0].startswith("[0]<stderr>:"), out.stderr
    assert "[horovod-rs WARN]" in warnings[0] and "for ranks [1]" in warnings[0], warnings[0]


MPI_OPERATOR_HOSTFILE = """# as Kubeflow's MPI Operator writes it (Open MPI's hostfile format)
localhost slots=1

127.0.0.2 slots=2 max_slots=2   # the second host
"""


def test_a_hostfile_places_the_ranks_and_gives_the_default_number_of_processes(tmp_path):
    env, seen = _with_fake_ssh(tmp_path)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(MPI_OPERATOR_HOSTFILE)
    script = ("import torch; import horovod_rs.torch as hvd; hvd.init()\n"
              "s = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)\n"
              "print(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(),\n"
              "      int(s))\n")
    out = subprocess.run(HOROVODRS + ["--hostfile", str(hostfile), sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    # Horovod's cross ranks: among the hosts that have a rank of the same local rank.
    assert sorted(out.stdout.splitlines()) == ["[0]<stdout>:0 3 0 1 0 2 3", "[1]<stdout>:1 3 0 2 1 2 3",
                                               "[2]<stdout>:2 3 1 2 0 1 3"]
    assert seen.read_text().split() == ["127.0.0.2", "127.0.0.2"]


def test_hosts_of_one_address_are_told_apart_by_their_names():
    # Both names are this host: each rank's HOROVOD_HOSTNAME alone makes the engine see two hosts
    # (shared memory within, TCP across), as the launcher's HOROVOD_LOCAL_* variables say.
    script = ("import os, numpy as np; from horovod_rs.common import arrays, basics; basics.init()\n"
              "s = arrays.allreduce(np.array([basics.rank() + 1.0]), op='sum')\n"
              "print(basics.rank(), os.environ['HOROVOD_HOSTNAME'], basics.local_rank(), basics.local_size(),\n"
              "      basics.cross_rank(), basics.cross_size(), os.environ['HOROVOD_LOCAL_SIZE'], int(s[0]))\n")
    out = subprocess.run(HOROVODRS + ["-H", "localhost:2,127.0.0.1:2", "-np", "4", sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(out.stdout.splitlines()) == ["[0]<stdout>:0 localhost 0 2 0 2 2 10",
                                               "[1]<stdout>:1 localhost 1 2 0 2 2 10",
                                               "[2]<stdout>:2 127.0.0.1 0 2 1 2 2 10",
                                               "[3]<stdout>:3 127.0.0.1 1 2 1 2 2 10"]


def test_horovods_spelling_and_fewer_processes_than_slots(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=4\n")
    out = subprocess.run(HOROVODRS + ["-np", "2", "-hostfile", str(hostfile), sys.executable, "-c",
                                      "import os; print(os.environ['HOROVOD_LOCAL_SIZE'])"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(out.stdout.splitlines()) == ["[0]<stdout>:2", "[1]<stdout>:2"]


def test_bad_hostfiles_are_refused_naming_the_file_and_line(tmp_path):
    hostfile = tmp_path / "hostfile"
    cases = {
        "node-0 slots=1\nnode-1 slots=two\n": "line 2 ('node-1 slots=two'): expected 'host slots=N' with N >= 1",
        "node-0 slots=0\n": "line 1 ('node-0 slots=0'): expected 'host slots=N'",
        "node-0 cpus=4\n": "line 1 ('node-0 cpus=4'): expected 'host slots=N'",
        "node-0 slots=1\nnode-0 slots=2\n": "lists node-0 twice",
        "# nothing but a comment\n\n": "names no host",
        "a slots=1\nb slots=2\n": "-np 4 needs 4 slots; hostfile %s offers 3" % hostfile,
    }
    for content, message in cases.items():
        hostfile.write_text(content)
        out = subprocess.run(HOROVODRS + ["-np", "4", "--hostfile", str(hostfile), "true"], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 2 and message in out.stderr, (content, out.stderr)
    missing = subprocess.run(HOROVODRS + ["--hostfile", str(tmp_path / "absent"), "true"], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 2 and "cannot read the hostfile" in missing.stderr, missing.stderr
    both = subprocess.run(HOROVODRS + ["-H", "a:1", "--hostfile", str(hostfile), "true"], capture_output=True,
                          text=True, timeout=60)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr, both.stderr
    no_np = subprocess.run(HOROVODRS + ["true"], capture_output=True, text=True, timeout=60)
    assert no_np.returncode == 2 and "give -np" in no_np.stderr, no_np.stderr


def test_sigterm_to_the_launcher_stops_its_ranks(tmp_path):
    import os
    import signal

    # Each rank writes its pid, then sleeps; the launcher gets SIGTERM, as from a scheduler.
    script = "import os, time; open(%r + os.environ['HOROVOD_RANK'], 'w').write(str(os.getpid())); time.sleep(120)" \
        % str(tmp_path / "pid")
    launcher = subprocess.Popen(HOROVODRS + ["-np", "2", sys.executable, "-c", script])
    deadline = time.time() + 60
    while len(list(tmp_path.iterdir())) < 2 or any(p.stat().st_size == 0 for p in tmp_path.iterdir()):
        assert time.time() < deadline, "the ranks did not start"
        time.sleep(0.1)
    pids = [int(p.read_text()) for p in tmp_path.iterdir()]
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=60) == 128 + signal.SIGTERM

    def alive(pid):
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False

    assert not any(alive(pid) for pid in pids), "ranks outlived their launcher"


def test_encrypted_links_give_the_same_results_and_a_bad_setting_is_named():
    # HOROVOD_RS_TLS reaches the binding through the ranks' environment, as spark.executorEnv does.
    script = ("import numpy as np, horovod_rs.torch as hvd, torch; hvd.init()\n"
              "x = torch.arange(100000, dtype=torch.float32) * (hvd.rank() + 1)\n"
              "y = hvd.allreduce(x, op=hvd.Sum)\n"
              "assert torch.equal(y, torch.arange(100000, dtype=torch.float32) * 3), y[:4]\n"
              "print('ok', hvd.rank())")
    env = {**__import__("os").environ, "HOROVOD_RS_TLS": "1"}
    out = subprocess.run(HOROVODRS + ["-np", "2", sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["[0]<stdout>:ok 0", "[1]<stdout>:ok 1"]

    env["HOROVOD_RS_TLS"] = "sometimes"
    out = subprocess.run(HOROVODRS + ["-np", "2", sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode != 0
    assert 'HOROVOD_RS_TLS="sometimes": expected 1 or 0' in out.stdout + out.stderr


def test_horovodruns_options_reach_the_ranks_or_are_refused_naming_why():
    show = ("import os; print(' '.join(os.environ.get(k, '-') for k in ('HOROVOD_FUSION_THRESHOLD', "
            "'HOROVOD_CYCLE_TIME', 'HOROVOD_CACHE_CAPACITY', 'HOROVOD_LOG_LEVEL', "
            "'HOROVOD_RS_CONNECT_TIMEOUT_SECONDS')))")
    options = ["--gloo", "--verbose", "--network-interface", "eth0", "--fusion-threshold-mb", "32",
               "--cycle-time-ms", "2.5", "--disable-cache", "--log-level", "debug", "--start-timeout", "30"]
    out = subprocess.run(HOROVODRS + ["-np", "2"] + options + [sys.executable, "-c", show],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(out.stdout.splitlines()) == ["[%d]<stdout>:33554432 2.5 0 DEBUG 30" % r for r in range(2)]

    for refused, why in ((["--reset-limit", "2"], "an elastic job's"),
                         (["--mpi"], "without MPI"), (["--output-filename", "logs"], "output_filename")):
        out = subprocess.run(HOROVODRS + ["-np", "2"] + refused + [sys.executable, "-c", "print('ran')"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and why in out.stderr and "ran" not in out.stdout, refused
