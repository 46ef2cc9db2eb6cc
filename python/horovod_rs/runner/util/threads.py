"""Horovod's ``horovod.runner.util.threads.in_thread``."""

import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Runs ``target(*args)`` in a new thread and returns the thread; ``silent`` swallows the
    target's exceptions."""
    if not isinstance(args, tuple):
        raise ValueError("args must be a tuple, not %s; for a single argument use (arg,)" % type(args))

    def run(*values):
        try:
            target(*values)
        except Exception:
            if not silent:
                raise

    thread = threading.Thread(target=run, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
