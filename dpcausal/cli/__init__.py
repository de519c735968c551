"""The ``dpcausal`` command line. Only commands that really work are registered."""

from __future__ import annotations

import importlib
import json
import sys
from typing import Annotated

import typer

from dpcausal import __version__
from dpcausal.cli import audit as audit_cli
from dpcausal.cli import ledger as ledger_cli
from dpcausal.cli._run import guarded
from dpcausal.cli.cate import cate
from dpcausal.cli.options import Command, Group
from dpcausal.cli.owl import owl
from dpcausal.cli.select_policy import select_policy
from dpcausal.cli.synth_control import synth_control
from dpcausal.cli.two_stage import two_stage
from dpcausal.errors import SpecError

app = typer.Typer(
    name="dpcausal",
    cls=Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Differentially private causal inference from tabular files, with a privacy ledger.",
)

SPEC_MODELS: dict[str, str] = {
    "owl": "dpcausal.spec.owl:OwlSpec",
    "select-policy": "dpcausal.spec.select_policy:SelectPolicySpec",
    "synth-control": "dpcausal.spec.synth_control:SynthControlSpec",
    "cate": "dpcausal.spec.cate:CateSpec",
    "two-stage": "dpcausal.spec.two_stage:TwoStageSpec",
}
"""Command → its spec model, imported on demand (``dpcausal --help`` loads no method)."""

app.command("owl", cls=Command)(owl)
app.command("select-policy", cls=Command)(select_policy)
app.command("synth-control", cls=Command)(synth_control)
app.command("cate", cls=Command)(cate)
app.command("two-stage", cls=Command)(two_stage)
app.add_typer(audit_cli.app, name="audit")
app.add_typer(ledger_cli.app, name="ledger")


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"dpcausal {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Differentially private causal inference from tabular files, with a privacy ledger."""


@app.command("schema", cls=Command)
def schema(command: Annotated[str, typer.Argument(
        metavar="COMMAND",
        help="A release command: owl, select-policy, synth-control, cate or two-stage.")]) -> None:
    """Print the JSON Schema of a command's spec."""

    def body() -> None:
        target = SPEC_MODELS.get(command)
        if target is None:
            raise SpecError(
                f"unknown command '{command}'; choose one of: {', '.join(sorted(SPEC_MODELS))}"
            )
        module, _, name = target.partition(":")
        model = getattr(importlib.import_module(module), name)
        sys.stdout.write(json.dumps(model.model_json_schema(), indent=2) + "\n")

    guarded(body)


def main() -> None:
    """Console-script entry point."""
    app()
