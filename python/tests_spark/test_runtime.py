"""What a runtime outside the supported table is told: a Python older than 3.10 at import."""

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
