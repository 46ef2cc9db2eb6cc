"""Horovod's ``horovod.runner.common``: the launcher's helpers that scripts and tests import."""
