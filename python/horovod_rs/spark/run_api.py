"""horovod_rs.spark.run (this module: run_api): Horovod's PySpark Run API.

Runs ``fn`` on ``num_proc`` ranks, one Spark barrier task each in the Python workers; inside,
``hvd.init()`` finds the job the task already joined (``horovod_rs.spark.common.job``). Returns the
ranks' results in rank order; a rank's exception fails the call with its traceback. The ranks'
output is printed on the driver as it happens. Works from a classic session and from a Spark
Connect one.
"""

from horovod_rs.spark.common import session
from horovod_rs.spark.common.job import BarrierJob, HorovodRunError, run_attempts  # noqa: F401  (API)


def run(fn, args=(), kwargs=None, num_proc=None, start_timeout=None, use_mpi=None, use_gloo=None,
        extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
        prefix_output_with_timestamp=False, executable=None, use_gpu=False, max_attempts=1):
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` ranks; returns their results in rank order.

    As Horovod's: ``start_timeout`` (default ``HOROVOD_SPARK_START_TIMEOUT``, else 600 s) bounds the
    wait for task slots; ``env`` is set in every rank while ``fn`` runs; ``stdout``/``stderr``
    receive the ranks' output lines (the driver's streams by default). ``use_mpi``, ``use_gloo``,
    ``extra_mpi_args``, ``nics`` and ``executable`` are accepted for compatibility: ranks always
    connect with horovod_rs's own transports and run in Spark's Python workers. ``use_gpu``
    asks Spark for one GPU per task (a task resource profile). ``max_attempts`` (horovod_rs's own)
    runs the whole job again, up to that many times in all, when Spark loses a rank outside
    ``fn`` (an executor dies); ``fn`` must then be able to start over (from its own checkpoint).

    Runs from a classic session and from a Spark Connect one (the active session)."""
    spark = session.active_session()
    num_proc = num_proc or session.default_parallelism(spark)
    payload = _dumps((fn, args, kwargs or {}))

    def call(rank, batches):
        import cloudpickle

        function, fn_args, fn_kwargs = cloudpickle.loads(payload)
        return function(*fn_args, **fn_kwargs)

    def attempt(number):
        with BarrierJob(spark, num_proc, start_timeout, env, stdout, stderr, prefix_output_with_timestamp,
                        use_gpu=use_gpu, description="horovod_rs.spark.run (attempt %d)" % number) as job:
            return job.run(call)

    def on_retry(number, error):
        print("horovod_rs.spark.run: attempt %d lost a rank outside fn; starting attempt %d.\n%s"
              % (number, number + 1, error), flush=True)

    return run_attempts(max_attempts, attempt, on_retry, "max_attempts")


def _dumps(value):
    import cloudpickle

    return cloudpickle.dumps(value)
