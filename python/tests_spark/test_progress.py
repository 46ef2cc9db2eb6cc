"""A fit's progress line on the driver (horovod_rs.spark.common.progress), without Spark: its
format, and rank 0's events reaching it through the ranks' output connection."""

import io
import time

from horovod_rs.spark.common.output import OutputServer, forward_output, replay
from horovod_rs.spark.common.progress import FitMonitor, Progress, RankEvents, duration


def started(now=0.0):
    progress = Progress("KerasEstimator.fit")
    progress.update({"event": "start", "epochs": 3, "initial_epoch": 0, "steps": 100, "val_steps": 10}, now)
    return progress


def test_the_line_shows_epoch_step_eta_and_the_last_metrics():
    progress = started()
    progress.update({"event": "step", "epoch": 0, "step": 25, "metrics": {"loss": 0.123456}}, 10.0)
    # 25 steps in 10 s, 275 to go: 110 s
    assert progress.text(10.0) == "KerasEstimator.fit: epoch 1/3, step 25/100, ETA 1:50, loss 0.1235"


def test_an_epoch_line_replaces_the_running_metrics_with_the_epochs():
    progress = started()
    progress.update({"event": "step", "epoch": 0, "step": 50, "metrics": {"loss": 0.5}}, 2.0)
    progress.update({"event": "epoch", "epoch": 0, "metrics": {"loss": 0.25, "val_loss": 0.3}}, 4.0)
    assert progress.epoch_line(4.0) == "KerasEstimator.fit: epoch 1/3 done in 4.0 s, ETA 0:08, loss 0.25, val_loss 0.3"


def test_a_resumed_fit_counts_its_eta_from_its_own_first_epoch():
    progress = Progress("TorchEstimator.fit")
    progress.update({"event": "start", "epochs": 5, "initial_epoch": 3, "steps": 10, "val_steps": 0}, 0.0)
    progress.update({"event": "step", "epoch": 3, "step": 5, "metrics": {}}, 1.0)
    assert progress.eta(1.0) == 3.0
    assert progress.text(1.0) == "TorchEstimator.fit: epoch 4/5, step 5/10, ETA 0:03"


def test_durations_read_as_clocks():
    assert duration(7) == "0:07"
    assert duration(3725) == "1:02:05"


def wait_for(condition, timeout=30):
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.01)
    assert condition()


class Recorder:
    def __init__(self):
        self.metrics = []

    def log_metrics(self, epoch, metrics):
        self.metrics.append((epoch, metrics))


def test_rank_0s_events_reach_the_line_and_the_tracker_live():
    out, tracker = io.StringIO(), Recorder()
    monitor = FitMonitor("KerasEstimator.fit", verbose=1, tracker=tracker, stdout=out)
    assert not monitor.status_line  # not a terminal: one line per epoch
    server = OutputServer("token", stdout=out, on_event=monitor.on_event, status_line=monitor.status_line)
    try:
        with forward_output("127.0.0.1:%d" % server.port, "token", 0):
            events = RankEvents(True)
            events.start(2, 0, 10, 0)
            print("a rank's own line")
            events.epoch(0, {"loss": 0.5, "val_loss": 0.75})
            wait_for(lambda: "epoch 1/2 done" in out.getvalue())
    finally:
        server.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[0]<stdout>:a rank's own line"
    assert lines[1].startswith("horovod_rs: KerasEstimator.fit: epoch 1/2 done in ")
    assert lines[1].endswith(", loss 0.5, val_loss 0.75")
    assert tracker.metrics == [(0, {"loss": 0.5, "val_loss": 0.75})]


def test_a_status_line_gives_way_to_rank_lines_and_verbose_0_shows_none():
    out = io.StringIO()
    server = OutputServer("token", stdout=out, status_line=True)
    server.status("epoch 1/2, step 5/10")
    server.emit(1, "hello")
    server.close()
    assert out.getvalue() == ("\rb".replace("b", "epoch 1/2, step 5/10") + "\r" + " " * 20 + "\r"
                              + "[1]<stdout>:hello\n" + "epoch 1/2, step 5/10" + "\n")
    quiet = FitMonitor("KerasEstimator.fit", verbose=0, stdout=out)
    assert not quiet.status_line
    quiet.on_event(server, {"event": "epoch", "epoch": 0, "metrics": {}}, True)  # nothing to print


def test_events_kept_when_the_driver_is_out_of_reach_reach_the_tracker_only():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with forward_output("127.0.0.1:%d" % closed, "token", 0) as forwarded:
        events = RankEvents(True)
        events.step(0, 1, lambda: {"loss": 1.0})  # a step report is not kept
        events.epoch(0, {"loss": 0.5})
    out, tracker = io.StringIO(), Recorder()
    monitor = FitMonitor("TorchEstimator.fit", verbose=1, tracker=tracker, stdout=out)
    server = OutputServer("token", stdout=out, on_event=monitor.on_event)
    try:
        replay(server, 0, forwarded.undelivered())
    finally:
        server.close()
    assert tracker.metrics == [(0, {"loss": 0.5})]
    assert "epoch" not in out.getvalue()


def test_a_fits_phases_add_up_to_its_wall_time_and_retried_attempts_count_as_other(monkeypatch):
    from horovod_rs.spark.common import timings

    clock = [100.0]
    monkeypatch.setattr(timings.time, "time", lambda: clock[0])
    fit = timings.FitTimer()
    clock[0] = 101.0
    fit.submitted()  # an attempt that lost a rank
    clock[0] = 110.0
    fit.submitted()
    monitor = FitMonitor("TorchEstimator.fit", 0, timer=fit)
    monitor.on_event(None, {"event": "timings", "started": 112.0, "ended": 130.0,
                            "seconds": {"join": 1.0, "framework": 2.0, "data": 3.0, "train": 12.0}}, live=False)
    clock[0] = 131.0
    monitor.job_done()
    clock[0] = 131.5
    result = fit.result()
    assert result == {"driver": 1.0, "launch": 2.0, "join": 1.0, "framework": 2.0, "data": 3.0, "train": 12.0,
                      "return": 1.0, "model": 0.5, "other": 9.0, "wall": 31.5}
    assert timings.line("TorchEstimator.fit", result) == (
        "TorchEstimator.fit took 31.5 s: driver 1.0 s, launch 2.0 s, join 1.0 s, framework 2.0 s, data 3.0 s, "
        "train 12.0 s, return 1.0 s, model 0.5 s, other 9.0 s")


def test_rank_laps_give_each_phase_the_time_since_the_last():
    from horovod_rs.spark.common import timings

    timer = timings.RankTimer()
    time.sleep(0.02)
    timer.lap("setup")
    timer.lap("train")
    time.sleep(0.02)
    timer.lap("setup")
    report = timer.report()
    assert report["seconds"]["setup"] >= 0.04 and report["seconds"]["train"] < 0.02
    assert abs(report["ended"] - report["started"] - sum(report["seconds"].values())) < 1e-6
