"""Horovod's ``horovod.runner.elastic.constants``: messages scripts and tests match."""

RESET_LIMIT_EXCEEDED_MESSAGE = 'Horovod was shutdown because number of resets during elastic job exceeded limit: {}'
