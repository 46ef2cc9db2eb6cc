"""A fit's progress, from rank 0 to the driver: one stream of events (``RankEvents`` on rank 0,
sent over the ranks' output connection, ``output.send_event``) that the driver's ``FitMonitor``
hands to the progress line (``Progress``, unless ``verbose=0``) and to MLflow (``tracking``).

Events are dicts: ``start`` (epochs, the first epoch of this attempt, steps and validation
steps per epoch), ``step`` (epoch, training steps done in it, rank 0's running metrics; at most
every ``STEP_EVENT_S``), ``epoch`` (epoch, its metrics averaged over the ranks) and, last,
``timings`` (rank 0's phases, ``timings.RankTimer``). Epochs count from 0, as Keras and Lightning
count them.

On the driver, a terminal or a notebook shows one status line rewritten in place; other outputs
(a log file, a pipe) get one line per epoch. Events the driver receives only after the job (a
Spark Connect client out of the executors' reach, ``output.replay``) reach MLflow, not the line.
"""

import shutil
import sys
import time

from horovod_rs.spark.common import timings

# The least time between two step events of rank 0.
STEP_EVENT_S = 0.5


class RankEvents:
    """Rank 0's events (on other ranks every call does nothing)."""

    def __init__(self, enabled):
        self._enabled = enabled
        self._last_step = 0.0

    def start(self, epochs, initial_epoch, steps, val_steps):
        self._send({"event": "start", "epochs": epochs, "initial_epoch": initial_epoch, "steps": steps,
                    "val_steps": val_steps})

    def step(self, epoch, step, metrics):
        """``step`` training steps of ``epoch`` are done; ``metrics()`` gives the running metrics
        (called only when an event goes out, as it may synchronize a device)."""
        if not self._enabled or time.monotonic() - self._last_step < STEP_EVENT_S:
            return
        self._last_step = time.monotonic()
        self._send({"event": "step", "epoch": epoch, "step": step, "metrics": scalars(metrics())}, keep=False)

    def epoch(self, epoch, metrics):
        self._send({"event": "epoch", "epoch": epoch, "metrics": scalars(metrics)})

    def timings(self, report):
        """Rank 0's phases (``timings.RankTimer.report``), its last event."""
        self._send(dict(report, event="timings"))

    def _send(self, event, keep=True):
        if self._enabled:
            from horovod_rs.spark.common.output import send_event

            send_event(event, keep)


def scalars(metrics):
    """The metrics that are single numbers, as floats (tensors and numpy values included)."""
    result = {}
    for name, value in (metrics or {}).items():
        try:
            result[str(name)] = float(value)
        except (TypeError, ValueError):
            continue  # a vector or a string: no place on a line or in a metric
    return result


class Progress:
    """The driver's view of one fit's progress, from its events; ``text`` and ``epoch_line``
    format it (``now``: ``time.monotonic()``)."""

    def __init__(self, name):
        self.name = name
        self.epochs = self.steps = None
        self.initial_epoch = self.epoch = self.step = 0
        self.metrics = {}
        self._started = self._epoch_started = None

    def update(self, event, now):
        kind = event.get("event")
        if kind == "start":
            self.epochs, self.steps = event["epochs"], event["steps"]
            self.initial_epoch = self.epoch = event["initial_epoch"]
            self.step, self._started = 0, now
            self._epoch_started = now
        elif kind == "step":
            self.epoch, self.step = event["epoch"], event["step"]
            self.metrics.update(event["metrics"])
        elif kind == "epoch":
            self.epoch, self.step = event["epoch"], self.steps or 0
            self.metrics = dict(event["metrics"])

    def eta(self, now):
        """Seconds left, from the training steps done since the start; None before the first."""
        if self._started is None or not self.steps:
            return None
        done = (self.epoch - self.initial_epoch) * self.steps + self.step
        if done <= 0:
            return None
        left = (self.epochs - self.epoch - 1) * self.steps + (self.steps - self.step)
        return (now - self._started) / done * max(left, 0)

    def text(self, now):
        """``<name>: epoch 2/5, step 40/100, ETA 0:12, loss 0.25, ...``"""
        parts = ["%s: epoch %d/%s" % (self.name, self.epoch + 1, self.epochs if self.epochs is not None else "?")]
        if self.steps:
            parts.append("step %d/%d" % (self.step, self.steps))
        return ", ".join(parts + self._tail(now))

    def epoch_line(self, now):
        """``<name>: epoch 2/5 done in 3.1 s, ETA 0:12, loss 0.25, ...`` (after an epoch event)."""
        took = now - self._epoch_started if self._epoch_started is not None else 0.0
        self._epoch_started = now
        return ", ".join(["%s: epoch %d/%s done in %.1f s" % (self.name, self.epoch + 1, self.epochs, took)]
                         + self._tail(now))

    def _tail(self, now):
        eta = self.eta(now)
        tail = ["ETA %s" % duration(eta)] if eta is not None else []
        return tail + ["%s %.4g" % item for item in self.metrics.items()]


def duration(seconds):
    """``h:mm:ss``, or ``m:ss`` under an hour."""
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return "%d:%02d:%02d" % (hours, minutes, seconds) if hours else "%d:%02d" % (minutes, seconds)


def live_terminal(stream):
    """Whether ``stream`` shows a line rewritten with '\\r': a terminal, or a notebook's output."""
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):
        pass
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return type(shell).__name__ == "ZMQInteractiveShell"


class FitMonitor:
    """A fit's events on the driver: the progress line (``verbose`` > 0) and MLflow (``tracker``,
    a ``tracking.Tracker`` or None). ``on_event`` is the output server's ``on_event``."""

    def __init__(self, name, verbose, tracker=None, stdout=None, timer=None):
        self.tracker = tracker
        self.timer = timer or timings.FitTimer()
        self._progress = Progress(name) if verbose else None
        self.status_line = self._progress is not None and live_terminal(stdout or sys.stdout)

    def submitted(self):
        """The fit's job (an attempt of it) goes to Spark now."""
        self.timer.submitted()

    def job_done(self):
        """The fit's job has returned its results."""
        self.timer.job_done()

    def on_event(self, server, event, live):
        kind = event.get("event")
        if kind == "timings":
            self.timer.on_report(event)
            return
        if kind == "epoch" and self.tracker is not None:
            self.tracker.log_metrics(event["epoch"], event["metrics"])
        if self._progress is None or not live:
            return
        now = time.monotonic()
        self._progress.update(event, now)
        if self.status_line:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            server.status(self._progress.text(now)[:width])
        elif kind == "epoch":
            server.note("horovod_rs: " + self._progress.epoch_line(now))
