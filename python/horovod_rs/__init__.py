"""horovod-rs for PySpark users: the Spark ML estimator of horovod-rs.jar, from Python."""

import sys

# pip's requires-python keeps the wheels off older Pythons; this names the problem for a copied
# package too, before a syntax or library error somewhere deeper would. (%-formatting: this
# module must parse on the Pythons it refuses.)
if sys.version_info < (3, 10):
    raise ImportError("horovod_rs needs Python 3.10 or newer (its wheels: CPython 3.10, and abi3 for 3.11 and "
                      "later), but this is Python %d.%d.%d (%s)" % (tuple(sys.version_info[:3]) + (sys.executable,)))
