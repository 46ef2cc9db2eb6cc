"""horovodrs: Horovod's horovodrun.

``horovodrs -np 4 python train.py`` starts 4 processes with what ``hvd.init()`` needs (rank,
size, the rendezvous service's address and the job's secret), prefixes every output line with
its rank, and ends the whole job as soon as one process fails: the others are stopped and the
launcher exits with the failed process's code.

``-H host1:2,host2:2`` (or ``--hostfile FILE`` with ``host slots=N`` lines, the file Open MPI
reads and Kubeflow's MPI Operator writes) spreads the ranks over hosts in order, filling each
host's slots (as horovodrun does); processes on other hosts start over ssh (key-based,
``BatchMode``) in the same working directory. The job's secret reaches them on ssh's standard
input, not on a command line, and a remote process is stopped when its ssh connection ends.

``--host-discovery-script``, ``--min-np``/``--max-np`` run an elastic job, as horovodrun does
(``horovod_rs.runner.elastic.driver``): processes start and stop as the discovered hosts come
and go, and the ranks go on from their last ``state.commit()`` in each new world.

``run(func, ...)`` is Horovod's ``horovod.run``, the same launcher from Python: ``func`` runs as
the ranks and their results come back in rank order (``launch._run``, ``task_data``).
"""

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

from horovod_rs import _native
from horovod_rs.runner.common.util.secret import make_secret_key

# How long stopped processes get to exit before they are killed.
GRACE_S = 5.0

# Variables a remote rank gets from this environment (as horovodrun forwards the launcher's):
# the engine's and the frameworks' knobs, and where to find Python and libraries.
FORWARDED_PREFIXES = ("HOROVOD_", "NCCL_", "CUDA_", "OMP_", "MKL_", "TF_", "TORCH_")
FORWARDED_NAMES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
NOT_FORWARDED = ("HOROVOD_RS_SECRET", "HOROVOD_RS_SSH")


