"""Where an estimator's ranks run: Horovod's ``Backend`` interface and ``SparkBackend``.

``SparkBackend`` runs the ranks as one barrier stage of the active Spark session. For estimators it
also runs them *over a DataFrame* (``run_on_dataframe``): each rank's task receives its partition
as Arrow record batches, so nothing is written to the store first. A custom ``Backend`` (only
``run`` and ``num_processes``) gets the data through Parquet in the store, as Horovod's does.
"""

from horovod_rs.spark.common import session


def default_num_proc():
    return session.default_parallelism(session.active_session())


class Backend:
    """Interface for running the distributed training function."""

    def run(self, fn, args=(), kwargs={}, env=None):
        """Runs ``fn`` on every rank; returns the results in rank order."""
        raise NotImplementedError()

    def num_processes(self):
        """The number of ranks."""
        raise NotImplementedError()


class SparkBackend(Backend):
    """Runs the ranks as Spark barrier tasks (``horovod_rs.spark.run``).

    ``num_proc`` defaults to ``spark.default.parallelism``; ``env`` is set in the ranks while they
    run; the other keyword arguments are ``horovod_rs.spark.run``'s (``start_timeout``, ``stdout``,
    ``stderr``, ``prefix_output_with_timestamp``, ``verbose``, ...). Unlike Horovod, the driver's
    whole environment is not copied into the ranks (Spark's Python workers are reused across jobs);
    only ``env`` is."""

    def __init__(self, num_proc=None, env=None, **kwargs):
        self._num_proc = num_proc or default_num_proc()
        self._env = dict(env or {})
        self._kwargs = kwargs

    def run(self, fn, args=(), kwargs={}, env=None, monitor=None):
        """``monitor``: a fit's ``progress.FitMonitor``, which receives the ranks' events."""
        import horovod_rs.spark

        if monitor is None:
            return horovod_rs.spark.run(fn, args=args, kwargs=kwargs, num_proc=self._num_proc,
                                        env=self._merged_env(env), **self._kwargs)
        return self.run_on_dataframe(lambda rank, batches: fn(*args, **kwargs), None, env=env, monitor=monitor)

    def run_on_dataframe(self, fn, df, env=None, description="horovod_rs", num_proc=None, monitor=None,
                         grow_to=None):
        """Runs ``fn(rank, batches)`` on every rank, ``batches`` iterating over the rank's partition
        of ``df`` as Arrow record batches (``df`` None: no data); returns the results in rank
        order. ``num_proc``: this job's ranks, when not the backend's (a fit's attempt on fewer
        ranks), and ``grow_to`` the slots at which its ranks are asked to stop and run again on
        more (``BarrierJob``); ``monitor``: as in ``run``."""
        from horovod_rs.spark.common import session
        from horovod_rs.spark.common.job import BarrierJob

        options = {k: self._kwargs[k] for k in ("start_timeout", "stdout", "stderr", "prefix_output_with_timestamp",
                                                "use_gpu") if k in self._kwargs}
        spark = df.sparkSession if df is not None else session.active_session()
        with BarrierJob(spark, num_proc or self._num_proc, env=self._merged_env(env), description=description,
                        monitor=monitor, grow_to=grow_to, **options) as job:
            return job.run(fn, df)

    def _merged_env(self, env):
        merged = dict(self._env)
        merged.update(env or {})
        # The ranks must see their GPUs (a driver may hide them from TensorFlow, see TF issue 33168).
        merged.pop("CUDA_VISIBLE_DEVICES", None)
        return merged

    def num_processes(self):
        return self._num_proc
