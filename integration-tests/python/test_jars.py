"""horovod_rs.spark.jar_path and configure_builder, on each pyspark line `make test` runs."""

import os

import pytest
from pyspark.sql import SparkSession

import horovod_rs.spark
from horovod_rs.spark import jars


def test_spark_and_scala_versions_pick_a_line():
    assert jars.spark_line("3.5.9", "2.12.18") == "spark3.5_2.12"
    assert jars.spark_line("3.5.0", "2.13.8") == "spark3.5_2.13"
    assert jars.spark_line("4.3.0", "2.13.18") == "spark4_2.13"
    assert jars.spark_line("4.0.0", "2.13") == "spark4_2.13"
    with pytest.raises(RuntimeError, match=r"jars for Spark 3.5 and 4.x; this Spark is 3.4.1, which horovod-rs does "
                                           r"not support \(its ranks run as a barrier stage of a DataFrame"):
        jars.spark_line("3.4.1", "2.12.17")


def test_this_pyspark_gets_the_jar_make_built_for_it():
    # `make pyspark-test` names each line's jar build/<line>/libs/horovod-rs-<line>.jar.
    assert os.path.basename(os.environ[jars.JAR_ENV]) == "horovod-rs-%s.jar" % jars.spark_line()
    assert horovod_rs.spark.jar_path() == os.environ[jars.JAR_ENV]


def test_the_package_jar_matches_the_line(tmp_path, monkeypatch):
    monkeypatch.delenv(jars.JAR_ENV)
    monkeypatch.setattr(jars, "JARS_DIR", str(tmp_path))
    for line in ("spark3.5_2.12", "spark4_2.13"):
        (tmp_path / ("horovod-rs-%s-0.1.0.jar" % line)).write_bytes(b"")
    assert jars.jar_path("4.3.0", "2.13.18") == str(tmp_path / "horovod-rs-spark4_2.13-0.1.0.jar")
    assert jars.jar_path("3.5.9", "2.12.18") == str(tmp_path / "horovod-rs-spark3.5_2.12-0.1.0.jar")
    with pytest.raises(FileNotFoundError, match="no jar for spark3.5_2.13; it has horovod-rs-spark3.5_2.12-0.1.0.jar, "
                                                "horovod-rs-spark4_2.13-0.1.0.jar"):
        jars.jar_path("3.5.9", "2.13.8")


def test_a_development_install_says_where_jars_come_from(tmp_path, monkeypatch):
    monkeypatch.delenv(jars.JAR_ENV)
    monkeypatch.setattr(jars, "JARS_DIR", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="no jars .a development install.; install the wheel"):
        jars.jar_path()
    monkeypatch.setenv(jars.JAR_ENV, str(tmp_path / "missing.jar"))
    with pytest.raises(FileNotFoundError, match="HOROVOD_RS_JAR=.*missing.jar is not a file"):
        jars.jar_path()


def test_the_builder_gets_the_jar_and_plugin_once_beside_its_own(tmp_path):
    builder = SparkSession.Builder()
    builder.config("spark.jars", "/opt/other.jar").config("spark.plugins", "com.example.Plugin")
    jar = str(tmp_path / "horovod-rs.jar")
    configured = horovod_rs.spark.configure_builder(builder, jar=jar)
    configured = horovod_rs.spark.configure_builder(configured, jar=jar)
    assert configured._options["spark.jars"] == "/opt/other.jar," + jar
    assert configured._options["spark.plugins"] == "com.example.Plugin,horovod.rs.spark.HorovodPlugin"
