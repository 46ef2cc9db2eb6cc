"""Horovod's exceptions (``horovod.common.exceptions``)."""


class HorovodInternalError(RuntimeError):
    """A collective failed in the engine (a rank left or failed, a mismatch, a timeout's verdict)."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's elastic mode's signal that the hosts changed; horovod_rs has no elastic mode, so it
    is never raised, only importable."""

    def __init__(self, skip_sync):
        super().__init__(skip_sync)
        self.skip_sync = skip_sync
