"""Horovod's ``horovod.runner.elastic.driver``: ``horovodrs``'s elastic jobs (``--host-discovery-script``,
``--min-np``/``--max-np``, or ``-H`` with ``--min-np``).

The driver starts one process per slot of the hosts its discovery offers (up to ``max_num_proc``,
in the hosts' order, so the oldest hosts hold the lowest ranks), asks the discovery again every
``DISCOVER_HOSTS_FREQUENCY_SECS``, and plans each world for the job's coordinator
(``coordinator.Coordinator.plan``), which forms it once every planned process waits to join:

- a host added: processes start on its slots, and the running ranks are told (their next
  ``state.commit()`` raises ``HostsUpdatedInterrupt``), then join a larger world with them;
- a host removed: its processes are stopped; the others' collectives fail, they restore their
  last commit and go on in a smaller world;
- a process that fails (exits non-zero): its host is set aside (for good, or for a cooldown with
  ``--blacklist-cooldown-range``), its other processes stopped, and the rest go on.

The job succeeds when every rank of a world exited 0. It fails when no process is left after
failures, when fewer than ``min_num_proc`` slots stay available for ``elastic_timeout``, or past
``reset_limit`` new worlds, with Horovod's messages.
"""

import os
import secrets
import threading
import time

from horovod_rs.runner.elastic.coordinator import Coordinator, ElasticJobError

DISCOVER_HOSTS_FREQUENCY_SECS = 1.0
ELASTIC_TIMEOUT_SECS = 600
# How often the driver looks at its processes.
POLL_S = 0.05
NOT_STARTED = ("Timed out waiting for the elastic job's processes to start: ",
               "Check that they can start on their hosts, or raise --start-timeout.")


class _Process:
    """A process the driver started for a slot: ``host``'s local slot ``local_rank``."""

    def __init__(self, popen, slot, attempt, host, local_rank):
        self.popen, self.slot, self.attempt, self.host, self.local_rank = popen, slot, attempt, host, local_rank
        self.stopped = False  # stopped by the driver (its host left the job): its exit is not a failure
        self.started = time.time()

    @property
    def name(self):
        return "%s[%d]" % (self.host, self.local_rank)


