"""``dpcausal select-policy``: release one policy from a public library (certified DR utilities)."""

from __future__ import annotations

from dpcausal.cli import options as o
from dpcausal.cli._run import run_release_command


def select_policy(
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
    """Release one policy from a public library by the exponential mechanism (pure ε-DP).

    Utilities are sums of doubly robust (AIPW) scores over the scoring block; the sensitivity is
    certified for nuisances learned on the same data (Δ_cert = max{2B_ψ, n·ρ*}).
    """
    run_release_command("dpcausal.methods.select_policy", spec_path=spec, data=data, out=out, ledger=ledger,
                        seed=seed, dry_run=dry_run, as_json=as_json, quiet=quiet,
                        test_noise_seed=test_noise_seed, engine=engine,
                        engine_address=engine_address)
