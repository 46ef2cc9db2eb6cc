"""Two hosts apart as Spark itself sees them: each worker in a network namespace of its own (made
here with `ip netns`, joined by a bridge, traffic staying on this machine), so each executor has
its own address and no HOROVOD_HOSTNAME is needed. A 4-rank Run API job must see two hosts of
two ranks and reduce across them. Needs root (CI and make faults run as root); skipped without."""

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager

import cloudpickle
import pytest
from conftest import StandaloneCluster, four_rank_session

import horovod_rs.spark

# The executors cannot import this module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def ip(*args):
    done = subprocess.run(("ip",) + args, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError("ip %s failed: %s" % (" ".join(args), done.stderr.strip()))


@contextmanager
def namespaces(count):
    """``count`` network namespaces on one bridge, whose address in this namespace is yielded
    with each namespace's name and address; all removed when the block ends."""
    tag = "hvd%d" % (os.getpid() % 10 ** 7)
    subnet = "10.213.%d" % (os.getpid() % 250)
    bridge, made = tag + "br", []
    try:
        ip("link", "add", bridge, "type", "bridge")
        made.append(("link", "del", bridge))
        ip("addr", "add", subnet + ".1/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        hosts = []
        for number in range(count):
            name, address = "%s-%d" % (tag, number), "%s.%d" % (subnet, number + 2)
            ip("netns", "add", name)
            made.append(("netns", "del", name))
            ip("link", "add", name + "a", "type", "veth", "peer", "name", name + "b")
            ip("link", "set", name + "a", "master", bridge, "up")
            ip("link", "set", name + "b", "netns", name)
            ip("-n", name, "addr", "add", address + "/24", "dev", name + "b")
            ip("-n", name, "link", "set", name + "b", "up")
            ip("-n", name, "link", "set", "lo", "up")
            hosts.append((name, address))
        yield subnet + ".1", hosts
    finally:
        for command in reversed(made):
            subprocess.run(("ip",) + command, capture_output=True)


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("network namespaces need iproute2's ip command")
    with namespaces(2) as (here, hosts), \
            StandaloneCluster(len(hosts), str(tmp_path_factory.mktemp("netns")), cores=2, host=here,
                              worker_host=lambda n: (hosts[n][1], ["ip", "netns", "exec", hosts[n][0]])) as cluster:
        session = four_rank_session(cluster, here)
        yield session
        session.stop()


def placed_and_reduced():
    import numpy as np
    from pyspark import BarrierTaskContext

    from horovod_rs.common import arrays, basics

    basics.init()
    total = arrays.allreduce(np.full(1 << 14, basics.rank() + 1.0, dtype=np.float32), op="sum", name="total")
    # The address Spark gives this rank's executor.
    address = BarrierTaskContext.get().getTaskInfos()[basics.rank()].address
    return (address.rsplit(":", 1)[0], basics.local_rank(), basics.local_size(), basics.cross_rank(),
            basics.cross_size(), float(total.min()), float(total.max()))


def test_ranks_in_two_network_namespaces_are_two_hosts(spark):
    results = horovod_rs.spark.run(placed_and_reduced, num_proc=4)
    hosts = [result[0] for result in results]
    assert len(set(hosts)) == 2 and all(hosts.count(h) == 2 for h in hosts), results
    order = sorted(set(hosts), key=hosts.index)
    for rank, (host, local_rank, local_size, cross_rank, cross_size, low, high) in enumerate(results):
        assert (local_rank, local_size) == (hosts[:rank].count(host), 2), results
        assert (cross_rank, cross_size) == (order.index(host), 2), results
        assert (low, high) == (10.0, 10.0), results
