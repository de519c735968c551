"""Spend of repeated daily releases under the ledger's ``basic`` and ``pld`` accountants (issue 22).

For each command's example spec in configs/ (run against sample_data/, as the README does), builds
the run's privacy plan (no data row is read: only the public row count and side files), then
composes 1, 10, 50 and 365 identical releases with each accountant, exactly as a ledger would
(:mod:`dpcausal.accounting.accountant`). ``pld`` is read at the spec's cap δ (``ledger.budget``)
and, for comparison, at δ = 1e-6 for the specs whose cap δ is 0 (where PLD cannot help). Prints a
Markdown table (pasted into benchmarks/RESULTS.md). Run from the repository root:

    python benchmarks/ledger_composition.py
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

from dpcausal.accounting.accountant import Accountant, RunCost
from dpcausal.accounting.budget import Budget
from dpcausal.io import tables
from dpcausal.pipeline import load_side_inputs
from dpcausal.rng import make_rng
from dpcausal.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"select_policy": "select_policy", "cate": "cate", "synth_control": "synth_control",
            "owl": "owl", "two_stage": "two_stage"}
RELEASES = (1, 10, 50, 365)
COMPARE_DELTA = 1e-6


def plan_of(config: str, module: str) -> tuple[Any, Budget]:
    """The privacy plan of ``configs/<config>.yaml`` and its ledger cap."""
    method = importlib.import_module(f"dpcausal.commands.{module}.method").METHOD
    spec, _ = load_spec(ROOT / "configs" / f"{config}.yaml", method.spec_model)
    info = tables.inspect_table(spec.data.path)
    plan = method.plan(spec, info.n_rows, load_side_inputs(method, spec), rng=make_rng(0))
    assert spec.ledger is not None
    return plan, Budget(spec.ledger.budget.epsilon, spec.ledger.budget.delta)


def spend(run: RunCost, k: int, name: str, delta: float) -> tuple[Budget, float]:
    """The spend of ``k`` releases of ``run`` and the seconds the accountant took."""
    start = time.perf_counter()
    total = Accountant(name).total()  # type: ignore[arg-type]
    total.add_all([run] * k)
    return total.spent(delta), time.perf_counter() - start


def fmt(b: Budget) -> str:
    return f"{b.epsilon:.4g} / {b.delta:.2g}"


def main() -> None:
    import os

    os.chdir(ROOT)
    print("| command (spec) | per release (ε / δ) | cap (ε / δ) | releases | basic (ε / δ) "
          "| pld at cap δ (ε / δ) | pld at δ = 1e-6 (ε) | pld time (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for config, module in COMMANDS.items():
        plan, cap = plan_of(config, module)
        run = RunCost.from_plan(plan)
        for k in RELEASES:
            basic, _ = spend(run, k, "basic", cap.delta)
            pld, secs = spend(run, k, "pld", cap.delta)
            compare = "" if cap.delta > 0 else f"{spend(run, k, 'pld', COMPARE_DELTA)[0].epsilon:.4g}"
            print(f"| {config} | {fmt(run.basic)} | {fmt(cap)} | {k} | {fmt(basic)} | {fmt(pld)} "
                  f"| {compare} | {secs:.2f} |")


if __name__ == "__main__":
    main()
