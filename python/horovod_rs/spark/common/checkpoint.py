"""A run's resumable state in the store: the framework's checkpoint file and ``state.json``.

Rank 0 writes, after every epoch, the checkpoint into one of two slots (``checkpoint-a``,
``checkpoint-b``, alternating), then ``state.json`` naming the slot with its SHA-256, the epochs done
and the history so far. Each file reaches the store atomically and ``state.json`` last, so a write
cut off at any point leaves the previous epoch's slot and state intact: a resume loses at most the
epoch in flight, and never reads a half-written checkpoint (its checksum would not match).
"""

import hashlib
import json
import os
import posixpath

STATE_FILE = "state.json"
SLOTS = ("checkpoint-a", "checkpoint-b")


class RunWriter:
    """Rank 0's side: writes checkpoints into the local run directory and syncs them to the store."""

    def __init__(self, local_run_dir, sync, extension):
        self.local_run_dir, self._sync, self._extension = local_run_dir, sync, extension
        self._next_slot = 0

    def next_path(self):
        """Where to write this epoch's checkpoint (a local file)."""
        return os.path.join(self.local_run_dir, SLOTS[self._next_slot] + self._extension)

    def commit(self, epochs_done, history, extra=None):
        """Records the checkpoint just written at ``next_path()`` as the run's state and syncs."""
        path = self.next_path()
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        state = {"epochs_done": epochs_done, "checkpoint": os.path.basename(path), "sha256": digest,
                 "history": history, "extra": extra or {}}
        if self._sync is not None:
            self._sync(self.local_run_dir, exclude=STATE_FILE)
        with open(os.path.join(self.local_run_dir, STATE_FILE + ".tmp"), "w") as f:
            json.dump(state, f)
        os.replace(os.path.join(self.local_run_dir, STATE_FILE + ".tmp"), os.path.join(self.local_run_dir, STATE_FILE))
        if self._sync is not None:
            self._sync(self.local_run_dir)
        self._next_slot = 1 - self._next_slot


def read_state(store, run_id):
    """``(state, checkpoint_bytes)`` of a run in the store, or None when it has none. A checkpoint
    that does not match its recorded checksum is an error naming the file."""
    if store is None or not store.saving_runs():
        return None
    run_path = store.get_run_path(run_id)
    state_path = posixpath.join(run_path, STATE_FILE)
    if not store.exists(state_path):
        return None
    state = json.loads(store.read(state_path))
    checkpoint_path = posixpath.join(run_path, state["checkpoint"])
    data = store.read(checkpoint_path)
    if hashlib.sha256(data).hexdigest() != state["sha256"]:
        raise ValueError("checkpoint %s does not match the checksum in %s: it is damaged; remove the run "
                         "directory %s (or use another run_id) to start over" % (checkpoint_path, state_path, run_path))
    return state, data
