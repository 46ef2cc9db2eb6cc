"""Horovod's ``horovod.spark.driver``: the names of its launcher's services.

Horovod's Spark launcher runs a driver service that its tasks register with over the network, and
a task service in each task that runs the command the driver sends. horovod_rs's ranks meet in
the engine's rendezvous instead (docs/spark.md), so neither service exists here. Their classes
are named so that code importing them loads (Horovod's test utilities do); building one raises
``NotImplementedError`` saying why."""


def launcher_service(name):
    """A class named ``name`` whose construction raises ``NotImplementedError``."""

    def refuse(self, *args, **kwargs):
        raise NotImplementedError(
            "%s is a service of Horovod's Spark launcher; horovod_rs.spark.run and the estimators start "
            "their ranks without it (the ranks meet in the engine's rendezvous)" % name)

    return type(name, (), {"__init__": refuse, "__doc__": "Horovod's %s (not available in horovod_rs)." % name})
