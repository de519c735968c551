"""``dpcausal cate``: the conditional average treatment effect under (ε, δ)-DP (DP-CATE)."""

from __future__ import annotations

from dpcausal.cli import options as o
from dpcausal.cli._run import run_release_command


def cate(
    spec: o.SpecOpt,
    data: o.DataOpt = None,
    out: o.OutOpt = None,
    ledger: o.LedgerOpt = None,
    seed: o.SeedOpt = None,
    dry_run: o.DryRunOpt = False,
    as_json: o.JsonOpt = False,
    quiet: o.QuietOpt = False,
    test_noise_seed: o.TestNoiseSeedOpt = None,
    engine: o.EngineOpt = None,
    engine_address: o.EngineAddressOpt = None,
) -> None:
    """Release τ(x) at query points or on a grid (R-/DR-learner, DP nuisances, GP or Gaussian noise)."""
    run_release_command("dpcausal.methods.cate", spec_path=spec, data=data, out=out, ledger=ledger, seed=seed,
                        dry_run=dry_run, as_json=as_json, quiet=quiet,
                        test_noise_seed=test_noise_seed, engine=engine,
                        engine_address=engine_address)
