"""horovod_rs.spark.run (this module: run_api): Horovod's PySpark Run API.

Runs ``fn`` on ``num_proc`` ranks, one Spark barrier task each in the Python workers; inside,
``hvd.init()`` joins the job through the rendezvous service this driver runs (as the JVM Run API
does; Spark's ``BarrierTaskContext.allGather`` polls once a second, which would dominate launch).
Returns the ranks' results in rank order; a rank's exception fails the call with its traceback.
"""

import os
import secrets
import time
import traceback

import cloudpickle
from pyspark import BarrierTaskContext
from pyspark.sql import SparkSession

from horovod_rs import _native

POLL_S = 0.2


class HorovodRunError(RuntimeError):
    """A rank's function raised: the message carries the rank and its traceback."""


def _slots(sc):
    jsc = sc._jsc.sc()
    return jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile())


def _await_slots(sc, num_proc, start_timeout):
    deadline = time.time() + start_timeout
    slots = _slots(sc)
    while slots < num_proc:
        if time.time() > deadline:
            raise TimeoutError("the cluster has %d task slots for %d processes after waiting %.0f s (add executors "
                               "or cores, lower num_proc, or raise start_timeout / HOROVOD_SPARK_START_TIMEOUT)"
                               % (slots, num_proc, start_timeout))
        time.sleep(POLL_S)
        slots = _slots(sc)


def _rank_task(payload, size, service, secret_hex, env):
    def task(_):
        ctx = BarrierTaskContext.get()
        rank = ctx.partitionId()
        os.environ.update(env or {})
        os.environ.update({
            "HOROVOD_RANK": str(rank),
            "HOROVOD_SIZE": str(size),
            "HOROVOD_RS_RENDEZVOUS": service,
            "HOROVOD_RS_SECRET": secret_hex,
            "HOROVOD_HOSTNAME": ctx.getTaskInfos()[rank].address.split(":")[0],
        })
        hosts = [info.address.split(":")[0] for info in ctx.getTaskInfos()]
        os.environ["HOROVOD_LOCAL_RANK"] = str(hosts[:rank].count(hosts[rank]))
        os.environ["HOROVOD_LOCAL_SIZE"] = str(hosts.count(hosts[rank]))
        gpus = ctx.resources().get("gpu")
        os.environ["HOROVOD_RS_GPUS"] = ",".join(gpus.addresses) if gpus else ""
        try:
            fn, args, kwargs = cloudpickle.loads(payload)
            result = (rank, True, cloudpickle.dumps(fn(*args, **kwargs)))
        except BaseException:  # the driver reports it; the task itself must not fail (Spark would retry it)
            result = (rank, False, traceback.format_exc())
        finally:
            from horovod_rs.common import basics
            basics.shutdown()
        yield result
    return task


def run(fn, args=(), kwargs=None, num_proc=None, start_timeout=None, env=None, stdout=None, stderr=None,
        verbose=1, prefix_output_with_timestamp=False, use_gpu=False):
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` ranks; returns their results in rank order."""
    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    sc = spark.sparkContext
    num_proc = num_proc or sc.defaultParallelism
    if start_timeout is None:
        start_timeout = float(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", "600"))
    _await_slots(sc, num_proc, start_timeout)
    secret = secrets.token_bytes(32)
    service = _native.Rendezvous(secret, num_proc)
    try:
        address = "%s:%d" % (sc.getConf().get("spark.driver.host"), service.port())
        payload = cloudpickle.dumps((fn, args, kwargs or {}))
        rdd = sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(
            _rank_task(payload, num_proc, address, secret.hex(), env))
        if use_gpu:
            from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests
            rdd = rdd.withResources(ResourceProfileBuilder().require(
                TaskResourceRequests().cpus(1).resource("gpu", 1)).build)
        sc.setJobDescription("horovod_rs.spark.run: %d ranks" % num_proc)
        outcomes = sorted(rdd.collect())
    finally:
        service.close()
    failed = [(rank, trace) for rank, ok, trace in outcomes if not ok]
    if failed:
        rank, trace = failed[0]
        raise HorovodRunError("rank %d of %d failed:\n%s" % (rank, num_proc, trace))
    return [cloudpickle.loads(result) for _, _, result in outcomes]
