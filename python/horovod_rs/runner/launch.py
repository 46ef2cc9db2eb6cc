"""Horovod's ``horovod.runner.launch``: ``_run(args)`` runs the job an ``_HorovodArgs`` describes,
a command (as ``horovodrs`` does) or a function (``horovod_rs.run``'s); ``_run_elastic(args)`` an
elastic one (a command); ``parse_args()`` reads ``horovodrun``'s command line into one."""

import os
import sys

from horovod_rs.common.util import gloo_built, mpi_built  # noqa: F401  (Horovod's names here, which tests patch)
from horovod_rs.runner import (_remote_hosts, _reachable_address, assign_slots, launch_ranks, local_slots,
                               parse_hostfile, parse_hosts, remote_host_names)
from horovod_rs.runner.common.util.secret import make_secret_key


def parse_args():
    """``horovodrun``'s command line (``sys.argv``) as an ``_HorovodArgs``."""
    from horovod_rs.runner import _parse

    return _parse(sys.argv[1:]).horovod


def _is_elastic(args):
    return args.host_discovery_script is not None or args.min_num_proc is not None


def _run_elastic(args):
    """Runs the elastic job ``args`` describes (``horovod_rs.runner.elastic.driver``): its hosts
    from ``args.host_discovery_script``, or the fixed ``args.hosts`` (at least two); a command, or
    a function whose results (one per rank of the last world, in rank order) it returns. Raises
    ``RuntimeError`` when the job fails, with Horovod's messages."""
    import cloudpickle

    from horovod_rs.runner.elastic import discovery
    from horovod_rs.runner.elastic.driver import ElasticDriver

    refuse_what_does_not_apply(args, elastic=True)
    if args.host_discovery_script:
        hosts = discovery.HostDiscoveryScript(args.host_discovery_script, args.slots)
    elif args.hosts:
        listed = parse_hosts(args.hosts)
        if len(listed) < 2:
            raise ValueError("Cannot run in fault tolerance mode with fewer than 2 hosts.")
        hosts = discovery.FixedHosts(dict(listed))
    else:
        raise ValueError("One of --host-discovery-script, --hosts, or --hostnames must be provided")
    start_timeout = args.start_timeout or int(os.environ.get("HOROVOD_START_TIMEOUT", "30"))
    env = dict(os.environ, **ranks_environment(args))
    secret = make_secret_key()
    server = None
    if args.run_func is not None:
        from horovod_rs.runner.task_data import TaskDataServer

        # The ranks reach this process on its route to the hosts -H names, or to those the
        # discovery offers now. (Results are kept by the rank that sends them: any world's.)
        named = [h for h, _ in parse_hosts(args.hosts)] if args.hosts else list(hosts.find_available_hosts_and_slots())
        server = TaskDataServer(secret, cloudpickle.dumps(args.run_func), 1 << 20,
                                host=_reachable_address(remote_host_names(named)))
        command = [args.executable or sys.executable, "-m", "horovod_rs.runner.run_task",
                   "%s:%d" % (server.host(), server.port())]
    else:
        command = list(args.command)
    driver = ElasticDriver(discovery.HostManager(hosts, args.cooldown_range), command, env, args.num_proc,
                           args.min_num_proc or args.num_proc, args.max_num_proc, start_timeout, secret,
                           elastic_timeout=args.elastic_timeout, reset_limit=args.reset_limit,
                           ssh_port=args.ssh_port, ssh_identity_file=args.ssh_identity_file)
    try:
        driver.run()
        if server is None:
            return None
        results = server.results()
    finally:
        if server is not None:
            server.close()
    size = driver.worlds[-1] if driver.worlds else len(results)
    missing = [rank for rank in range(size) if rank not in results]
    if missing:
        raise RuntimeError("rank%s %s of the last world ended without a result" % ("s" if len(missing) > 1 else "",
                                                                                 ", ".join(map(str, missing))))
    return [cloudpickle.loads(results[rank]) for rank in range(size)]


