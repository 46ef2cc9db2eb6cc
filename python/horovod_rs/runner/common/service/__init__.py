"""Horovod's ``horovod.runner.common.service``."""
