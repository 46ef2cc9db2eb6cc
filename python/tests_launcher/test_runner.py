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
