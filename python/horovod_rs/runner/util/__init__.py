"""Horovod's ``horovod.runner.util`` helpers that scripts and tests import."""
