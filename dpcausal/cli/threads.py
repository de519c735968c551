"""How many threads the BLAS (OpenBLAS) of a ``dpcausal`` process uses (issue 24).

OpenBLAS starts one thread per core and its idle threads spin while they wait for work. On the
2-core machines this was measured on, one thread was never slower and usually faster for every
command, and it stayed steady when other processes shared the cores (benchmarks/RESULTS.md,
"BLAS threads"). So on a machine with at most :data:`SPIN_CORES` cores the command line asks for
one BLAS thread; on a larger machine it leaves the library's own choice, which was not measured.

The user decides when they say so: ``DPCAUSAL_BLAS_THREADS=N`` sets N threads, and any of the
libraries' own variables (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``...)
already set in the environment is left as it is. The setting goes into the environment before
numpy is first imported (the command line imports it only once a command runs), so it reaches
every BLAS the process loads later (numpy's and scipy's) and the processes it starts.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

SPIN_CORES = 2
"""Up to this many cores, one BLAS thread is the default (measured)."""

OVERRIDE = "DPCAUSAL_BLAS_THREADS"
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS")
"""What the BLAS libraries read at load time, and what the choice is written to. Not
``OMP_NUM_THREADS``: pyarrow sizes its decoding pool by it (one thread made owl's 1M-row Parquet
run 7 % slower in wall time, 4 pairs), and OpenBLAS reads its own variable first."""
LIBRARY_VARIABLES = (*BLAS_VARIABLES, "OMP_NUM_THREADS")
"""Any of these already set means the user chose: left as it is."""


def blas_threads(environ: MutableMapping[str, str], cores: int | None) -> int | None:
    """The number of BLAS threads to ask for, or None to leave the libraries' choice.

    Raises
    ------
    ValueError
        When ``DPCAUSAL_BLAS_THREADS`` is not a positive integer.
    """
    value = environ.get(OVERRIDE)
    if value is not None:
        try:
            threads = int(value)
        except ValueError:
            threads = 0
        if threads < 1:
            raise ValueError(f"{OVERRIDE}={value!r}: set it to a positive whole number of "
                             "threads (e.g. 1 or 2), or unset it")
        return threads
    if any(name in environ for name in LIBRARY_VARIABLES):
        return None  # the user chose already
    if cores is not None and cores <= SPIN_CORES:
        return 1
    return None


def usable_cores() -> int | None:
    """The cores this process may run on (its CPU affinity; the machine's count without one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count()


def set_blas_threads(environ: MutableMapping[str, str] | None = None,
                     cores: int | None = None) -> int | None:
    """Write the choice of :func:`blas_threads` into ``environ`` (default ``os.environ``) for
    ``cores`` (default :func:`usable_cores`) and return it."""
    env = os.environ if environ is None else environ
    threads = blas_threads(env, usable_cores() if cores is None else cores)
    if threads is not None:
        for name in BLAS_VARIABLES:
            env[name] = str(threads)
    return threads
