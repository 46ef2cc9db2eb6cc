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


def run_elastic(fn, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None, start_timeout=None,
                elastic_timeout=None, reset_limit=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
                prefix_output_with_timestamp=False, min_np=None, max_np=None):
    """Runs ``fn(*args, **kwargs)`` as an elastic job: ranks lost with their executor leave the
    world and the others go on from their last commit (``fn`` uses ``hvd.elastic.run`` and a
    state), new ranks join when Spark gives slots back. Returns the results of the last world's
    ranks in rank order.

    As Horovod's: ``num_proc`` ranks start together (default: the default parallelism), within
    ``start_timeout`` (``HOROVOD_SPARK_START_TIMEOUT``, else 600 s; after it ``min_num_proc``
    suffice); the job goes on with at least ``min_num_proc`` ranks (default ``num_proc``) and
    grows to at most ``max_num_proc`` (default ``num_proc``); after losing ranks it waits up to
    ``elastic_timeout`` (``HOROVOD_ELASTIC_TIMEOUT``, else 600 s) for ``min_num_proc``;
    ``reset_limit`` (default: none) bounds the new worlds after the first. ``min_np``/``max_np``
    are Horovod's older names. A rank whose ``fn`` raises leaves the world, as in Horovod: its task
    fails and Spark runs it again (``spark.task.maxFailures``), which joins the others once their
    ``hvd.elastic.run`` asked for the next world; when none goes on, the job fails with its
    traceback. Lines the
    ranks print are prefixed with their task's slot, which keeps its number when ranks change.

    Runs from a classic session and from a Spark Connect one: the job's coordinator runs on the
    driver of a classic session, else in a process of its own on an executor (the client may be
    out of the executors' reach); ``spark.horovod.rs.driverRendezvous`` (``true``/``false``)
    forces either."""
    import os

    from horovod_rs.spark.common import elastic_job

    spark = session.active_session()
    num_proc = num_proc or session.default_parallelism(spark)
    min_num_proc = min_num_proc if min_num_proc is not None else min_np if min_np is not None else num_proc
    max_num_proc = max_num_proc if max_num_proc is not None else max_np if max_np is not None else num_proc
    if not 1 <= min_num_proc <= num_proc <= max_num_proc:
        raise ValueError("run_elastic needs 1 <= min_num_proc <= num_proc <= max_num_proc; got min_num_proc=%r, "
                         "num_proc=%r, max_num_proc=%r" % (min_num_proc, num_proc, max_num_proc))
    if elastic_timeout is None:
        elastic_timeout = float(os.environ.get("HOROVOD_ELASTIC_TIMEOUT", "600"))
    results, worlds = elastic_job.run_job(
        spark, _dumps((fn, args, kwargs or {})), num_proc, min_num_proc, max_num_proc, start_timeout, elastic_timeout,
        reset_limit, {str(k): str(v) for k, v in (env or {}).items()},
        dict(stdout=stdout, stderr=stderr, prefix_output_with_timestamp=prefix_output_with_timestamp))
    if verbose >= 1 and len(worlds) > 1:
        print("horovod_rs.spark.run_elastic: the world's sizes, in turn: %s" % " -> ".join(map(str, worlds)), flush=True)
    return results


def _dumps(value):
    import cloudpickle

    return cloudpickle.dumps(value)
