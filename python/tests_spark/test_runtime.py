"""What a runtime outside the supported table is told: a Python older than 3.10 at import; and a
missing pyarrow, before any job."""

import os
import subprocess
import sys

import horovod_rs


def test_an_old_python_is_refused_at_import_naming_its_version():
    # No Python 3.9 here: the interpreter is made to report one before the package is imported.
    code = "import sys; sys.version_info = (3, 9, 18, 'final', 0); import horovod_rs"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(horovod_rs.__file__)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode != 0
    assert "ImportError: horovod_rs needs Python 3.10 or newer (its wheels: CPython 3.10, and abi3 for 3.11 " \
           "and later), but this is Python 3.9.18 (%s)" % sys.executable in done.stderr


def test_a_supported_python_imports():
    done = subprocess.run([sys.executable, "-c", "import horovod_rs"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_run_api_without_pyarrow_says_what_to_install_before_any_job(monkeypatch):
    import pytest

    from horovod_rs.spark.common.job import BarrierJob

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed: importing it raises ImportError
    with pytest.raises(ImportError, match=r"^horovod_rs\.spark\.run needs pyarrow on the driver and the executors "
                                          r".*pip install 'horovod_rs\[spark\]'"):
        with BarrierJob(spark=None, num_proc=2, description="horovod_rs.spark.run"):
            pass
