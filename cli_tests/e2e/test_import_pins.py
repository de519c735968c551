"""Issue 24: a run imports only what it needs — the heavy modules each command's ``--dry-run`` and
release load are pinned.

Start-up is most of a small run (importing scipy.stats alone costs more CPU than owl's fit at 10⁴
rows), so a heavy import that creeps onto a path it does not need must be a visible change. For
each command one fresh interpreter runs the sample spec with ``--dry-run``, records which of
:data:`HEAVY` are loaded, then runs the release (into a temporary directory and ledger) and records
them again. The release uses a fixed test noise seed: what two-stage loads depends on whether the
noised ℓ1 constraint binds. A change that loads more (or, after an improvement, fewer) updates the
pin here, on purpose.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_tests.helpers import REPO

HEAVY = ("pandas", "pyarrow", "scipy.special", "scipy.stats", "scipy.optimize",
         "scipy.integrate", "scipy.linalg", "matplotlib", "cvxpy", "sklearn", "dask",
         "distributed")
"""Modules whose import costs a noticeable share of a small run (0.1-0.8 CPU-s each here)."""

BASE = ("pandas", "pyarrow")
"""What every release loads: the table reader."""

DRY_RUN: dict[str, tuple[str, ...]] = {
    # a plan reads a CSV's header and row count with numpy (dpcausal.io.csv_scan), not pyarrow
    "select-policy": (),
    # the analytic Gaussian's σ and the Gaussian half-widths in plain floats
    # (dpcausal.mechanisms.normal), not scipy.special/optimize
    "cate": (),
    # the panel's public structure (n, T, T0) is read from the unit and time values as Arrow
    # arrays (dpcausal.commands.synth_control.layout), not pandas
    "synth-control": ("pyarrow",),
    # the ℓ2-Laplace projection half-width in numpy (dpcausal.mechanisms.projection_law)
    "owl": (),
    # the ℓ2-Laplace norm quantile of the accuracy bound: solved without scipy (integer d)
    "two-stage": (),
}

NO_PANDAS_DRY_RUN = ("select-policy", "cate", "synth-control", "owl", "two-stage")
"""Commands whose ``--dry-run`` must not import pandas (issue 24: importing it alone costs more
than the whole plan). synth-control's plan reads the panel's unit and time values with pyarrow."""

RELEASE: dict[str, tuple[str, ...]] = {
    "select-policy": (*BASE, "scipy.special", "scipy.linalg", "matplotlib"),
    # scipy.stats only for the queries-mode γ search (its Sobol points), not this function release
    "cate": (*BASE, "scipy.special", "scipy.linalg", "matplotlib"),
    "synth-control": (*BASE, "scipy.special", "matplotlib"),
    # the noise law's half-width in numpy: no scipy at all; rule.png drawn with Pillow
    # (dpcausal.commands.common.rule_png), not matplotlib
    "owl": BASE,
    # with this noise the ℓ1 constraint of stage 2 binds: cvxpy (the interior-point warm start,
    # which imports scipy.stats/optimize/integrate/linalg); a draw where it does not bind loads
    # none of them; rule.png drawn with Pillow, as owl's
    "two-stage": (*BASE, "scipy.special", "scipy.stats", "scipy.optimize", "scipy.integrate",
                  "scipy.linalg", "cvxpy"),
}

SCRIPT = """
import json, sys
from dpcausal.cli import app
heavy = {heavy!r}
loaded = {{}}
for name, args in (("dry_run", {dry!r}), ("release", {release!r})):
    try:
        app(args)
    except SystemExit as exc:
        if exc.code:
            raise
    loaded[name] = sorted(m for m in heavy if m in sys.modules)
print(json.dumps(loaded))
"""


@pytest.mark.parametrize("command", sorted(DRY_RUN))
def test_heavy_imports_of_dry_run_and_release_are_pinned(command: str, tmp_path: Path) -> None:
    spec = f"configs/{command.replace('-', '_')}.yaml"
    dry = [command, "--spec", spec, "--ledger", str(tmp_path / "ledger.jsonl"), "--dry-run",
           "--quiet"]
    release = [command, "--spec", spec, "--ledger", str(tmp_path / "ledger.jsonl"),
               "--out", str(tmp_path / "out"), "--quiet", "--test-noise-seed", "1"]
    script = SCRIPT.format(heavy=HEAVY, dry=dry, release=release)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=REPO, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert loaded["dry_run"] == sorted(DRY_RUN[command]), loaded
    if command in NO_PANDAS_DRY_RUN:
        assert "pandas" not in loaded["dry_run"], loaded
    assert loaded["release"] == sorted(RELEASE[command]), loaded


def test_two_stage_in_memory_run_imports_no_scipy() -> None:
    # issue 24: scipy.special only for the weights that use it (ipw-logit, ebw); ipw-known,
    # uniform and ipw-rct releases whose ℓ1 ball does not bind (the 10⁶-row benchmark's) load no
    # scipy at all, so the run's own modules must not import it
    script = ("import sys\nimport dpcausal.commands.two_stage.estimate\n"
              "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')))")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=REPO, check=True)
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout
