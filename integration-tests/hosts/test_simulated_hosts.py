"""Two simulated hosts on one machine, end to end on Spark: a standalone cluster (its own, started
through bin/spark-class) whose two workers have HOROVOD_HOSTNAME node-a and node-b in their
environment, which their executors inherit, as a host's spark-env.sh would set it. A 4-rank Run
API job (two ranks per executor) must see two hosts of two ranks, in Horovod's local and cross
ranks, and reduce across them (small messages through each host's leader, large ones sharded)."""

import os
import sys

import cloudpickle
import pytest
from conftest import StandaloneCluster, four_rank_session

import horovod_rs.spark

HOSTS = ("node-a", "node-b")

# The executors cannot import this module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    with StandaloneCluster(len(HOSTS), str(tmp_path_factory.mktemp("hosts")), cores=2,
                           worker_env=lambda number: {"HOROVOD_HOSTNAME": HOSTS[number]}) as cluster:
        session = four_rank_session(cluster, "127.0.0.1")
        yield session
        session.stop()


def placed_and_reduced():
    import numpy as np

    from horovod_rs.common import arrays, basics

    basics.init()
    small = arrays.allreduce(np.array([basics.rank() + 1.0]), op="sum", name="small")
    large = arrays.allreduce(np.full(1 << 14, basics.rank() + 1.0, dtype=np.float32), op="sum", name="large")
    return (os.environ.get("HOROVOD_HOSTNAME"), basics.local_rank(), basics.local_size(), basics.cross_rank(),
            basics.cross_size(), float(small[0]), float(large.min()), float(large.max()))


def test_ranks_on_two_simulated_hosts_are_placed_by_host_and_reduce_across(spark):
    results = horovod_rs.spark.run(placed_and_reduced, num_proc=4)
    hosts = [result[0] for result in results]
    assert sorted(hosts) == ["node-a", "node-a", "node-b", "node-b"], results
    # Horovod's placement, from the hosts the ranks landed on: local rank among the ranks of the
    # host, cross rank among the hosts (in order of their first rank) with that local rank.
    order = sorted(set(hosts), key=hosts.index)
    for rank, (host, local_rank, local_size, cross_rank, cross_size, small, low, high) in enumerate(results):
        assert (local_rank, local_size) == (hosts[:rank].count(host), 2), results
        assert (cross_rank, cross_size) == (order.index(host), 2), results
        assert (small, low, high) == (10.0, 10.0, 10.0), results
