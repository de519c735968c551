"""Whether numpy asks the kernel for transparent huge pages, per command (issue 24).

numpy advises the kernel to back every large array with 2 MB transparent huge pages
(``madvise(MADV_HUGEPAGE)``). Where the kernel's THP ``defrag`` setting is ``madvise`` (the default
of many distributions, and of the machine this was measured on), the first touch of such an array
may stall while the kernel compacts memory to find a free 2 MB page, a cost in system time that
grows with how fragmented the machine's memory is (how long it has been running other work), not
with the command. A command that makes a few n × p arrays and streams over each of them a couple
of times gains little from the larger pages and pays the stalls: two-stage at 10⁶ rows spent 0.2–0.9
system CPU-s on them, 0.24–0.31 with ordinary pages (benchmarks/RESULTS.md, "two-stage at 10⁶
rows: huge pages"). owl joined it once its Newton passes were fused (each reads the design matrix
once, so the larger pages' fewer TLB misses no longer pay for the stalls): at 10⁶ × 20, 1.53
(1.44–1.62) CPU-s against 1.68 (1.43–2.00) with huge pages, system time 0.28 against 0.48 (10
interleaved pairs; benchmarks/RESULTS.md, "round 3: fused passes"). For select-policy and
synth-control the same measurement was mixed (within the noise either way), and cate was not
measured, so they keep numpy's default.

So the command line turns numpy's huge pages off for the commands in :data:`ORDINARY_PAGES`, by
writing numpy's own variable ``NUMPY_MADVISE_HUGEPAGE=0`` into the environment before numpy is
first imported (as :mod:`dpcausal.cli.threads` does for the BLAS). The user decides when they say
so: ``NUMPY_MADVISE_HUGEPAGE`` already set (``1`` or ``0``) is left as it is. No result depends on
it: the page size changes how memory is mapped, never a value.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping, Sequence

VARIABLE = "NUMPY_MADVISE_HUGEPAGE"
ORDINARY_PAGES = frozenset({"two-stage", "owl"})
"""Commands measured faster and steadier without numpy's huge pages."""


def command_of(argv: Sequence[str]) -> str | None:
    """The command a ``dpcausal`` argument list runs: its first argument that is not an option
    (the root takes only flags), or None."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def set_numpy_hugepages(argv: Sequence[str], environ: MutableMapping[str, str] | None = None
                        ) -> bool:
    """Write ``NUMPY_MADVISE_HUGEPAGE=0`` into ``environ`` (default ``os.environ``) when ``argv``
    runs a command of :data:`ORDINARY_PAGES` and the user set no value; whether it did."""
    env = os.environ if environ is None else environ
    if VARIABLE in env or command_of(argv) not in ORDINARY_PAGES:
        return False
    env[VARIABLE] = "0"
    return True
