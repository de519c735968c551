"""Issue 21: the documentation's notebook example runs as shipped (plan, release, plot, apply,
save, a refused over-budget release, a lowered cap, an audit), from the repository root, as a user
would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "api_quickstart.py"


def test_the_api_quickstart_runs_refuses_an_over_budget_release_and_audits(tmp_path: Path) -> None:
    env = {**os.environ, "MPLBACKEND": "Agg", "TMPDIR": str(tmp_path)}
    run = subprocess.run([sys.executable, str(EXAMPLE)], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "refused (exit code 3)" in run.stdout
    assert "lower {'epsilon': 12.0, 'delta': 0.0}" in run.stdout
    assert "pass max privacy loss" in run.stdout
    [work] = list(tmp_path.glob("dpcausal-quickstart-*"))
    assert (work / "owl_rule.png").stat().st_size > 0
    assert sorted(p.name for p in (work / "owl").iterdir()) == [
        "receipt.json", "recommendations.csv", "rule.json", "rule.png"]
    assert (work / "ledger.jsonl").read_text().count("\n") >= 4  # init, cap, release, cap
