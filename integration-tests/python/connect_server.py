"""A Spark Connect server for a test suite: the Spark driver of a real cluster, run by
``spark-submit`` as ``sbin/start-connect-server.sh`` runs it, but in the foreground and in a
process group of its own, so the suite that started it also ends it and everything it started.

Spark 4's pyspark carries the server; Spark 3.5's takes it from Maven Central
(``--packages org.apache.spark:spark-connect_<scala>:<version>``), of pyspark's version unless
``HOROVOD_RS_CONNECT_SERVER_VERSION`` names another patch release of the line (one a registry
serves).
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pyspark

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 300
# Where --packages keeps what it downloads: the build directory, so a server is fetched once.
IVY_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "build", "ivy")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _connect_package():
    """``--packages`` for a Spark whose install has no Connect server jar, else None."""
    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    jars = os.listdir(os.path.join(home, "jars"))
    if any(j.startswith("spark-connect_") for j in jars):
        return None
    scala = next(j for j in jars if j.startswith("scala-library-"))[len("scala-library-"):].rsplit(".", 2)[0]
    version = os.environ.get("HOROVOD_RS_CONNECT_SERVER_VERSION", pyspark.__version__)
    return "org.apache.spark:spark-connect_%s:%s" % (scala, version)


class ConnectServer:
    """``with ConnectServer(master, conf, work_dir) as server:`` a server at ``server.url``."""

    def __init__(self, master, conf, work_dir):
        self.port = free_port()
        self.url = "sc://localhost:%d" % self.port
        self._log_path = os.path.join(str(work_dir), "connect-server.log")
        home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
        command = [os.path.join(home, "bin", "spark-submit"), "--class", SERVER_CLASS, "--master", master,
                   "--conf", "spark.connect.grpc.binding.port=%d" % self.port,
                   "--conf", "spark.jars.ivy=%s" % IVY_DIR]
        package = _connect_package()
        if package:
            command += ["--packages", package]
        for key, value in conf.items():
            command += ["--conf", "%s=%s" % (key, value)]
        command.append("spark-internal")
        self._command = command
        self._process = None

    def __enter__(self):
        self._log = open(self._log_path, "w")
        self._process = subprocess.Popen(self._command, stdout=self._log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.time() + START_TIMEOUT_S
        while not self._listening():
            if self._process.poll() is not None or time.time() > deadline:
                self.__exit__()
                raise RuntimeError("the Spark Connect server did not start:\n" + self.log_tail())
            time.sleep(0.5)
        return self

    def _listening(self):
        try:
            socket.create_connection(("localhost", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def log_tail(self, lines=60):
        with open(self._log_path) as f:
            return "".join(f.readlines()[-lines:])

    def __exit__(self, *exc):
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        self._log.close()
        return False


if __name__ == "__main__":
    # `python connect_server.py MASTER JAR`: a server for trying things by hand; Ctrl-C stops it.
    with ConnectServer(sys.argv[1], {"spark.jars": sys.argv[2], "spark.plugins": "horovod.rs.spark.HorovodPlugin",
                                     "spark.ui.enabled": "false"}, tempfile.mkdtemp()) as server:
        print(server.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
