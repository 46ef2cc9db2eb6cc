"""Horovod's ``horovod.runner.elastic.discovery``: where an elastic job's processes may run.

A discovery names the hosts available now and their slots (``host -> slots``, in the order it
lists them); the ``HostManager`` keeps the hosts in the order they first came (older hosts get the
lower ranks), and sets aside a host whose process failed: for good, or, with a cooldown range,
for a while that doubles with each failure (then the host is offered again).
"""

import io
import random
import time

from horovod_rs.runner.elastic.worker import HostUpdateResult

# The bounds a cooldown range must stay within (seconds), as Horovod's.
DEFAULT_COOLDOWN_LOWER_LIMIT_SECONDS = 1
DEFAULT_COOLDOWN_UPPER_LIMIT_SECONDS = 1 * 60 * 60


class HostDiscovery:
    def find_available_hosts_and_slots(self):
        """``{host: slots}`` of the hosts available now, in their order."""
        raise NotImplementedError()


class HostDiscoveryScript(HostDiscovery):
    """Runs a script that prints one available host a line, ``host:slots`` or ``host`` (then
    ``slots`` slots, 1 when not given)."""

    def __init__(self, discovery_script, slots):
        self._discovery_script = discovery_script
        self._default_slots = slots or 1

    def find_available_hosts_and_slots(self):
        from horovod_rs.runner.common.util import safe_shell_exec

        stdout = io.StringIO()
        exit_code = safe_shell_exec.execute(self._discovery_script, stdout=stdout)
        if exit_code != 0:
            raise RuntimeError("Failed to execute discovery script: {}. Exit code: {}"
                               .format(self._discovery_script, exit_code))
        host_slots = {}
        for line in stdout.getvalue().splitlines():
            host, colon, slots = line.strip().partition(":")
            if not host:
                continue  # (a script prints nothing while no host is ready)
            if colon and not slots.isdigit():
                raise ValueError("the host discovery script %s printed %r: expected host or host:slots"
                                 % (self._discovery_script, line))
            host_slots[host] = int(slots) if colon else self._default_slots
        return host_slots


class FixedHosts(HostDiscovery):
    """The same hosts every time (``-H`` of an elastic job without a discovery script)."""

    def __init__(self, host_slots):
        self._host_slots = dict(host_slots)

    def find_available_hosts_and_slots(self):
        return dict(self._host_slots)

    def set(self, host_slots):
        self._host_slots = dict(host_slots)


class HostState:
    """Whether a host is set aside after a failure, and until when (``cooldown_range``: the first
    wait's bounds, in seconds; without it, for good)."""

    def __init__(self, cooldown_range=None):
        if cooldown_range:
            lower, upper = cooldown_range
            if lower < DEFAULT_COOLDOWN_LOWER_LIMIT_SECONDS or upper > DEFAULT_COOLDOWN_UPPER_LIMIT_SECONDS \
                    or lower > upper:
                raise ValueError("the cooldown range must be lower upper with %d <= lower <= upper <= %d seconds: "
                                 "%s" % (DEFAULT_COOLDOWN_LOWER_LIMIT_SECONDS, DEFAULT_COOLDOWN_UPPER_LIMIT_SECONDS,
                                         list(cooldown_range)))
        self._cooldown_range = cooldown_range
        self._blacklisted = False
        self._blacklist_count = 0
        self._cooldown_period_end_ts = 0

    def blacklist(self):
        now = time.time()
        if self._blacklisted and self._cooldown_period_end_ts > now:
            return
        self._blacklisted = True
        if self._cooldown_range:
            lower, upper = self._cooldown_range
            self._blacklist_count += 1
            delay = lower * (1 << self._blacklist_count) + random.uniform(0, 1) * lower
            self._cooldown_period_end_ts = now + max(lower, min(upper, delay))

    def whitelist(self):
        self._blacklisted = False
        self._cooldown_period_end_ts = 0

    def is_blacklisted(self):
        return self._blacklisted

    def is_resurrected(self):
        """Whether its cooldown has passed (it may be offered again)."""
        return self._blacklisted and 0 < self._cooldown_period_end_ts <= time.time()


class HostManager:
    """The hosts available to the job now, in assignment order, without those set aside."""

    def __init__(self, discovery, cooldown_range=None):
        self._discovery = discovery
        self._cooldown_range = cooldown_range
        HostState(cooldown_range)  # (checks the range before the job starts)
        self._states = {}
        self._host_slots = {}
        self._order = []  # the hosts available, in the order they came

    def _state(self, host):
        if host not in self._states:
            self._states[host] = HostState(self._cooldown_range)
        return self._states[host]

    def update_available_hosts(self):
        """Asks the discovery; returns what changed (``HostUpdateResult``): hosts or slots added
        (or a host's cooldown over), removed."""
        host_slots = self._discovery.find_available_hosts_and_slots()
        self._order = [host for host in self._order if host in host_slots]  # (a host back later comes last)
        update = HostUpdateResult.no_update
        for host, slots in self._host_slots.items():
            if slots > host_slots.get(host, 0):
                update |= HostUpdateResult.removed
        for host, slots in host_slots.items():
            state = self._state(host)
            if state.is_resurrected():
                state.whitelist()
                update |= HostUpdateResult.added
            elif slots > self._host_slots.get(host, 0) and not state.is_blacklisted():
                update |= HostUpdateResult.added
            if host not in self._order:
                self._order.append(host)
        self._host_slots = host_slots
        return update

    @property
    def current_hosts(self):
        """``[(host, slots)]`` available now, not set aside, in assignment order."""
        return [(host, self._host_slots[host]) for host in self._order
                if host in self._host_slots and not self._state(host).is_blacklisted()]

    def count_available_slots(self):
        return sum(slots for _, slots in self.current_hosts)

    def blacklist(self, host):
        self._state(host).blacklist()

    def is_blacklisted(self, host):
        return self._state(host).is_blacklisted()
