"""Horovod's ``horovod.runner.mpi_run`` queries of the host's MPI: scripts and Horovod's tests
branch on them. horovod_rs launches without MPI (``horovodrs``); these only say which ``mpirun``
is on the ``PATH``, as Horovod's do."""

import subprocess

_OMPI_IMPL = "OpenMPI"
_SMPI_IMPL = "SpectrumMPI"
_MPICH_IMPL = "MPICH"
_IMPI_IMPL = "IntelMPI"
_UNKNOWN_IMPL = "Unknown"
_MISSING_IMPL = "Missing"


def _get_mpi_implementation(env=None):
    """Which MPI ``mpirun --version`` names (one of the ``_*_IMPL`` values)."""
    try:
        done = subprocess.run(["mpirun", "--version"], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return _MISSING_IMPL
    if done.returncode != 0:
        return _UNKNOWN_IMPL
    output = done.stdout + done.stderr
    for marks, impl in ((("Open MPI", "OpenRTE"), _OMPI_IMPL), (("IBM Spectrum MPI",), _SMPI_IMPL),
                        (("MPICH",), _MPICH_IMPL), (("Intel(R) MPI",), _IMPI_IMPL)):
        if any(mark in output for mark in marks):
            return impl
    return _UNKNOWN_IMPL


def is_open_mpi(env=None):
    return _get_mpi_implementation(env) == _OMPI_IMPL


def is_spectrum_mpi(env=None):
    return _get_mpi_implementation(env) == _SMPI_IMPL


def is_mpich(env=None):
    return _get_mpi_implementation(env) == _MPICH_IMPL


def is_intel_mpi(env=None):
    return _get_mpi_implementation(env) == _IMPI_IMPL
