"""The ``dpcausal`` command line. Only commands that really work are registered."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from dpcausal import __version__
from dpcausal.cli import audit as audit_cli
from dpcausal.cli import ledger as ledger_cli
from dpcausal.cli._run import guarded
from dpcausal.cli.hugepages import set_numpy_hugepages
from dpcausal.cli.options import Command, Group
from dpcausal.cli.release import release_command
from dpcausal.cli.threads import set_blas_threads
from dpcausal.commands import COMMANDS, by_name

app = typer.Typer(
    name="dpcausal",
    cls=Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Differentially private causal inference from tabular files, with a privacy ledger.",
)

for _command in COMMANDS:  # the registry: a command's options follow from its entry
    app.command(_command.name, cls=Command, help=_command.help)(release_command(_command))
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
        help="A release command: " + ", ".join(c.name for c in COMMANDS[:-1])
        + f" or {COMMANDS[-1].name}.")]) -> None:
    """Print the JSON Schema of a command's spec."""

    def body() -> None:
        model = by_name(command).spec_model()
        sys.stdout.write(json.dumps(model.model_json_schema(), indent=2) + "\n")

    guarded(body)


def main() -> None:
    """Console-script entry point: the BLAS thread count (:mod:`dpcausal.cli.threads`) and
    numpy's huge pages (:mod:`dpcausal.cli.hugepages`), then the command."""
    try:
        set_blas_threads()
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
    set_numpy_hugepages(sys.argv[1:])
    app()
