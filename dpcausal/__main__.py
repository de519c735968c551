"""``python -m dpcausal`` and the ``dpcausal`` console script.

:func:`main` imports the command line (typer, pydantic, the pipeline: some 10⁵ objects, no garbage)
with Python's cyclic garbage collector paused, then moves those objects to the collector's
permanent generation (:func:`gc.freeze`), so that neither the imports nor any later collection
traverses them: 0.03–0.06 CPU-s of every run's start-up (≈ 10 % of a ``--dry-run``; issue 24,
benchmarks/RESULTS.md). The collector is on again before any command runs (unless the caller had
turned it off), so a run's own cyclic garbage is collected as usual.
"""

from __future__ import annotations

import gc


def main() -> None:
    """Import the CLI with the collector paused and its objects frozen, then run it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        from dpcausal.cli import main as run_cli

        gc.freeze()
    finally:
        if enabled:
            gc.enable()
    run_cli()


if __name__ == "__main__":
    main()
