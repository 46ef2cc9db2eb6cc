"""Horovod's ``horovod.runner.launch``: ``_run(args)`` runs the job an ``_HorovodArgs`` describes,
a command (as ``horovodrs`` does) or a function (``horovod_rs.run``'s)."""

import os
import sys

from horovod_rs.common.util import gloo_built, mpi_built  # noqa: F401  (Horovod's names here, which tests patch)
from horovod_rs.runner import (_remote_hosts, _reachable_address, assign_slots, launch_ranks, local_slots,
                               parse_hostfile, parse_hosts)
from horovod_rs.runner.common.util.secret import make_secret_key


def _run(args):
    """Runs ``args.run_func`` as ``args.num_proc`` ranks and returns their results in rank order,
    or ``args.command`` and returns None; raises ``RuntimeError`` naming the first rank that
    failed, and ``ValueError`` for what horovod_rs does not run (elastic jobs, MPI, output files)."""
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
    if code != 0:
        raise RuntimeError("Horovod detected that one or more processes exited with non-zero status, thus causing "
                           "the job to be terminated. The first process to do so was:\nProcess name: %d\n"
                           "Exit code: %d" % (failed, code))


def refuse_what_does_not_apply(args):
    num_proc = args.num_proc
    if args.use_mpi:
        raise ValueError("use_mpi: horovod_rs runs its ranks without MPI (its engine connects them itself); "
                         "leave use_mpi unset")
    if args.host_discovery_script is not None or args.reset_limit is not None or \
            (args.min_num_proc or num_proc) != num_proc or (args.max_num_proc or num_proc) != num_proc:
        raise ValueError("horovod_rs runs no elastic job from here (host_discovery_script, min_num_proc, "
                         "max_num_proc, reset_limit): use horovod_rs.spark.run_elastic, or hvd.elastic.run "
                         "inside a fixed set of ranks")
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
