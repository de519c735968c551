"""``dpcausal owl``: a private individualized treatment rule by outcome weighted learning."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from dpcausal.cli import options as o
from dpcausal.cli._run import guarded, run_release_command, status, stdout_console
from dpcausal.errors import DataError, SpecError

ApplyOpt = Annotated[
    Path | None,
    typer.Option("--apply", help="Apply a saved rule.json to --data (no privacy cost, no ledger).",
                 dir_okay=False),
]


def owl(
    spec: Annotated[Path | None, typer.Option("--spec", help="The YAML spec of the run.",
                                              dir_okay=False)] = None,
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
    """Release a DP treatment rule (DP-wERM, output perturbation), or --apply a saved one."""
    if apply is not None:
        guarded(lambda: _apply(apply, spec, data, out, as_json, quiet))
        return
    if spec is None:
        guarded(_missing_spec)
        return
    run_release_command("dpcausal.methods.owl", spec_path=spec, data=data, out=out, ledger=ledger,
                        seed=seed, dry_run=dry_run, as_json=as_json, quiet=quiet,
                        test_noise_seed=test_noise_seed, engine=engine,
                        engine_address=engine_address)


def _missing_spec() -> None:
    raise SpecError("--spec SPEC.yaml is required (or --apply RULE --data FILE --out DIR)")


def _apply(rule_path: Path, spec_path: Path | None, data: Path | None, out: Path | None,
           as_json: bool, quiet: bool) -> None:
    """Post-processing: score new rows with a released rule; spends nothing."""
    from dpcausal.io.tables import inspect_table, read_table
    from dpcausal.io.writers import atomic_write, csv_bytes, parquet_bytes
    from dpcausal.methods import owl as owl_method

    if spec_path is not None and (data is None or out is None):
        from dpcausal.spec.load import load_spec
        from dpcausal.spec.owl import OwlSpec

        spec, _ = load_spec(spec_path, OwlSpec)
        data = data or spec.owl.apply_to
        out = out or spec.output.dir
    if data is None or out is None:
        raise SpecError("--apply needs --data NEW_ROWS and --out DIR (or a --spec that names them)")
    try:
        doc = json.loads(Path(rule_path).read_text())
    except FileNotFoundError as exc:
        raise DataError(f"{rule_path}: rule file not found; check the --apply path") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{rule_path}: cannot read the rule file as JSON ({exc})") from exc
    if spec_path is not None:
        from dpcausal.spec.load import load_spec
        from dpcausal.spec.owl import OwlSpec

        training = load_spec(spec_path, OwlSpec)[0].data.path
        if training is not None and owl_method._same_file(data, training):
            raise SpecError(
                f"--data {data} is the spec's training data; recommendations for the training rows "
                "are functions of their own sensitive covariates and are not covered by the guarantee"
            )
    info = inspect_table(data, "data file to score")
    with status("dpcausal owl: applying rule", quiet or as_json):
        frame = read_table(data, list(info.columns), "data file to score")
        recs = owl_method.apply_rule(doc, frame, data)
    written = [Path(out) / "recommendations.csv"]
    atomic_write(written[0], csv_bytes(recs))
    if info.format == "parquet":
        written.append(Path(out) / "recommendations.parquet")
        atomic_write(written[1], parquet_bytes(recs))
    summary = {"rows": len(recs), "output_paths": [str(p) for p in written],
               "privacy_cost": "none (post-processing of a released rule)"}
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    elif not quiet:
        stdout_console().print(
            f"applied {rule_path} to {len(recs)} rows (post-processing, no privacy cost); "
            f"wrote {', '.join(map(str, written))}", markup=False)
