"""One CLI command per entry of :data:`dpcausal.commands.COMMANDS`, built from the entry alone.

Every release command takes the options of DESIGN §3; a command with an engine path also takes
``--engine``/``--engine-address``, and one that releases a rule also ``--apply RULE`` (then
``--spec`` is optional). Nothing here imports the command's package until the command runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from dpcausal.cli import options as o
from dpcausal.cli._apply import apply_saved_rule
from dpcausal.cli._run import guarded, run_release_command
from dpcausal.commands import Command
from dpcausal.errors import SpecError

OptionalSpecOpt = Annotated[
    Path | None, typer.Option("--spec", help="The YAML spec of the run.", dir_okay=False,
                              metavar="FILE")
]
ApplyOpt = Annotated[
    Path | None,
    typer.Option("--apply", help="Apply a saved rule.json to --data (no privacy cost, no ledger).",
                 dir_okay=False, metavar="RULE"),
]


def _parameters(command: Command) -> list[inspect.Parameter]:
    """The command's options, in the order ``--help`` lists them."""
    def opt(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=annotation)

    spec = (opt("spec", OptionalSpecOpt) if command.rule
            else inspect.Parameter("spec", inspect.Parameter.KEYWORD_ONLY, annotation=o.SpecOpt))
    params = [spec, opt("data", o.DataOpt), opt("out", o.OutOpt), opt("ledger", o.LedgerOpt),
              opt("seed", o.SeedOpt), opt("epsilon", o.EpsilonOpt),
              opt("dry_run", o.DryRunOpt, False), opt("target_halfwidth", o.TargetHalfwidthOpt),
              opt("as_json", o.JsonOpt, False), opt("quiet", o.QuietOpt, False)]
    if command.rule:
        params.append(opt("apply", ApplyOpt))
    params.append(opt("test_noise_seed", o.TestNoiseSeedOpt))
    if command.engine:
        params += [opt("engine", o.EngineOpt), opt("engine_address", o.EngineAddressOpt)]
    return params


def release_command(command: Command) -> Callable[..., None]:
    """The Typer function of ``dpcausal <command.name>``: release, or (``--apply``) score rows."""

    def run(*, spec: Path | None, data: Path | None = None, out: Path | None = None,
            ledger: str | None = None, seed: int | None = None, epsilon: float | None = None,
            dry_run: bool = False, target_halfwidth: float | None = None,
            as_json: bool = False, quiet: bool = False, apply: Path | None = None,
            test_noise_seed: int | None = None, engine: str | None = None,
            engine_address: str | None = None) -> None:
        if apply is not None:
            guarded(lambda: _apply(command, apply, spec, data, out, as_json, quiet),
                    as_json=as_json)
            return
        if spec is None:
            guarded(_missing_spec, as_json=as_json)
            return
        run_release_command(command, spec_path=spec, data=data, out=out, ledger=ledger,
                            seed=seed, dry_run=dry_run, as_json=as_json, quiet=quiet,
                            test_noise_seed=test_noise_seed, engine=engine,
                            engine_address=engine_address, epsilon=epsilon,
                            target_halfwidth=target_halfwidth)

    params = _parameters(command)
    run.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    run.__name__ = run.__qualname__ = command.section
    run.__doc__ = command.help
    return run


def _missing_spec() -> None:
    raise SpecError("--spec SPEC.yaml is required (or --apply RULE --data FILE --out DIR)")


def _apply(command: Command, rule_path: Path, spec_path: Path | None, data: Path | None,
           out: Path | None, as_json: bool, quiet: bool) -> None:
    """Post-processing: score new rows with a released rule; spends nothing. A ``--spec`` fills
    in what the command's ``apply_defaults`` takes from it (if the command has one)."""
    rule = command.rule_module()
    training = None
    defaults = getattr(rule, "apply_defaults", None)
    if spec_path is not None and defaults is not None:
        from dpcausal.spec.load import load_spec

        spec, _ = load_spec(spec_path, command.spec_model())
        rows, out_dir, training = defaults(spec)
        data = data or rows
        out = out or out_dir
    apply_saved_rule(command.name, rule_path=rule_path, data=data, out=out, training=training,
                     as_json=as_json, quiet=quiet)
