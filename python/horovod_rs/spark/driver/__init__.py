"""Horovod's ``horovod.spark.driver``: the names of its launcher's services.

Horovod's Spark launcher runs a driver service that its tasks register with over the network, and
a task service in each task that runs the command the driver sends. horovod_rs's ranks meet in
the engine's rendezvous instead (docs/spark.md), so neither service exists here. Their classes
are named so that code importing them loads (Horovod's test utilities do); building one raises
``NotImplementedError`` saying why. So do the launcher's functions that drive them (``rsh``, the
tasks' ``_task_fn`` and exec functions)."""


def _refuse(name):
    raise NotImplementedError(
        "%s is a part of Horovod's Spark launcher; horovod_rs.spark.run and the estimators start "
        "their ranks without it (the ranks meet in the engine's rendezvous)" % name)


def launcher_service(name):
    """A class named ``name`` whose construction raises ``NotImplementedError``."""

    def refuse(self, *args, **kwargs):
        _refuse(name)

    return type(name, (), {"__init__": refuse, "__doc__": "Horovod's %s (not available in horovod_rs)." % name})


def launcher_function(name):
    """A function named ``name`` whose call raises ``NotImplementedError``."""

    def refuse(*args, **kwargs):
        _refuse(name)

    refuse.__name__ = refuse.__qualname__ = name.rsplit(".", 1)[-1]
    refuse.__doc__ = "Horovod's %s (not available in horovod_rs)." % name
    return refuse