def _parse(argv):
    parser = argparse.ArgumentParser(prog="horovodrs", description=__doc__.splitlines()[0])
    parser.add_argument("-np", "--num-proc", type=int,
                        help="processes to start (default with -H or --hostfile: every slot they offer)")
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", help="host:slots,... e.g. server1:4,server2:4 (default: this host)")
    hosts.add_argument("-hostfile", "--hostfile", help="a file of 'host slots=N' lines (Open MPI's hostfile)")
    parser.add_argument("-p", "--ssh-port", type=int, help="ssh port of the other hosts")
    _horovodrun_options(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command every process runs")
    args = parser.parse_args(argv)
    if not args.command:
        parser.error("give the command to run, e.g. horovodrs -np 2 python train.py")
    try:
        hosts, source = (parse_hosts(args.hosts), "-H") if args.hosts else \
            (parse_hostfile(args.hostfile), "hostfile %s" % args.hostfile) if args.hostfile else (None, None)
    except ValueError as e:
        parser.error(str(e))
    elastic = args.host_discovery_script is not None or args.min_num_proc is not None
    if args.num_proc is None:
        if elastic:
            args.num_proc = args.min_num_proc
        elif hosts is None:
            parser.error("give -np, the number of processes to start (or -H / --hostfile to use all their slots)")
        else:
            args.num_proc = sum(slots for _, slots in hosts)
    if args.num_proc is None or args.num_proc < 1:
        parser.error("-np must be at least 1")
    try:
        args.placement = assign_slots(hosts, args.num_proc, source) if hosts and not elastic else None
    except ValueError as e:
        parser.error(str(e))
    # The job as Horovod describes it: what horovod_rs.run's jobs are checked and configured from too.
    args.horovod = _HorovodArgs()
    for name, value in vars(args).items():
        if hasattr(args.horovod, name):
            setattr(args.horovod, name, value)
    from horovod_rs.runner import launch

    try:
        launch.refuse_what_does_not_apply(args.horovod, elastic=launch._is_elastic(args.horovod))
    except ValueError as e:
        parser.error(str(e))
    return args


def _horovodrun_options(parser):
    """horovodrun's options that scripts pass: the engine's knobs (set in every rank's
    environment), elastic runs', ones accepted with nothing to do here, and ones refused naming
    why (MPI, output files)."""
    knobs = parser.add_argument_group("horovodrun's options")
    knobs.add_argument("--start-timeout", type=int, help="seconds the ranks wait for each other to start")
    knobs.add_argument("--fusion-threshold-mb", type=float, help="HOROVOD_FUSION_THRESHOLD, in MiB")
    knobs.add_argument("--cycle-time-ms", type=float, help="HOROVOD_CYCLE_TIME")
    knobs.add_argument("--cache-capacity", type=int, help="HOROVOD_CACHE_CAPACITY")
    knobs.add_argument("--disable-cache", action="store_true", help="HOROVOD_CACHE_CAPACITY=0")
    knobs.add_argument("--log-level", type=str.upper, choices=["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"],
                       help="HOROVOD_LOG_LEVEL")
    # Nothing to do here: the engine is the only controller, and ranks connect on the route to each other.
    knobs.add_argument("--gloo", action="store_true", dest="use_gloo", help=argparse.SUPPRESS)
    knobs.add_argument("--verbose", action="store_true", help=argparse.SUPPRESS)
    knobs.add_argument("--network-interface", "--network-interfaces", dest="nics", help=argparse.SUPPRESS)
    elastic = parser.add_argument_group("elastic runs (horovod_rs.runner.elastic.driver)")
    elastic.add_argument("--min-np", "--min-num-proc", type=int, dest="min_num_proc",
                         help="the fewest processes the job goes on with (an elastic run)")
    elastic.add_argument("--max-np", "--max-num-proc", type=int, dest="max_num_proc",
                         help="the most processes the job grows to")
    elastic.add_argument("--host-discovery-script",
                         help="prints the available hosts, one 'host' or 'host:slots' a line (an elastic run)")
    elastic.add_argument("--slots", "--slots-per-host", type=int,
                         help="slots of a host the discovery script prints without them (default 1)")
    elastic.add_argument("--elastic-timeout", type=int,
                         help="seconds to wait for min-np processes (default HOROVOD_ELASTIC_TIMEOUT or 600)")
    elastic.add_argument("--reset-limit", type=int, help="the most new worlds the job forms after its first")
    elastic.add_argument("--blacklist-cooldown-range", type=int, nargs=2, dest="cooldown_range",
                         metavar=("LOWER", "UPPER"),
                         help="seconds a failed host is set aside the first time (then doubling); default: for good")
    # Refused, naming why.
    knobs.add_argument("--mpi", action="store_true", dest="use_mpi", help=argparse.SUPPRESS)
    knobs.add_argument("--output-filename", help=argparse.SUPPRESS)


def parse_hosts(spec):
    """``"a:2,b:4"`` -> ``[("a", 2), ("b", 4)]``; a host without ``:slots`` has one slot."""
    hosts = []
    for item in spec.split(","):
        _add_host(hosts, _host_entry(item.strip(), "-H %r: each entry is host or host:slots with slots >= 1" % spec),
                  "-H %r" % spec)
    return hosts


def parse_hostfile(path):
    """Horovod's host file (Open MPI's format, which Kubeflow's MPI Operator writes): one host a
    line, ``host slots=N`` (``max_slots=M`` is accepted and ignored), ``host`` alone for one slot
    or ``host:N``; ``#`` starts a comment, blank lines are skipped. -> ``[(host, slots), ...]``"""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError("cannot read the hostfile: %s" % e) from None
    hosts = []
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = "hostfile %s line %d (%r)" % (path, number, line.strip())
        expected = "%s: expected 'host slots=N' with N >= 1" % where
        name, slots = _host_entry(words[0], expected)
        for word in words[1:]:
            key, equals, value = word.partition("=")
            if key == "slots" and equals and ":" not in words[0]:
                slots = _slot_count(value, expected)
            elif key != "max_slots" or not equals:
                raise ValueError(expected)
        _add_host(hosts, (name, slots), "hostfile %s" % path)
    if not hosts:
        raise ValueError("hostfile %s names no host" % path)
    return hosts


def _host_entry(item, message):
    """``"host"`` or ``"host:slots"`` -> ``(host, slots)``; ``message`` is the error."""
    name, colon, slots = item.partition(":")
    if not name:
        raise ValueError(message)
    return name, _slot_count(slots, message) if colon else 1


def _slot_count(text, message):
    if not text.isdigit() or int(text) < 1:
        raise ValueError(message)
    return int(text)


def _add_host(hosts, host, source):
    if any(host[0] == h for h, _ in hosts):
        raise ValueError("%s lists %s twice" % (source, host[0]))
    hosts.append(host)


def assign_slots(hosts, num_proc, source="-H"):
    """One ``(host, local_rank, local_size, cross_rank)`` per rank, filling hosts in order
    (``source`` names where the hosts came from, for the error). As in Horovod, a rank's cross
    rank counts the hosts before its own that have a rank of its local rank."""
    total = sum(slots for _, slots in hosts)
    if total < num_proc:
        raise ValueError("-np %d needs %d slots; %s offers %d" % (num_proc, num_proc, source, total))
    used, left = [], num_proc
    for host, slots in hosts:
        if left == 0:
            break
        used.append((host, min(slots, left)))
        left -= used[-1][1]
    return [(host, local, count, sum(1 for _, earlier in used[:index] if earlier > local))
            for index, (host, count) in enumerate(used) for local in range(count)]


LOOPBACK_NAMES = {"localhost", "127.0.0.1"}


def _remote_hosts(slots):
    """The hosts of ``slots`` that are not this one."""
    return remote_host_names(host for host, _, _, _ in slots)


def remote_host_names(names):
    """The host ``names`` that are not this one (``getfqdn`` may ask DNS: only asked when they
    name hosts other than loopback)."""
    hosts = set(names) - LOOPBACK_NAMES
    if hosts:
        hosts -= {socket.gethostname(), socket.getfqdn()}
    return sorted(hosts)


def local_slots(num_proc):
    """Every rank on this host."""
    return [("127.0.0.1", r, num_proc, 0) for r in range(num_proc)]


def _reachable_address(remote):
    """Where the ranks reach this process: with other hosts in the job (``remote``, from
    ``_remote_hosts``), this host's address on the route to them, else loopback."""
    return _address_towards(remote[0]) if remote else "127.0.0.1"


def _address_towards(host):
    """This host's address on the route to ``host`` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, 9))
            return probe.getsockname()[0]
        except OSError as e:
            raise SystemExit("horovodrs: cannot reach host %s: %s" % (host, e))


def _pump(stream, prefix, out):
    for line in iter(stream.readline, b""):
        out.buffer.write(prefix + line)
        out.flush()
    stream.close()


def _ssh(host, port, identity_file, variables, command):
    """The ssh command that runs ``command`` on ``host`` with ``variables`` set, in this working
    directory. The secret is read from standard input first; then a watcher stops the process
    when standard input closes (the launcher closes it, or the connection dropped)."""
    exports = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in sorted(variables.items()))
    script = ("read -r HOROVOD_RS_SECRET || exit 255; export HOROVOD_RS_SECRET; cd %s || exit 255; "
              "exec 3<&0; env %s %s 3<&- & child=$!; "
              # A background job's standard input is /dev/null: the watcher reads the real one as fd 3.
              "(cat <&3 > /dev/null; kill -TERM $child 2> /dev/null) > /dev/null 2>&1 & "
              "watcher=$!; wait $child; code=$?; kill $watcher 2> /dev/null; exit $code"
              % (shlex.quote(os.getcwd()), exports, " ".join(shlex.quote(c) for c in command)))
    ssh = shlex.split(os.environ.get("HOROVOD_RS_SSH", "ssh -o BatchMode=yes -o StrictHostKeyChecking=no"))
    return ssh + (["-p", str(port)] if port else []) + (["-i", identity_file] if identity_file else []) + \
        [host, script]


class _HorovodArgs:
    """Horovod's description of a job, as ``horovodrun``'s options and ``horovod.run``'s arguments
    fill it; ``horovod_rs.runner.launch._run`` runs it. Options without an equivalent here stay
    None (``_run`` refuses the ones it cannot honour)."""

    def __init__(self):
        for name in ("check_build", "ssh_port", "ssh_identity_file", "disable_cache", "start_timeout", "nic",
                     "output_filename", "verbose", "command", "run_func", "config_file", "nics", "executable",
                     "fusion_threshold_mb", "cycle_time_ms", "cache_capacity", "hierarchical_allreduce",
                     "hierarchical_allgather", "torus_allreduce", "autotune", "autotune_log_file",
                     "autotune_warmup_samples", "autotune_steps_per_sample", "autotune_bayes_opt_max_samples",
                     "autotune_gaussian_process_noise", "min_num_proc", "max_num_proc", "slots", "elastic_timeout",
                     "reset_limit", "cooldown_range", "timeline_filename", "timeline_mark_cycles", "no_stall_check",
                     "stall_check_warning_time_seconds", "stall_check_shutdown_time_seconds", "mpi_threads_disable",
                     "mpi_args", "tcp_flag", "binding_args", "num_nccl_streams", "thread_affinity",
                     "gloo_timeout_seconds", "log_level", "log_with_timestamp", "prefix_output_with_timestamp",
                     "hosts", "hostfile", "host_discovery_script", "use_gloo", "use_mpi", "use_jsrun"):
            setattr(self, name, None)
        self.num_proc = 1


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None, output_filename=None,
        verbose=None, use_gloo=None, use_mpi=None, mpi_args=None, network_interface=None,
        network_interfaces=None, executable=None, np=None, min_np=None, max_np=None):
    """Horovod's ``horovod.run``: runs ``func(*args, **kwargs)`` in ``num_proc`` new processes, a
    rank each (``hvd.init()`` inside works as under ``horovodrs``), on this host or on ``hosts``
    (``"host1:2,host2:2"``) / ``hostfile`` over ssh, and returns their results in rank order.

    ``func`` and its result travel cloudpickled. Every line a rank prints comes out here prefixed
    with its rank. When a rank fails (an exception in ``func`` ends it with code 1) the others
    are stopped and ``RuntimeError`` names it. ``start_timeout`` bounds how long the ranks wait
    for each other at ``init()``. ``slots`` is the slots per host of ``hosts`` given without
    them. With ``host_discovery_script`` or ``min_num_proc`` the job is elastic, as ``horovodrs``
    runs it (``horovod_rs.runner.elastic.driver``), and the results are those of its last world's
    ranks. MPI (``use_mpi``) is refused: the engine needs none. Gloo's, caching's and network
    interfaces' settings are accepted and have nothing to set."""
    import warnings

    from horovod_rs.runner.launch import _run

    for old, new, value in (("np", "num_proc", np), ("min_np", "min_num_proc", min_np),
                            ("max_np", "max_num_proc", max_np)):
        if value is not None:
            warnings.warn("%s is deprecated, use %s instead" % (old, new), DeprecationWarning)
    if hosts is not None and hostfile is not None:
        raise ValueError("Argument hosts and hostfile only allow one provided.")
    if use_gloo and use_mpi:
        raise ValueError("Argument use_gloo and use_mpi only allow one set True.")
    kwargs = kwargs or {}
    hargs = _HorovodArgs()
    hargs.num_proc = np if np is not None else num_proc
    hargs.min_num_proc = min_np if min_np is not None else min_num_proc
    hargs.max_num_proc = max_np if max_np is not None else max_num_proc
    hargs.slots, hargs.reset_limit, hargs.cooldown_range = slots, reset_limit, cooldown_range
    hargs.hosts, hargs.hostfile, hargs.host_discovery_script = hosts, hostfile, host_discovery_script
    hargs.start_timeout, hargs.ssh_port, hargs.ssh_identity_file = start_timeout, ssh_port, ssh_identity_file
    hargs.disable_cache, hargs.output_filename, hargs.verbose = disable_cache, output_filename, verbose
    hargs.use_gloo, hargs.use_mpi, hargs.mpi_args, hargs.executable = use_gloo, use_mpi, mpi_args, executable
    hargs.nics = set(network_interfaces or (network_interface.split(",") if network_interface else ())) or None
    hargs.run_func = lambda: func(*args, **kwargs)
    return _run(hargs)


def launch_ranks(num_proc, command, env=None, slots=None, ssh_port=None, ssh_identity_file=None, secret=None):
    """Runs ``command`` as ranks 0..num_proc-1, on this host or on ``slots`` (from
    ``assign_slots``) -> ``(exit code, the rank that failed first or None)``."""
    slots = slots or local_slots(num_proc)
    remote = _remote_hosts(slots)
    here = _reachable_address(remote)
    secret = secret or make_secret_key()
    service = _native.Rendezvous(secret, num_proc)
    shared = {
        "HOROVOD_SIZE": str(num_proc),
        "HOROVOD_RS_RENDEZVOUS": "%s:%d" % (here, service.port()),
    }
    base = dict(os.environ if env is None else env, HOROVOD_RS_SECRET=secret.hex(), **shared)
    processes = []
    for rank, (host, local_rank, local_size, cross_rank) in enumerate(slots):
        variables = dict(shared, HOROVOD_RANK=str(rank), HOROVOD_LOCAL_RANK=str(local_rank),
                         HOROVOD_LOCAL_SIZE=str(local_size), HOROVOD_CROSS_RANK=str(cross_rank),
                         HOROVOD_CROSS_SIZE=str(sum(1 for slot in slots if slot[1] == local_rank)),
                         # Horovod's: the rank's host as -H names it (which ranks share one, also
                         # for the engine); other ranks reach it at HOROVOD_RS_HOST.
                         HOROVOD_HOSTNAME=host, HOROVOD_RS_HOST=host if host in remote else here)
        processes.append(start_process(command, base, variables, host if host in remote else None, rank,
                                       ssh_port, ssh_identity_file))
    code, failed_rank = 0, None
    try:
        while True:
            codes = [p.poll() for p in processes]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                failed_rank, code = failed[0]
                sys.stderr.write("horovodrs: rank %d exited with code %d; stopping the other ranks\n"
                                 % (failed_rank, code))
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(0.05)
    finally:
        _stop(processes)
        for p in processes:
            for t in p.pumps:
                t.join(timeout=GRACE_S)
        service.close()
    return code, failed_rank


def start_process(command, base, variables, remote_host, label, ssh_port=None, ssh_identity_file=None):
    """Starts ``command`` with ``base`` (which holds the job's secret) and ``variables`` in its
    environment, here or over ssh on ``remote_host`` (then only ``variables`` and what
    ``FORWARDED_PREFIXES``/``FORWARDED_NAMES`` name go along, the secret on ssh's standard input);
    its output lines come out here prefixed ``[label]<stdout>:``. The ``Popen`` has the threads
    that forward its output as ``pumps``."""
    if remote_host is not None:
        forwarded = {k: v for k, v in base.items()
                     if (k.startswith(FORWARDED_PREFIXES) or k in FORWARDED_NAMES) and k not in NOT_FORWARDED}
        p = subprocess.Popen(_ssh(remote_host, ssh_port, ssh_identity_file, dict(forwarded, **variables), command),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdin.write(base["HOROVOD_RS_SECRET"].encode() + b"\n")
        p.stdin.flush()
    else:
        p = subprocess.Popen(command, env=dict(base, **variables), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.pumps = []
    for stream, out, tag in ((p.stdout, sys.stdout, b"stdout"), (p.stderr, sys.stderr, b"stderr")):
        t = threading.Thread(target=_pump, args=(stream, b"[%s]<%s>:" % (str(label).encode(), tag), out), daemon=True)
        t.start()
        p.pumps.append(t)
    return p


def _stop(processes):
    for p in processes:
        if p.stdin is not None:  # over ssh: closing standard input stops the remote process
            try:
                p.stdin.close()
            except OSError:
                pass
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + GRACE_S
    for p in processes:
        try:
            p.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _exit_on(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    # SIGTERM (a scheduler stopping the job) and SIGHUP unwind like Ctrl-C does, so the ranks are
    # stopped before the launcher exits instead of being left running.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on)
    from horovod_rs.runner import launch

    if launch._is_elastic(args.horovod):
        try:
            launch._run_elastic(args.horovod)
        except (RuntimeError, ValueError) as e:
            sys.stderr.write("horovodrs: %s\n" % e)
            sys.exit(1)
        sys.exit(0)
    env = dict(os.environ, **launch.ranks_environment(args.horovod))
    code, _ = launch_ranks(args.num_proc, args.command, env=env, slots=args.placement, ssh_port=args.ssh_port)
    sys.exit(code)
