"""``dpcausal two-stage``: a private treatment rule from observational data (DP-2ERM)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpcausal.cli import options as o
from dpcausal.cli._apply import apply_saved_rule
from dpcausal.cli._run import guarded, run_release_command
from dpcausal.errors import SpecError

ApplyOpt = Annotated[
    Path | None,
    typer.Option("--apply", help="Apply a saved rule.json to --data (no privacy cost, no ledger).",
                 dir_okay=False, metavar="RULE"),
]


def two_stage(
    spec: Annotated[Path | None, typer.Option("--spec", help="The YAML spec of the run.",
                                              dir_okay=False, metavar="FILE")] = None,
    data: o.DataOpt = None,
    out: o.OutOpt = None,
    ledger: o.LedgerOpt = None,
    seed: o.SeedOpt = None,
    dry_run: o.DryRunOpt = False,
    as_json: o.JsonOpt = False,
    quiet: o.QuietOpt = False,
    apply: ApplyOpt = None,
    test_noise_seed: o.TestNoiseSeedOpt = None,
    engine: o.EngineOpt = None,
    engine_address: o.EngineAddressOpt = None,
) -> None:
    """Release a DP treatment rule (balancing weights + objective-perturbed ERM), or --apply one."""
    if apply is not None:
        guarded(lambda: _apply(apply, data, out, as_json, quiet), as_json=as_json)
        return
    if spec is None:
        guarded(_missing_spec, as_json=as_json)
        return
    run_release_command("dpcausal.methods.two_stage", spec_path=spec, data=data, out=out, ledger=ledger,
                        seed=seed, dry_run=dry_run, as_json=as_json, quiet=quiet,
                        test_noise_seed=test_noise_seed, engine=engine,
                        engine_address=engine_address)


def _missing_spec() -> None:
    raise SpecError("--spec SPEC.yaml is required (or --apply RULE --data FILE --out DIR)")


def _apply(rule_path: Path, data: Path | None, out: Path | None, as_json: bool,
           quiet: bool) -> None:
    """Post-processing: score new rows with a released rule; spends nothing."""
    from dpcausal.methods import two_stage as method

    apply_saved_rule("two-stage", method.apply_rule, rule_path=rule_path, data=data, out=out,
                     training=None, as_json=as_json, quiet=quiet)
