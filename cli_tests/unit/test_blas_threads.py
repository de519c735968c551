"""Issue 24: the command line's BLAS thread count — one on a machine of at most two cores (measured:
benchmarks/RESULTS.md, "BLAS threads"), the user's choice whenever they made one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dpcausal.cli.threads import (
    BLAS_VARIABLES,
    LIBRARY_VARIABLES,
    OVERRIDE,
    blas_threads,
    set_blas_threads,
)


def test_one_thread_on_two_cores_and_the_library_default_beyond() -> None:
    assert blas_threads({}, 1) == 1
    assert blas_threads({}, 2) == 1
    assert blas_threads({}, 8) is None  # not measured there: the library decides
    assert blas_threads({}, None) is None


def test_the_user_decides() -> None:
    assert blas_threads({OVERRIDE: "2"}, 2) == 2
    assert blas_threads({OVERRIDE: "3"}, 64) == 3
    for name in LIBRARY_VARIABLES:
        assert blas_threads({name: "2"}, 2) is None  # the library's own variable stands
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ValueError, match=OVERRIDE):
            blas_threads({OVERRIDE: bad}, 2)


def test_set_writes_every_library_variable_and_leaves_a_user_choice_alone() -> None:
    env: dict[str, str] = {}
    assert set_blas_threads(env, cores=2) == 1
    assert all(env[name] == "1" for name in BLAS_VARIABLES)
    assert "OMP_NUM_THREADS" not in env  # pyarrow's pool stays as it is
    env = {"OPENBLAS_NUM_THREADS": "2"}
    assert set_blas_threads(env, cores=2) is None
    assert env == {"OPENBLAS_NUM_THREADS": "2"}


def _blas_threads_in_cli_process(extra_env: dict[str, str]) -> list[int]:
    """The thread counts of every BLAS loaded by a ``dpcausal --version`` process that then
    imports numpy and scipy.linalg (as a run does)."""
    script = ("import sys\nsys.argv = ['dpcausal', '--version']\nfrom dpcausal.cli import main\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n"
              "import numpy, scipy.linalg\nfrom threadpoolctl import threadpool_info\n"
              "print([d['num_threads'] for d in threadpool_info() if d['user_api'] == 'blas'])")
    env = {k: v for k, v in os.environ.items()
           if k not in LIBRARY_VARIABLES and k != OVERRIDE}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**env, **extra_env}, check=True)
    return [int(x) for x in res.stdout.strip().splitlines()[-1].strip("[]").split(",")]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_the_cli_sets_the_blas_before_numpy_loads() -> None:
    cores = len(os.sched_getaffinity(0))
    expected = 1 if cores <= 2 else None
    counts = _blas_threads_in_cli_process({})
    if expected is not None:
        assert counts and all(c == expected for c in counts), counts
    assert all(c == 2 for c in _blas_threads_in_cli_process({OVERRIDE: "2"}))
    assert all(c == 2 for c in _blas_threads_in_cli_process({"OPENBLAS_NUM_THREADS": "2"}))
