"""Spark integration of horovod-rs."""
