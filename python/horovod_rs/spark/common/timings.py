"""Where a fit's wall time goes, phase by phase: the driver times what it does before and after
the job, rank 0 times its own phases (``RankTimer``) and sends them as its last event; the
fitted Model's ``getTimings()`` holds the result and ``verbose`` prints it as one line.

The phases, in the order a fit goes through them (``PHASES``); they add up to the fit's wall
time, anything left over (a retried attempt, the gaps between the driver's and rank 0's clocks)
being ``other``. ``launch`` is the one phase measured across two clocks (the driver's submission,
the task's start on an executor); on different hosts it is as exact as their clocks agree.
"""

import time

PHASES = (
    ("driver", "checks and the column plan on the driver"),
    ("launch", "Spark starting the ranks' tasks (and their Python workers)"),
    ("join", "the ranks finding each other"),
    ("framework", "importing and starting the framework"),
    ("data", "each rank's rows: computing its partition and receiving it"),
    ("setup", "the model, the optimizer and rank 0's state on every rank"),
    ("train", "training steps"),
    ("validation", "validation steps"),
    ("checkpoint", "checkpoints and other end-of-epoch work"),
    ("finish", "rank 0 after its last epoch: the end of training's callbacks, the model it returns"),
    ("return", "rank 0's result back to the driver (the other ranks finishing too)"),
    ("model", "the driver making the Model of the result"),
)

# When this process's current task began as a rank (time.time()), set by the job's task and
# taken by the task's RankTimer (a reused Python worker's next task sets its own).
_task_started = None


def task_started():
    """Marks the start of this process's task (a barrier task entering the job)."""
    global _task_started
    _task_started = time.time()


class RankTimer:
    """One rank's phases: ``lap(phase)`` gives the time since the previous lap (or since the task
    began) to ``phase``, so the phases add up to the rank's wall time."""

    def __init__(self):
        global _task_started
        self.started, _task_started = _task_started or time.time(), None
        self._last = self.started
        self.seconds = {}

    def lap(self, phase):
        now = time.time()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + max(0.0, now - self._last)
        self._last = now

    def report(self):
        """What rank 0 sends the driver: when its task began and ended, and its phases."""
        return {"started": self.started, "ended": self._last, "seconds": dict(self.seconds)}


class FitTimer:
    """The driver's side of one fit: ``submitted()`` as each attempt's job goes to Spark,
    ``on_report`` with rank 0's report, ``result()`` at the end."""

    def __init__(self):
        self.started = time.time()
        self._first_submitted = self._submitted = self._report = self._job_done = None

    def submitted(self):
        self._submitted = time.time()
        if self._first_submitted is None:
            self._first_submitted = self._submitted

    def job_done(self):
        """The job's results are on the driver."""
        self._job_done = time.time()

    def on_report(self, report):
        self._report = report

    def result(self):
        """Seconds per phase and ``wall`` (the whole fit), in ``PHASES`` order; only ``driver``,
        ``model`` and ``other`` without rank 0's report (a custom backend's fit)."""
        ended = time.time()
        wall = ended - self.started
        seconds = {}
        report, submitted = self._report, self._submitted or ended
        # Attempts before the last (a rank lost) fall between the first submission and the last.
        seconds["driver"] = (self._first_submitted or ended) - self.started
        job_done = self._job_done or ended
        if report is not None:
            seconds["launch"] = max(0.0, report["started"] - submitted)
            seconds.update(report["seconds"])
            seconds["return"] = max(0.0, job_done - max(report["ended"], submitted))
        seconds["model"] = ended - job_done
        ordered = {name: round(seconds[name], 3) for name, _ in PHASES if name in seconds}
        ordered["other"] = round(max(0.0, wall - sum(seconds.values())), 3)
        ordered["wall"] = round(wall, 3)
        return ordered


def line(name, timings):
    """``<name> took 26.5 s: driver 0.4 s, launch 1.2 s, ...`` (phases under 0.05 s left out)."""
    parts = ["%s %.1f s" % (phase, seconds) for phase, seconds in timings.items()
             if phase != "wall" and seconds >= 0.05]
    return "%s took %.1f s: %s" % (name, timings["wall"], ", ".join(parts))
