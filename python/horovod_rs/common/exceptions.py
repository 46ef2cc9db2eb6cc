"""Horovod's exceptions (``horovod.common.exceptions``)."""


class HorovodInternalError(RuntimeError):
    """A collective failed in the engine (a rank left or failed, a mismatch, a timeout's verdict)."""


class HostsUpdatedInterrupt(RuntimeError):
    """An elastic job's signal that ranks wait to join (``State.commit()`` raises it on every rank):
    ``hvd.elastic.run`` joins the larger world. ``skip_sync``: whether the state need not be
    synced afterwards."""

    def __init__(self, skip_sync):
        super().__init__(skip_sync)
        self.skip_sync = skip_sync