class ElasticDriver:
    """Runs ``command`` as an elastic job over the hosts ``discovery`` finds (a ``HostManager``'s
    discovery). ``run()`` returns when the job succeeded and raises ``RuntimeError`` when it failed.
    ``secret``: the job's, which every process gets."""

    def __init__(self, host_manager, command, env, num_proc, min_num_proc, max_num_proc, start_timeout, secret,
                 elastic_timeout=None, reset_limit=None, ssh_port=None, ssh_identity_file=None):
        self._hosts = host_manager
        self._command, self._env = command, env
        self._num_proc, self._min_np = num_proc, min_num_proc
        self._max_np = max_num_proc
        self._start_timeout = start_timeout
        self._elastic_timeout = elastic_timeout if elastic_timeout is not None else \
            int(os.environ.get("HOROVOD_ELASTIC_TIMEOUT", ELASTIC_TIMEOUT_SECS))
        self._ssh_port, self._ssh_identity_file = ssh_port, ssh_identity_file
        self._token, self._secret = secrets.token_hex(16), secret
        self._coordinator = Coordinator(self._token, num_proc, min_num_proc, max_num_proc or 1 << 30,
                                        start_timeout, self._elastic_timeout, reset_limit, not_started=NOT_STARTED)
        self._slots = {}  # (host, local rank) -> slot number, kept for the job's life
        self._attempts = {}  # slot -> processes started for it
        self._processes = []  # running ones
        self._done = set()  # (host, local rank) of processes that exited 0: not started again
        self._first_failure = None  # (process name, exit code)
        self._short_since = None  # since when fewer than min_num_proc slots are available
        self._timed_out = None
        self._planned = []  # the last plan: [(slot, its process's start)]

    @property
    def worlds(self):
        """The size of every world the job formed, in order."""
        return list(self._coordinator.worlds)

    def run(self):
        try:
            self._wait_for_available_slots()
            self._replan(notice=None)
            next_discovery = time.time() + DISCOVER_HOSTS_FREQUENCY_SECS
            while not self._coordinator.finished():
                changed = self._reap()
                notice = None
                if time.time() >= next_discovery:
                    notice = self._discover()
                    next_discovery = time.time() + DISCOVER_HOSTS_FREQUENCY_SECS
                if changed or notice:
                    self._replan(notice)
                if not self._processes or self._too_long_short_of_slots():
                    break
                time.sleep(POLL_S)
            self._end()
        finally:
            self._stop(self._processes)
            self._coordinator.close()

    def _end(self):
        """Returns when the job succeeded, else raises its error."""
        if self._timed_out is not None:
            raise self._timed_out
        if self._coordinator.finished():
            try:
                self._coordinator.wait()
                return
            except ElasticJobError as e:
                raise RuntimeError(str(e)) from None
        if self._first_failure is not None:
            from horovod_rs.runner.launch import _raise_for

            _raise_for(self._first_failure[1], self._first_failure[0])

    def _too_long_short_of_slots(self):
        """Whether fewer than ``min_num_proc`` slots have been available for ``elastic_timeout``
        (the job's error is then set)."""
        if len(self._assignment()) >= self._min_np:
            self._short_since = None
            return False
        self._short_since = self._short_since or time.time()
        if time.time() - self._short_since < self._elastic_timeout:
            return False
        self._timed_out = RuntimeError(
            "Timed out waiting for minimum number of slots to become available. Please check that you have enough "
            "resources to run at least %d Horovod processes: %d slots (%s) for %g s (elastic_timeout)%s"
            % (self._min_np, len(self._assignment()), self._hosts.current_hosts, self._elastic_timeout,
               "; before that, %s exited with code %d" % self._first_failure if self._first_failure else ""))
        return True

    def _wait_for_available_slots(self):
        """Waits for ``num_proc`` slots (``-np``) before the job starts, as Horovod does."""
        from horovod_rs.runner import gloo_run

        deadline = time.time() + self._elastic_timeout
        min_hosts = gloo_run._get_min_start_hosts(None)
        while True:
            self._hosts.update_available_hosts()
            available = self._hosts.current_hosts
            if sum(slots for _, slots in available) >= self._num_proc and len(available) >= min_hosts:
                return
            if time.time() >= deadline:
                raise RuntimeError("Timed out waiting for minimum number of slots to become available. Please check "
                                   "that you have enough resources to run at least %d Horovod processes: the "
                                   "discovery offers %s after %g s (elastic_timeout)"
                                   % (self._num_proc, available, self._elastic_timeout))
            time.sleep(DISCOVER_HOSTS_FREQUENCY_SECS)

    def _discover(self):
        """Asks the discovery again; the change (``HostUpdateResult``) when there is one. A failing
        discovery is tried again: the hosts stay as they were."""
        try:
            return self._hosts.update_available_hosts()
        except Exception as e:  # noqa: BLE001  (a transient failure of the user's script)
            print("horovodrs: host discovery failed, trying again: %s" % e, flush=True)
            return None

    def _reap(self):
        """Records the processes that ended; returns whether the job's hosts changed (a failure)."""
        changed = False
        for process in list(self._processes):
            code = process.popen.poll()
            if code is None:
                continue
            self._processes.remove(process)
            if process.stopped:
                continue
            if code == 0:
                self._done.add((process.host, process.local_rank))  # (it told the coordinator at its exit)
                continue
            if self._first_failure is None:
                self._first_failure = (process.name, code)
            print("horovodrs: %s exited with code %d; its host %s leaves the job" % (process.name, code, process.host),
                  flush=True)
            self._hosts.blacklist(process.host)
            changed = True
        return changed

    def _assignment(self):
        """``[(host, local rank)]`` of the next world: the available hosts' slots in order, at most
        ``max_num_proc``."""
        slots = [(host, local) for host, count in self._hosts.current_hosts for local in range(count)]
        return slots[:self._max_np] if self._max_np else slots

    def _replan(self, notice):
        assignment = self._assignment()
        wanted = set(assignment)
        leaving = [p for p in self._processes if (p.host, p.local_rank) not in wanted]
        for process in leaving:
            process.stopped = True
        if leaving:
            threading.Thread(target=self._stop, args=(leaving,), daemon=True).start()
        running = {(p.host, p.local_rank) for p in self._processes if not p.stopped}
        for rank, key in enumerate(assignment):
            if key not in running and key not in self._done:
                self._start(rank, key[0], key[1], assignment)
        started = {(p.host, p.local_rank): p.started for p in self._processes if not p.stopped}
        planned = [(self._slots[key], started[key]) for key in assignment if key in started]
        self._coordinator.plan(planned)
        # A change that leaves the world as it is (a host past max_num_proc) resets nothing, as in Horovod.
        if notice and planned != self._planned:
            self._coordinator.notify(notice)
        self._planned = planned

    def _start(self, rank, host, local_rank, assignment):
        from horovod_rs import runner

        slot = self._slots.setdefault((host, local_rank), len(self._slots))
        attempt = self._attempts[slot] = self._attempts.get(slot, -1) + 1
        remote = bool(runner.remote_host_names([host]))
        here = runner._address_towards(host) if remote else "127.0.0.1"
        hosts = [h for h, _ in assignment]
        variables = {
            "HOROVOD_RS_ELASTIC_COORDINATOR": "%s:%d" % (here, self._coordinator.port),
            "HOROVOD_RS_ELASTIC_TOKEN": self._token,
            "HOROVOD_RS_ELASTIC_SLOT": str(slot),
            "HOROVOD_RS_ELASTIC_ATTEMPT": str(attempt),
            "HOROVOD_ELASTIC": "1",
            # Horovod's, as the process starts (a world's own ranks may differ: hvd.rank()).
            "HOROVOD_HOSTNAME": host, "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(len(assignment)),
            "HOROVOD_LOCAL_RANK": str(local_rank), "HOROVOD_LOCAL_SIZE": str(hosts.count(host)),
            "HOROVOD_CROSS_RANK": str(sorted(set(hosts), key=hosts.index).index(host)),
            "HOROVOD_CROSS_SIZE": str(len(set(hosts))),
        }
        base = dict(self._env, HOROVOD_RS_SECRET=self._secret.hex())
        popen = runner.start_process(self._command, base, variables, host if remote else None, rank,
                                     self._ssh_port, self._ssh_identity_file)
        self._processes.append(_Process(popen, slot, attempt, host, local_rank))

    @staticmethod
    def _stop(processes):
        from horovod_rs import runner

        runner._stop([p.popen for p in processes])
