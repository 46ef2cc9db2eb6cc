"""What a horovod_rs driver asks of its Spark session, for a classic session and a Spark Connect
one alike: settings, task slots, tags to cancel a job by, where the ranks may reach this process.

Under Spark Connect the session is a client of a Spark driver elsewhere: there is no
``SparkContext``, no py4j and no RDD here, and this process may be outside the cluster (a laptop
with Databricks Connect). Everything a job needs therefore goes through the DataFrame API and
``spark.conf``. A classic session answers some questions exactly (its task slots, from the
scheduler) where a Connect client can only read them off the configuration; nothing else
differs.
"""

import re
from contextlib import contextmanager

from horovod_rs.runner.common.util.network import address_toward


def active_session():
    """The session a call without one runs on: the active one, classic or Connect."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None and hasattr(SparkSession, "active"):
        try:
            session = SparkSession.active()
        except Exception:  # no session at all
            session = None
    return session or SparkSession.builder.getOrCreate()


def require_pyarrow(what):
    """pyarrow, or an ImportError saying what needs it: the ranks run in a barrier stage of Spark's
    Arrow functions, which need it on the driver and the executors (Horovod's ``spark`` extra has it too)."""
    try:
        import pyarrow
    except ImportError:
        raise ImportError("%s needs pyarrow on the driver and the executors (Spark runs the ranks through its "
                          "Arrow functions): pip install 'horovod_rs[spark]' (or pyarrow)" % what) from None
    return pyarrow


def is_connect(spark):
    """Whether ``spark`` is a Spark Connect client session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def spark_version(spark):
    """The (major, minor) version of the Spark that runs the session's jobs."""
    major, minor = re.match(r"(\d+)\.(\d+)", spark.version).groups()
    return int(major), int(minor)


def conf(spark, key, default=None):
    """A Spark setting of the session (a ``spark.*`` key of the cluster's configuration, or set on
    the session), else ``default``."""
    try:
        value = spark.conf.get(key, None)
    except Exception:  # Spark refuses a few keys it keeps to itself
        value = None
    return default if value is None else value


def confs(spark, keys):
    """The settings among ``keys`` the session has, as a dict. A Spark 4 Connect session answers
    them all in one round trip (``getAll``); a classic one key by key, since its ``getAll`` walks
    the JVM's map through py4j, two calls a setting of the session's (0.07 s for 50 settings)."""
    keys = set(keys)
    if is_connect(spark) and spark_version(spark) >= (4, 0):  # ``getAll`` is a property holding a dict
        return {k: v for k, v in spark.conf.getAll.items() if k in keys}
    found = {}
    for key in keys:
        value = conf(spark, key)
        if value is not None:
            found[key] = value
    return found


@contextmanager
def setting_unless_set(spark, key, value):
    """Within the block, the session's ``key`` is ``value``, unless the session sets it already (the
    user's choice stands) or refuses to take it (serverless compute keeps most settings to itself);
    unset again after. The setting is the session's: other threads' jobs in the meantime see it too."""
    taken = False
    if conf(spark, key) is None:
        try:
            spark.conf.set(key, value)
            taken = True
        except Exception:  # refused: the block runs with the session's own value
            pass
    try:
        yield
    finally:
        if taken:
            spark.conf.unset(key)


def _classic_context(spark):
    return None if is_connect(spark) else spark.sparkContext


def default_parallelism(spark):
    """``spark.default.parallelism``: Horovod's default ``num_proc``."""
    sc = _classic_context(spark)
    if sc is not None:
        return sc.defaultParallelism
    value = conf(spark, "spark.default.parallelism")
    if value is not None:
        return int(value)
    slots = configured_slots(spark)
    if slots is None:
        raise ValueError("num_proc is required from a Spark Connect session whose cluster size cannot be read off "
                         "its configuration (spark.default.parallelism, the master or executor settings)")
    return slots


def task_slots(spark):
    """How many tasks the cluster runs at once now (a barrier stage needs one per rank), as its
    scheduler counts them, or None when a Connect client cannot ask it."""
    sc = _classic_context(spark)
    if sc is None:
        return None
    jsc = sc._jsc.sc()
    return jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile())


def configured_slots(spark):
    """How many tasks the cluster's configuration says it runs at once when all its executors
    are up (``local[N]``, ``local-cluster[...]``, executor instances and cores), or None."""
    task_cpus = int(conf(spark, "spark.task.cpus", "1"))
    master = conf(spark, "spark.master", "")
    local = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    if local:
        cores = local.group(1)
        return None if cores == "*" else int(cores or 1) // task_cpus
    cluster = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", master)
    if cluster:
        return int(cluster.group(1)) * (int(cluster.group(2)) // task_cpus)
    if conf(spark, "spark.dynamicAllocation.enabled", "false").lower() == "true":
        return None
    instances, cores = conf(spark, "spark.executor.instances"), conf(spark, "spark.executor.cores")
    if instances is not None and cores is not None:
        return int(instances) * (int(cores) // task_cpus)
    return None


def cluster_can_grow(spark):
    """Whether the cluster may get more task slots than it is configured with (dynamic
    allocation, a standalone cluster gaining workers): false for the fixed local masters."""
    master = conf(spark, "spark.master", "")
    return not re.fullmatch(r"local(\[.*\])?|local-cluster\[.*\]", master)


def num_partitions(df):
    """``df``'s partition count where the session can tell without running a job, else None."""
    if is_connect(df.sparkSession):
        return None
    return df.rdd.getNumPartitions()


def driver_host(spark):
    """The Spark driver's host as this process knows it: a classic session's own driver host; under
    Connect, the server's (the driver's, or a proxy in front of it)."""
    if not is_connect(spark):
        return conf(spark, "spark.driver.host")
    host, _, _ = spark.client._builder.endpoint.rpartition(":")  # the server's "host:port"
    return host.strip("[]")


def executors_reach_this_process_at(spark):
    """The address the cluster's executors may reach this process at (for live output): the driver
    host of a classic session; under Connect, this client's address on its route to the server
    (which the cluster may or may not be able to reach)."""
    if not is_connect(spark):
        return conf(spark, "spark.driver.host")
    return address_toward(driver_host(spark))


@contextmanager
def tagged(spark, tag):
    """Within the block, the session's jobs carry ``tag`` (``interrupt(spark, tag)`` cancels them)."""
    sc = _classic_context(spark)
    if sc is not None:
        # A classic session's own tags are its JVM thread's: another thread (py4j's, after a
        # Ctrl-C broke the blocked call's connection) could not interrupt them. The context's job
        # tags are cancelled from any thread.
        sc.addJobTag(tag)
        try:
            yield
        finally:
            sc.removeJobTag(tag)
        return
    spark.addTag(tag)
    try:
        yield
    finally:
        spark.removeTag(tag)


def interrupt(spark, tag):
    """Cancels the session's running jobs that carry ``tag``."""
    sc = _classic_context(spark)
    if sc is not None:
        sc.cancelJobsWithTag(tag)
    else:
        spark.interruptTag(tag)


def watch_progress(spark, handler):
    """Calls ``handler(inflight_tasks)`` as a Connect session's jobs progress; returns a function
    that stops it, or None when the session reports no progress (a classic session, Spark 3.5)."""
    if not is_connect(spark) or not hasattr(spark, "registerProgressHandler"):
        return None

    def on_progress(stages, inflight_tasks, operation_id, done):
        handler(inflight_tasks)

    spark.registerProgressHandler(on_progress)
    return lambda: spark.removeProgressHandler(on_progress)
