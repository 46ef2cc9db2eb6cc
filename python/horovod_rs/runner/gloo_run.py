"""Horovod's ``horovod.runner.gloo_run``: the names of it that scripts and tests use. horovod_rs's
ranks are started by ``horovodrs`` (``horovod_rs.runner``) and its elastic driver
(``horovod_rs.runner.elastic.driver``); there is no Gloo to run."""


def _get_min_start_hosts(settings):
    """How many hosts an elastic job waits for before it starts: one. (Horovod waits for two when
    no network interface is given, to find interfaces the hosts share; horovod_rs's ranks connect
    on their route to each other.)"""
    return 1
