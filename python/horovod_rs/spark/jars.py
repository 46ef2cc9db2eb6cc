"""The horovod-rs jars this package carries, and a ``SparkSession.builder`` that uses them.

The JVM half of horovod-rs (the Spark plugin, the engine's native library, the estimator that
``horovod_rs.spark.ml`` wraps) is a jar per Spark line: Spark 3.5 with Scala 2.12 or 2.13, and
Spark 4.x with Scala 2.13. The wheel ``make dist`` builds carries them all under
``horovod_rs/jars/``; ``jar_path()`` picks the one for this pyspark::

    from pyspark.sql import SparkSession
    import horovod_rs.spark

    spark = horovod_rs.spark.configure_builder(SparkSession.builder.appName("train")).getOrCreate()

A session that already runs (a notebook's, Databricks') keeps the jars it started with: there,
install the jar as a cluster library instead (docs/databricks.md). ``HOROVOD_RS_JAR`` names a jar
to use instead of the package's (a development install from ``./python`` carries none).
"""

import glob
import os
import re

JAR_ENV = "HOROVOD_RS_JAR"
PLUGIN = "horovod.rs.spark.HorovodPlugin"
JARS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jars")

# The Scala binary version each Spark line ships with, when the Spark install does not show it.
_DEFAULT_SCALA = {"3.5": "2.12", "4": "2.13"}


def spark_line(spark_version=None, scala_version=None):
    """The Spark line of a Spark and Scala version, e.g. ``spark3.5_2.12``; by default pyspark's
    own version and the Scala of its Spark install."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    parts = spark_version.split(".")
    spark = "3.5" if parts[:2] == ["3", "5"] else parts[0] if parts[0] == "4" else None
    if spark is None:
        raise RuntimeError("horovod-rs has jars for Spark 3.5 and 4.x; this Spark is %s, which horovod-rs does not "
                           "support (its ranks run as a barrier stage of a DataFrame, which came with Spark 3.5)"
                           % spark_version)
    scala = scala_version or _installed_scala() or _DEFAULT_SCALA[spark]
    return "spark%s_%s" % (spark, ".".join(scala.split(".")[:2]))


def _installed_scala():
    """The Scala version of the Spark install pyspark runs (its scala-library jar), or None."""
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    for jar in glob.glob(os.path.join(home, "jars", "scala-library-*.jar")):
        found = re.search(r"scala-library-(\d+\.\d+)", os.path.basename(jar))
        if found:
            return found.group(1)
    return None


def jar_path(spark_version=None, scala_version=None):
    """The path of the horovod-rs jar for this pyspark's Spark line (or the given versions):
    ``HOROVOD_RS_JAR`` if set, else the package's own."""
    named = os.environ.get(JAR_ENV)
    if named:
        if not os.path.isfile(named):
            raise FileNotFoundError("%s=%s is not a file" % (JAR_ENV, named))
        return named
    line = spark_line(spark_version, scala_version)
    if not os.path.isdir(JARS_DIR):
        raise FileNotFoundError("this horovod_rs has no jars (a development install); install the wheel that "
                                "`make dist` builds, or set %s to a jar (`make jars` builds them)" % JAR_ENV)
    found = sorted(glob.glob(os.path.join(JARS_DIR, "horovod-rs-%s-*.jar" % line)))
    if not found:
        have = sorted(os.path.basename(jar) for jar in glob.glob(os.path.join(JARS_DIR, "*.jar")))
        raise FileNotFoundError("horovod_rs has no jar for %s; it has %s" % (line, ", ".join(have) or "none"))
    return found[-1]


def configure_builder(builder=None, jar=None):
    """Adds the horovod-rs jar (``jar``, else ``jar_path()``) to ``spark.jars`` and its plugin to
    ``spark.plugins`` of a ``SparkSession.Builder`` (by default ``SparkSession.builder``), keeping
    what either already lists; returns the builder."""
    if builder is None:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder
    options = getattr(builder, "_options", {})  # what the builder has been given so far
    return (builder.config("spark.jars", _add(options.get("spark.jars"), jar or jar_path()))
            .config("spark.plugins", _add(options.get("spark.plugins"), PLUGIN)))


def _add(listed, item):
    """A comma-separated Spark list with ``item`` in it once."""
    items = [part for part in (listed or "").split(",") if part]
    return ",".join(items if item in items else items + [item])
