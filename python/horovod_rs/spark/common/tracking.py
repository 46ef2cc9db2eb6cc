"""MLflow tracking of a fit, from the driver: the estimator's params, each epoch's metrics as rank
0's events arrive (step = the epoch, from 0) and the trained model in its framework's flavor.

When: the estimator's ``mlflow_tracking`` is True (a run of its own unless one is active), or it
is None (the default) and an MLflow run is active on the driver (so mlflow was imported: without
it nothing here imports mlflow). The tracking URI is MLflow's own (``MLFLOW_TRACKING_URI``,
``mlflow.set_tracking_uri``; Databricks sets it).

Never at the fit's expense: every MLflow call runs on one thread of its own, the first failure
(a server out of reach, a misconfigured URI) gives one ``TrackingWarning`` naming the URI and
ends the tracking of that fit, and the fit waits at most ``WAIT_S`` at its end for what is left.
"""

import functools
import importlib
import importlib.util
import queue
import socket
import sys
import threading
import time
import types
import urllib.parse
import warnings

# The longest a fit waits at its end for MLflow to take what is left.
WAIT_S = 60.0
# How long a tracking server's address may take to accept a connection.
PROBE_S = 5.0
# MLflow params are text; longer values are cut.
MAX_PARAM_CHARS = 500


class TrackingWarning(UserWarning):
    """MLflow tracking failed; the fit went on without it."""


def check_mode(mode):
    """Fails on an ``mlflow_tracking`` that cannot be (before any job)."""
    if mode not in (None, True, False):
        raise ValueError("mlflow_tracking must be None, True or False, not %r" % (mode,))
    if mode is True and "mlflow" not in sys.modules and importlib.util.find_spec("mlflow") is None:
        raise ValueError("mlflow_tracking=True needs MLflow on the driver: pip install mlflow-skinny (or mlflow)")


def tracker_for(mode, run_name):
    """A ``Tracker`` for a fit (``mode``: the estimator's ``mlflow_tracking``, checked), or None."""
    if mode is False:
        return None
    mlflow = sys.modules.get("mlflow")
    if mode is None and (mlflow is None or mlflow.active_run() is None):
        return None
    if mlflow is None:
        import mlflow
    return Tracker(mlflow, run_name)


class Tracker:
    """Logs to the MLflow run active on the driver (or to a new one named ``run_name``), on a
    thread of its own."""

    def __init__(self, mlflow, run_name, wait_s=WAIT_S):
        self._mlflow, self._run_name, self._wait_s = mlflow, run_name, wait_s
        self.uri = mlflow.get_tracking_uri()
        active = mlflow.active_run()
        self.run_id = active.info.run_id if active is not None else None
        self._own_run = active is None
        self._client = None
        self._last_epoch = 0
        self._failed = False
        self._lock = threading.Lock()
        self._calls = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="horovod_rs-mlflow", daemon=True)
        self._thread.start()
        self._calls.put(self._open)

    def log_params(self, params):
        self._calls.put(lambda: self._log_params(params))

    def log_metrics(self, epoch, metrics):
        stamp = int(time.time() * 1000)
        self._last_epoch = max(self._last_epoch, int(epoch))
        self._calls.put(lambda: self._log_metrics(epoch, metrics, stamp))

    def prepare(self, flavor):
        """Imports ``flavor`` while the fit trains (it may take seconds), not at its end."""
        self._calls.put(lambda: importlib.import_module(flavor))

    def log_model(self, flavor, **kwargs):
        """The model as an MLflow model named ``model`` of ``flavor`` (a module name such as
        ``mlflow.pytorch``; ``kwargs``: its ``save_model``'s)."""
        self._calls.put(lambda: self._log_model(flavor, kwargs))

    def close(self, ok=True):
        """Ends the run if it is this fit's own, and waits up to ``WAIT_S`` for every call."""
        if self._own_run:
            self._calls.put(lambda: self._client.set_terminated(self.run_id, "FINISHED" if ok else "FAILED"))
        self._calls.put(None)
        self._thread.join(self._wait_s)
        if self._thread.is_alive():
            self._fail("it did not answer within %.0f s (what is left is sent in the background)" % self._wait_s)

    # -- on the tracking thread ----------------------------------------------------------------
    def _work(self):
        while True:
            call = self._calls.get()
            if call is None:
                return
            if self._failed:
                continue
            try:
                call()
            except Exception as e:
                self._fail("%s: %s" % (type(e).__name__, str(e).split("\n")[0][:300]))

    def _open(self):
        _probe(self.uri)
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(self.uri)
        if self._own_run:
            from mlflow.tracking.fluent import _get_experiment_id

            self.run_id = self._client.create_run(_get_experiment_id(), run_name=self._run_name).info.run_id

    def _log_params(self, params):
        from mlflow.entities import Param

        logged = self._client.get_run(self.run_id).data.params  # a run's params cannot change
        new = [Param(k, v) for k, v in params.items() if k not in logged]
        if new:
            self._client.log_batch(self.run_id, params=new)

    def _log_metrics(self, epoch, metrics, stamp):
        from mlflow.entities import Metric

        if metrics:
            self._client.log_batch(self.run_id, metrics=[Metric(_metric_key(k), float(v), stamp, int(epoch))
                                                         for k, v in metrics.items()])

    def _log_model(self, flavor, kwargs):
        from mlflow.models import Model

        if callable(kwargs.get("pip_requirements")):  # (worked out here, off the fit's path)
            kwargs = dict(kwargs, pip_requirements=kwargs["pip_requirements"]())
        # MLflow links the model to the run's metrics at ``step`` (logging them again there): the last epoch's.
        Model.log(artifact_path=None, flavor=importlib.import_module(flavor), name="model", run_id=self.run_id,
                  step=self._last_epoch, **kwargs)

    def _fail(self, reason):
        with self._lock:
            if self._failed:
                return
            self._failed = True
        warnings.warn("horovod_rs: MLflow tracking at %s failed, the fit goes on without it: %s" % (self.uri, reason),
                      TrackingWarning, stacklevel=2)


