"""Horovod's ``horovod.runner.common.util.timeout``: a deadline that names what it waited for."""

import time


class TimeoutException(Exception):
    def __init__(self, message):
        self.message = message
        super().__init__(message)


class Timeout:
    """``timeout`` seconds from now; ``message`` is formatted with the ``activity`` waited for."""

    def __init__(self, timeout, message):
        self._timeout = timeout
        self._timeout_at = time.time() + timeout
        self._message = message

    def remaining(self):
        return max(0, self._timeout_at - time.time())

    def timed_out(self):
        return time.time() > self._timeout_at

    def check_time_out_for(self, activity):
        """Raises ``TimeoutException`` once the deadline passed, naming ``activity``."""
        if self.timed_out():
            message = self._message.format(activity=activity)
            raise TimeoutException("%s%s Timeout after %s seconds." % (
                message, "" if message.rstrip().endswith(".") else ".", self._timeout))
