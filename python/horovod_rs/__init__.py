"""horovod-rs for PySpark users: the Spark ML estimator of horovod-rs.jar, from Python."""

import sys

# pip's requires-python keeps the wheels off older Pythons; this names the problem for a copied
# package too, before a syntax or library error somewhere deeper would. (%-formatting: this
# module must parse on the Pythons it refuses.)
if sys.version_info < (3, 10):
    raise ImportError("horovod_rs needs Python 3.10 or newer (its wheels: CPython 3.10, and abi3 for 3.11 and "
                      "later), but this is Python %d.%d.%d (%s)" % (tuple(sys.version_info[:3]) + (sys.executable,)))


def __getattr__(name):
    # Horovod's ``horovod.run``, imported when first used: ``import horovod_rs.torch`` need not
    # load the launcher.
    if name == "run":
        from horovod_rs.runner import run

        return run
    raise AttributeError("module 'horovod_rs' has no attribute %r" % name)
