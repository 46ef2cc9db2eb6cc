"""Horovod's ``horovod.runner.elastic``: elastic jobs' coordinator, host discovery and driver."""
