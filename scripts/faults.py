"""The fault suite: N trials of each kind of fault on 2-rank jobs under ``horovodrs``, one table.

    python scripts/faults.py [--trials 20] [--spark-trials N] [--timeout 5] [--kinds kill,stop,...]
                             [--skip kind,...] [--check]

Kinds (rank 1 is the victim; scripts/fault_rank.py is what the ranks run):
  kill            rank 1 is killed with SIGKILL in the middle of its allreduces
  stop            rank 1 is frozen with SIGSTOP, past the collective timeout
  never-submits   rank 1 stops submitting (sleeps) while rank 0 waits on an allreduce
  mismatch        the ranks submit one tensor under the same name with different shapes
  stranger-*      while the ranks meet, three clients that are not ranks connect to the
                  rendezvous port and send nothing (silent), random bytes (garbage), an
                  enormous length prefix (huge-length), or make a real handshake with another
                  secret (wrong-secret); the job must finish untouched
  spark-driver-killed
                  a PySpark driver (scripts/fault_spark_driver.py) runs a Run API job of 2
                  ranks on local-cluster[2,1,1024]; once both ranks are in their collectives
                  the driver's Python process is killed with SIGKILL; its JVM, the executors,
                  their Python workers and the ranks' engines must all end (a clean error)
  spark-executor-killed
                  the same Run API job, of a fixed number of allreduces with max_attempts=2;
                  once both ranks allreduce an executor JVM is killed with SIGKILL; the job must
                  run again on the executor Spark starts instead and finish
  spark-elastic-executor-killed, spark-elastic-killed-in-commit, spark-elastic-grow,
  spark-elastic-worker-lost
                  a run_elastic job of 3 ranks on local-cluster[3,1,1024] counting committed steps
                  (scripts/fault_spark_driver.py elastic-*): the last rank kills its executor JVM
                  with SIGKILL at step 5, in its collectives or halfway through commit(); or the
                  job starts with 2 ranks while another job holds the third slot and must grow
                  to 3 when it frees; or, on a standalone cluster of 3 one-core workers, the last
                  rank kills its worker and executor JVMs, so the slot never comes back. The job
                  must finish with every step counted exactly once (no committed step lost or
                  repeated) and the world's sizes as expected
  spark-elastic-in-cluster
                  spark-elastic-executor-killed with the job's coordinator in a process on an
                  executor (as under Spark Connect; spark.horovod.rs.driverRendezvous=false),
                  which must be gone too once the job ended
  spark-fit-worker-lost
                  a KerasEstimator fit of 4 epochs with 2 ranks on a standalone cluster of 2
                  one-core workers, spark.horovod.rs.fitMinProcesses=1: after epoch 2 rank 1 kills
                  its worker and executor JVMs, so the slot never comes back; the fit must go on
                  from its last checkpoint with the 1 rank left and end with 4 epochs and a model
                  that predicts
  spark-fit-grow  the same fit on local-cluster[2,1,1024]: early in epoch 2 rank 1 kills its
                  executor JVM, which local-cluster restarts; the fit must go on with the 1 rank left and,
                  once the driver sees the slot back, stop after that epoch and end on 2 ranks
                  (retries: rank lost after epoch 1 on 1 rank, slots back after epoch 2 on 2)
  spark-executor-killed-mid-checkpoint
                  a KerasEstimator fit of 4 epochs with a store; rank 0, which writes the
                  checkpoints, and its executor JVM are killed with SIGKILL as soon as a
                  checkpoint is being written to the store (its temporary file exists); the fit
                  must resume from the last complete checkpoint and end with 4 epochs and a
                  model that predicts

Each trial is classified: finished (every rank finished; the goal for strangers), clean error
(every surviving rank failed with an error naming rank 1, or naming the mismatch, within 2x the
timeout; the goal for the others), unexpected (another outcome), hang (the job outlived 2x the
timeout plus start-up), crash (a surviving rank ended without reporting: it died), leak (a
process of the trial or a shared-memory segment outlived the job). --check exits 1 unless hangs,
crashes, leaks and unexpected outcomes are all 0.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

# The executor JVM among a rank's parents, as the ranks find it; the fits' epochs.
from fault_spark_driver import FIT_EPOCHS, executor_of

HERE = os.path.dirname(os.path.abspath(__file__))
RANK_SCRIPT = os.path.join(HERE, "fault_rank.py")
KINDS = ("kill", "stop", "never-submits", "mismatch", "stranger-silent", "stranger-garbage", "stranger-huge-length",
         "stranger-wrong-secret", "spark-driver-killed", "spark-executor-killed",
         "spark-executor-killed-mid-checkpoint", "spark-elastic-executor-killed", "spark-elastic-killed-in-commit",
         "spark-elastic-grow", "spark-elastic-worker-lost", "spark-elastic-in-cluster", "spark-fit-worker-lost",
         "spark-fit-grow")
SPARK_DRIVER = os.path.join(HERE, "fault_spark_driver.py")
# A local-cluster's start (JVMs, executors, Python workers), and its end once its driver is gone.
SPARK_START_S = 120
SPARK_END_S = 60
# A recovered Spark job's second attempt: a new executor, its Python worker, the job again.
SPARK_RECOVERY_S = 240
# Interpreter start, imports and rendezvous, on top of the timeouts under test.
STARTUP_S = 30
SHM_GLOB = "/dev/shm/horovod-rs-*"


def run_trial(kind, trial, timeout_s):
    """Runs one trial; returns its class (one of the table's columns) and a detail line."""
    if kind == "spark-driver-killed":
        return run_spark_driver_killed(timeout_s)
    if kind.startswith("spark-executor-killed"):
        return run_spark_executor_killed(kind, timeout_s)
    if kind in DRIVER_FAULT_MODES:
        return run_spark_driver_fault(kind, timeout_s)
    marker = uuid.uuid4().hex
    result_dir = tempfile.mkdtemp(prefix="horovod-rs-fault-")
    segments_before = set(glob.glob(SHM_GLOB))
    env = dict(os.environ, HOROVOD_RS_TIMEOUT_SECONDS=str(timeout_s), HOROVOD_RS_CONNECT_TIMEOUT_SECONDS=str(timeout_s),
               FAULT_SEED=str(trial), FAULT_TRIAL=marker)
    launcher = [os.path.join(os.path.dirname(sys.executable), "horovodrs"), "-np", "2", sys.executable, RANK_SCRIPT,
                kind, result_dir]
    job = subprocess.Popen(launcher, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           start_new_session=True)
    try:
        output, _ = job.communicate(timeout=2 * timeout_s + STARTUP_S)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        output, _ = job.communicate()
        hung = True
    try:
        results = {}
        for rank in (0, 1):
            path = os.path.join(result_dir, "rank-%d.json" % rank)
            if os.path.exists(path):
                with open(path) as f:
                    results[rank] = json.load(f)
        leaked = _leftovers(marker, segments_before)
        if hung:
            return "hangs", "no end after %d s" % (2 * timeout_s + STARTUP_S)
        outcome, detail = _classify(kind, results, timeout_s)
        if leaked and outcome != "crashes":
            return "leaks", "; ".join(leaked)
        return outcome, detail or output.decode(errors="replace")[-300:]
    finally:
        shutil.rmtree(result_dir, ignore_errors=True)


def run_spark_driver_killed(timeout_s):
    """The driver of a Spark job killed while its ranks allreduce: nothing of the job may outlive
    it (SPARK_END_S for Spark's own shutdown, on top of the collective timeout)."""
    marker = uuid.uuid4().hex
    result_dir = tempfile.mkdtemp(prefix="horovod-rs-fault-")
    segments_before = set(glob.glob(SHM_GLOB))
    env = dict(os.environ, HOROVOD_RS_TIMEOUT_SECONDS=str(timeout_s), FAULT_TRIAL=marker,
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    driver = subprocess.Popen([sys.executable, SPARK_DRIVER, "forever", result_dir], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + SPARK_START_S
        started = lambda: all(os.path.exists(os.path.join(result_dir, "started-%d" % r)) for r in (0, 1))
        while not started() and driver.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if not started():
            driver.kill()
            output = driver.communicate()[0].decode(errors="replace")
            _leftovers(marker, segments_before, 0)
            return "unexpected", "the ranks did not start within %d s: %s" % (SPARK_START_S, output[-300:])
        time.sleep(1)  # in the middle of the allreduces
        # The driver, its JVM, 2 executor JVMs and their Python workers: else the leak check below
        # would look for processes it cannot see.
        watched = _processes_with(marker)
        if len(watched) < 6:
            driver.kill()
            driver.communicate()
            _leftovers(marker, segments_before, 0)
            return "unexpected", "only %d processes carry the trial's marker" % len(watched)
        driver.kill()  # SIGKILL of the driver's Python process; its JVM is left to notice
        driver.communicate()
        leaked = _leftovers(marker, segments_before, timeout_s + SPARK_END_S)
        if leaked:
            return "leaks", "; ".join(leaked)
        return "clean error", None
    finally:
        shutil.rmtree(result_dir, ignore_errors=True)


def run_spark_executor_killed(kind, timeout_s):
    """An executor JVM killed under a Spark job that may run again: the job must finish, and nothing
    of it may outlive its driver."""
    marker = uuid.uuid4().hex
    result_dir = tempfile.mkdtemp(prefix="horovod-rs-fault-")
    segments_before = set(glob.glob(SHM_GLOB))
    mode = "fit" if kind.endswith("mid-checkpoint") else "run"
    env = dict(os.environ, HOROVOD_RS_TIMEOUT_SECONDS=str(timeout_s), FAULT_TRIAL=marker,
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="3")
    driver = subprocess.Popen([sys.executable, SPARK_DRIVER, mode, result_dir], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)
    output = []
    reader = threading.Thread(target=lambda: output.append(driver.stdout.read()), daemon=True)
    reader.start()
    try:
        if mode == "run":
            ready = lambda: all(os.path.exists(os.path.join(result_dir, "started-%d" % r)) for r in (0, 1))
        else:
            pattern = os.path.join(result_dir, "store", "**", "*.tmp-*")
            ready = lambda: glob.glob(pattern, recursive=True)
        deadline = time.time() + SPARK_START_S + (SPARK_RECOVERY_S if mode == "fit" else 0)
        writer_pid = writer = None
        if mode == "fit":
            pid_file = os.path.join(result_dir, "writer.pid")
            while not os.path.exists(pid_file) and driver.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            if os.path.exists(pid_file):
                with open(pid_file) as f:
                    writer_pid = int(f.read())
                writer = executor_of(writer_pid)
        while not ready() and driver.poll() is None and time.time() < deadline:
            time.sleep(0.001 if mode == "fit" else 0.2)
        executors = [p for p in _processes_with(marker) if b"CoarseGrainedExecutorBackend" in _cmdline(p)]
        if not ready() or not executors or (mode == "fit" and not writer):
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
            _leftovers(marker, segments_before, 0)
            return "unexpected", "no %s and %d executors within %d s: %s" % (
                "ranks allreducing" if mode == "run" else "checkpoint being written", len(executors),
                SPARK_START_S, _tail(output, reader))
        if mode == "fit":
            # The writer and its executor JVM, found before the write began, killed together (a
            # lost node) the moment a checkpoint's temporary file appears: killing the JVM alone
            # leaves its Python worker time to finish the write. A temporary file still there
            # after the kill is a write it cut off.
            for pid in (writer_pid, writer):
                os.kill(pid, signal.SIGKILL)
        else:
            os.kill(executors[-1], signal.SIGKILL)
        if mode == "fit":
            time.sleep(0.5)
            WRITER_KILLS[bool(ready())] += 1
        result, failure = _driver_result(driver, output, reader, marker, segments_before, timeout_s, result_dir,
                                         SPARK_RECOVERY_S, "of the kill")
        if failure:
            return failure
        if mode == "run":
            # Every rank's last sum; and the kill did land on the first attempt.
            recovered = result["results"] == [2.0, 2.0] and "starting attempt 2" in _output(output, reader)
        else:
            recovered = (result["epochs"] == FIT_EPOCHS and len(result["retries"]) == 1
                         and result["mean_abs_error"] < 0.5)
        return ("finished", None) if recovered else ("unexpected", json.dumps(result)[-500:])
    finally:
        shutil.rmtree(result_dir, ignore_errors=True)


# The kinds whose driver script makes the fault happen itself, and its mode for each.
DRIVER_FAULT_MODES = {"spark-elastic-executor-killed": "elastic-kill", "spark-elastic-killed-in-commit": "elastic-commit",
                      "spark-elastic-grow": "elastic-grow", "spark-elastic-worker-lost": "elastic-worker",
                      "spark-elastic-in-cluster": "elastic-cluster",
                      "spark-fit-worker-lost": "fit-worker", "spark-fit-grow": "fit-grow"}


def run_spark_driver_fault(kind, timeout_s):
    """A job whose driver makes its fault happen: an elastic job whose world changes must finish
    with every committed step counted once and the sizes the change implies; a fit that lost a
    worker must finish on the rank left. Nothing of either may outlive its driver."""
    marker = uuid.uuid4().hex
    result_dir = tempfile.mkdtemp(prefix="horovod-rs-fault-")
    segments_before = set(glob.glob(SHM_GLOB))
    env = dict(os.environ, HOROVOD_RS_TIMEOUT_SECONDS=str(timeout_s), FAULT_TRIAL=marker,
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="3")
    driver = subprocess.Popen([sys.executable, SPARK_DRIVER, DRIVER_FAULT_MODES[kind], result_dir], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    output = []
    reader = threading.Thread(target=lambda: output.append(driver.stdout.read()), daemon=True)
    reader.start()
    try:
        # A fit recovers by a relaunch: a second start and its epochs again.
        wait_s = SPARK_START_S + SPARK_RECOVERY_S * (2 if kind.startswith("spark-fit-") else 1)
        result, failure = _driver_result(driver, output, reader, marker, segments_before, timeout_s, result_dir,
                                         wait_s, "of its start")
        if failure:
            return failure
        if kind == "spark-fit-worker-lost":
            recovered = (result["epochs"] == FIT_EPOCHS and [r["num_proc"] for r in result["retries"]] == [1]
                         and result["mean_abs_error"] < 0.5)
            return ("finished", None) if recovered else ("unexpected", json.dumps(result)[-500:])
        if kind == "spark-fit-grow":  # on 1 rank from epoch 2, on 2 again from epoch 3
            attempts = [(r["reason"], r["resumed_after_epoch"], r["num_proc"]) for r in result["retries"]]
            recovered = (result["epochs"] == FIT_EPOCHS and attempts == [("rank lost", 1, 1), ("slots back", 2, 2)]
                         and result["mean_abs_error"] < 0.5)
            return ("finished", None) if recovered else ("unexpected", json.dumps(result)[-500:])
        results = result["results"]
        steps, sizes = results[0]["step"], results[0]["sizes"]
        counted_once = len(sizes) == steps and all(r == results[0] for r in results)
        if kind == "spark-elastic-grow":
            expected = sizes[0] == 2 and sizes[-1] == 3 and len(results) == 3
        elif kind == "spark-elastic-worker-lost":  # the job ends on the 2 ranks left
            expected = sizes[0] == 3 and sizes[-1] == 2 and len(results) == 2
        else:
            expected = sizes[0] == 3 and 2 in sizes and os.path.exists(os.path.join(result_dir, "killed"))
        return ("finished", None) if counted_once and expected else ("unexpected", json.dumps(result)[-500:])
    finally:
        shutil.rmtree(result_dir, ignore_errors=True)


def _driver_result(driver, output, reader, marker, segments_before, timeout_s, result_dir, wait_s, since):
    """Waits ``wait_s`` for a Spark trial's driver to end, then reads its ``result.json``: returns
    ``(result, None)``, or ``(None, (class, detail))`` when it hung, ended without a result, left
    something behind or did not recover."""
    try:
        driver.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        _leftovers(marker, segments_before, 0)
        return None, ("hangs", "the driver did not end within %d s %s" % (wait_s, since))
    leaked = _leftovers(marker, segments_before, timeout_s + SPARK_END_S)
    path = os.path.join(result_dir, "result.json")
    if not os.path.exists(path):
        return None, ("crashes", "the driver ended (%s) without a result: %s" % (driver.returncode,
                                                                              _tail(output, reader)))
    with open(path) as f:
        result = json.load(f)
    if leaked:
        return None, ("leaks", "; ".join(leaked))
    if "error" in result:
        return None, ("unexpected", "not recovered: %s" % result["error"][-500:])
    return result, None


# Mid-checkpoint trials whose kill cut a checkpoint's write off (True), or came as it ended (False).
WRITER_KILLS = {True: 0, False: 0}


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _output(output, reader):
    reader.join(timeout=5)
    return (output[0] if output else b"").decode(errors="replace")


def _tail(output, reader):
    return _output(output, reader)[-300:]


def _classify(kind, results, timeout_s):
    survivors = (0, 1) if kind == "mismatch" or kind.startswith("stranger-") else (0,)
    missing = [r for r in survivors if r not in results]
    if missing:
        return "crashes", "rank %s ended without reporting" % missing
    if kind.startswith("stranger-"):
        if all(results[r]["outcome"] == "finished" for r in survivors) and results[0].get("stranger_exit", 1) != 0:
            return "finished", None
        return "unexpected", json.dumps(results)
    errors = [results[r] for r in survivors]
    if any(e["outcome"] != "error" for e in errors):
        return "unexpected", json.dumps(results)
    named = "shape" if kind == "mismatch" else r"\branks? \[?1\b"
    if not all(re.search(named, e["message"]) for e in errors):
        return "unexpected", "the error does not name %r: %s" % (named, errors[0]["message"])
    if any(e["seconds"] > 2 * timeout_s + STARTUP_S for e in errors):
        return "hangs", "the error came after %s s" % max(e["seconds"] for e in errors)
    return "clean error", None


def _leftovers(marker, segments_before, grace_s=5):
    """Processes of the trial still alive, and shared-memory segments it left, after ``grace_s``."""
    deadline = time.time() + grace_s
    while True:
        processes = _processes_with(marker)
        segments = sorted(set(glob.glob(SHM_GLOB)) - segments_before)
        if not processes and not segments or time.time() > deadline:
            break
        time.sleep(0.2)
    for pid in processes:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return ["process %d still runs" % p for p in processes] + ["segment %s left" % s for s in segments]


def _processes_with(marker):
    found = []
    needle = ("FAULT_TRIAL=" + marker).encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/environ" % entry, "rb") as f:
                    if needle in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


COLUMNS = ("finished", "clean error", "unexpected", "hangs", "crashes", "leaks")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--timeout", type=int, default=5, help="collective, stall and connect timeout (s)")
    parser.add_argument("--spark-trials", type=int, help="trials of each spark-* kind (default: --trials); "
                                                         "each starts a Spark cluster")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--skip", default="", help="kinds to leave out of --kinds")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the goal (0 hangs, crashes, leaks) holds")
    args = parser.parse_args(argv)
    skipped = [k for k in args.skip.split(",") if k]
    unknown = sorted(set(args.kinds.split(",") + skipped) - set(KINDS))
    kinds = [k for k in args.kinds.split(",") if k not in skipped]
    if unknown:
        parser.error("unknown kinds %s; the kinds are %s" % (unknown, ", ".join(KINDS)))
    print("kind,trials," + ",".join(c.replace(" ", "_") for c in COLUMNS), flush=True)
    bad = 0
    for kind in kinds:
        counts = dict.fromkeys(COLUMNS, 0)
        trials = args.spark_trials if kind.startswith("spark-") and args.spark_trials is not None else args.trials
        for trial in range(trials):
            outcome, detail = run_trial(kind, trial, args.timeout)
            counts[outcome] += 1
            if outcome not in ("finished", "clean error"):
                bad += 1
                print("# %s trial %d: %s: %s" % (kind, trial, outcome, detail), file=sys.stderr, flush=True)
        print("%s,%d,%s" % (kind, trials, ",".join(str(counts[c]) for c in COLUMNS)), flush=True)
    if sum(WRITER_KILLS.values()):
        print("# mid-checkpoint: the kill cut a checkpoint's write off in %d of %d trials (else it came as it ended)"
              % (WRITER_KILLS[True], sum(WRITER_KILLS.values())), flush=True)
    if args.check and bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