def _run(args):
    """Runs ``args.run_func`` as ``args.num_proc`` ranks and returns their results in rank order,
    or ``args.command`` and returns None; raises ``RuntimeError`` naming the first rank that
    failed, and ``ValueError`` for what horovod_rs does not run (MPI, output files). An elastic job
    (``host_discovery_script``, ``min_num_proc``) runs as ``_run_elastic``."""
    if _is_elastic(args):
        return _run_elastic(args)
    refuse_what_does_not_apply(args)
    slots = _slots(args)
    secret = make_secret_key()
    env = dict(os.environ, **ranks_environment(args))
    if args.run_func is None:
        code, failed = launch_ranks(args.num_proc, list(args.command), env=env, slots=slots, ssh_port=args.ssh_port,
                                    ssh_identity_file=args.ssh_identity_file, secret=secret)
        _raise_for(code, failed)
        return None
    return _run_func(args, slots, secret, env)


def ranks_environment(args):
    """The variables ``args``' timeout and engine options (``horovodrun``'s ``--start-timeout``,
    ``--fusion-threshold-mb``, ``--cycle-time-ms``, ``--cache-capacity``, ``--disable-cache``,
    ``--log-level``) set in every rank, by Horovod's names."""
    env = {}
    if args.start_timeout is not None:
        env["HOROVOD_RS_CONNECT_TIMEOUT_SECONDS"] = str(args.start_timeout)
    if args.fusion_threshold_mb is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        env["HOROVOD_CYCLE_TIME"] = str(args.cycle_time_ms)
    if args.cache_capacity is not None:
        env["HOROVOD_CACHE_CAPACITY"] = str(args.cache_capacity)
    if args.disable_cache:
        env["HOROVOD_CACHE_CAPACITY"] = "0"
    if args.log_level is not None:
        env["HOROVOD_LOG_LEVEL"] = args.log_level
    return env


def _run_func(args, slots, secret, env):
    import cloudpickle

    from horovod_rs.runner.task_data import TaskDataServer

    server = TaskDataServer(secret, cloudpickle.dumps(args.run_func), args.num_proc,
                            host=_reachable_address(_remote_hosts(slots)))
    address = "%s:%d" % (server.host(), server.port())
    try:
        code, failed = launch_ranks(args.num_proc, [args.executable or sys.executable, "-m",
                                                    "horovod_rs.runner.run_task", address],
                                    env=env, slots=slots, ssh_port=args.ssh_port,
                                    ssh_identity_file=args.ssh_identity_file, secret=secret)
        results = server.results()
    finally:
        server.close()
    _raise_for(code, failed)
    missing = [rank for rank in range(args.num_proc) if rank not in results]
    if missing:
        raise RuntimeError("rank%s %s ended without a result (did the function exit the process?)"
                           % ("s" if len(missing) > 1 else "", ", ".join(map(str, missing))))
    return [cloudpickle.loads(results[rank]) for rank in range(args.num_proc)]


def _raise_for(code, failed):
    """Horovod's error for a job whose process ``failed`` (its rank, or its name) exited with ``code``."""
    if code != 0:
        raise RuntimeError("Horovod detected that one or more processes exited with non-zero status, thus causing "
                           "the job to be terminated. The first process to do so was:\nProcess name: %s\n"
                           "Exit code: %d" % (failed, code))


def refuse_what_does_not_apply(args, elastic=False):
    num_proc = args.num_proc
    if args.use_mpi:
        raise ValueError("use_mpi: horovod_rs runs its ranks without MPI (its engine connects them itself); "
                         "leave use_mpi unset")
    if not elastic and (args.reset_limit is not None or (args.max_num_proc or num_proc) != num_proc):
        raise ValueError("reset_limit and max_num_proc are an elastic job's: give min_num_proc or "
                         "host_discovery_script too")
    if args.output_filename is not None:
        raise ValueError("output_filename is not supported: every rank's output comes out here, prefixed with "
                         "its rank")
    if args.run_func is None and not args.command:
        raise ValueError("give the command to run (args.command) or a function (args.run_func)")


def _slots(args):
    """Where each rank runs: ``args.hosts`` (``"a:2,b"``; ``args.slots`` for hosts without a
    count) or ``args.hostfile``, else this host."""
    if args.hosts is not None:
        listed = parse_hosts(",".join(h if ":" in h or not args.slots else "%s:%d" % (h, args.slots)
                                      for h in args.hosts.split(",")))
        return assign_slots(listed, args.num_proc, "hosts %r" % args.hosts)
    if args.hostfile is not None:
        return assign_slots(parse_hostfile(args.hostfile), args.num_proc, "hostfile %s" % args.hostfile)
    return local_slots(args.num_proc)