def pinned_requirements(model, *modules):
    """A logged model's pip requirements: the distributions that provide ``modules`` (its flavor's
    framework) and the packages of ``model``'s classes (a subclass of a library's model brings the
    library), each at its installed version. Given these, MLflow does not infer them by loading the
    model in a subprocess, which took 9 s at the end of every fit."""
    from importlib import metadata

    roots = list(modules) + [cls.__module__.split(".")[0] for cls in type(model).__mro__]
    providers = _distributions_of_modules()
    pinned = []
    for root in roots:
        for distribution in providers.get(root, ()):
            requirement = "%s==%s" % (distribution, metadata.version(distribution))
            if requirement not in pinned:
                pinned.append(requirement)
    return pinned


@functools.lru_cache(maxsize=1)
def _distributions_of_modules():
    from importlib import metadata

    return metadata.packages_distributions()


def _probe(uri):
    """Fails fast when an http(s) tracking server does not accept connections (MLflow's own client
    would retry for minutes)."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=PROBE_S).close()
    except OSError as e:
        raise ConnectionError("cannot connect to %s:%d (%s)" % (parsed.hostname, port, e)) from None


def _metric_key(name):
    """A metric name as MLflow takes it (letters, digits, '_', '-', '.', ' ', ':', '/')."""
    return "".join(c if c.isalnum() or c in "_-. :/" else "_" for c in name)


def loggable_params(stage):
    """A Spark ML stage's params (set or default, not None, not private) as MLflow params: numbers,
    strings and lists as they are, other objects by class name (an optimizer with its learning
    rate as ``optimizer_lr``)."""
    params = {}
    for param, value in stage.extractParamMap().items():
        if param.name.startswith("_") or value is None:
            continue
        params[param.name] = _described(value)[:MAX_PARAM_CHARS]
        if param.name == "optimizer":
            rate = _learning_rate(value)
            if rate is not None:
                params["optimizer_lr"] = "%.6g" % rate
    return params


def _described(value):
    if isinstance(value, (bool, int, float, str)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[%s]" % ", ".join(_described(v) for v in value)
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (k, _described(v)) for k, v in value.items())
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
        return value.__name__
    return type(value).__name__


def _learning_rate(optimizer):
    """A torch optimizer's ``lr`` or a Keras optimizer's fixed ``learning_rate``, else None."""
    try:
        rate = getattr(optimizer, "defaults", {}).get("lr")
        if rate is None and hasattr(optimizer, "learning_rate"):
            rate = optimizer.learning_rate
            rate = rate.numpy() if hasattr(rate, "numpy") else rate
        return float(rate) if rate is not None else None
    except (TypeError, ValueError, AttributeError):
        return None
