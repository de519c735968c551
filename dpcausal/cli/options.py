"""Options shared by every release command (DESIGN §3), and the command classes every command
uses so that ``--help`` shows a plain metavar (FILE, DIR, N) or none (a flag), never a type
placeholder such as ``<bool>`` or ``<list[Path]>`` (what recent typer prints without one)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup


def _no_flag_metavar(params: Any) -> Any:
    """Give every flag (``--json``, ``--help``...) an empty metavar: a flag takes no value."""
    for param in params:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
            param.metavar = ""
    return params


class Command(TyperCommand):
    """A command whose ``--help`` shows no type placeholder for its flags, and whose usage errors
    (a bad option value, a missing or unknown option) also print the ``--json`` error object."""

    def get_params(self, ctx: Any) -> Any:
        """The parameters, flags with an empty metavar."""
        return _no_flag_metavar(super().get_params(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> Any:
        """Parse ``args``; on a usage error with ``--json`` among them, print
        ``{"error", "exit_code", "field"}`` on stdout before the usual message (exit 2)."""
        wants_json = "--json" in args
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            if wants_json and hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
                obj: dict[str, Any] = {"error": exc.format_message(), "exit_code": exc.exit_code}
                opts = getattr(getattr(exc, "param", None), "opts", None)
                if opts:
                    obj["field"] = opts[0]
                sys.stdout.write(json.dumps(obj, indent=2) + "\n")
            raise


class Group(TyperGroup):
    """A command group whose ``--help`` shows no type placeholder for its flags."""

    def get_params(self, ctx: Any) -> Any:
        """The parameters, flags with an empty metavar."""
        return _no_flag_metavar(super().get_params(ctx))


SpecOpt = Annotated[
    Path, typer.Option("--spec", help="The YAML spec of the run.", dir_okay=False,
                       metavar="FILE")
]
DataOpt = Annotated[
    Path | None, typer.Option("--data", metavar="FILE",
                              help="Data file (CSV, CSV.GZ or Parquet, or a directory of Parquet "
                              "files); overrides data.path.")
]
OutOpt = Annotated[
    Path | None, typer.Option("--out", metavar="DIR", help="Output directory; overrides output.dir.")
]
LedgerOpt = Annotated[
    str | None,
    typer.Option("--ledger", metavar="FILE|URL",
                 help="Ledger file or postgresql://host/dbname URL; overrides ledger.path / "
                 "ledger.url."),
]
SeedOpt = Annotated[
    int | None,
    typer.Option("--seed", metavar="N",
                 help="Seed for public randomness only (splits, features); never noise."),
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print the privacy plan and exit; reads no data row.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No summary or progress output.")]
TestNoiseSeedOpt = Annotated[
    int | None,
    typer.Option(
        "--test-noise-seed",
        hidden=True,
        metavar="N",
        help="TESTS ONLY: reproducible noise and secret split; the receipt then says "
        "dp_guarantee: false.",
    ),
]
EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", metavar="local|dask",
                 help="Run the data passes on 'local' (streamed batches) or 'dask'; "
                 "overrides engine.kind. Without it (and without an engine section) the table is "
                 "read into memory."),
]
EngineAddressOpt = Annotated[
    str | None,
    typer.Option("--engine-address", metavar="ADDRESS",
                 help="Dask scheduler address (tcp://host:8786); implies --engine dask."),
]
EpsilonOpt = Annotated[
    float | None,
    typer.Option("--epsilon", metavar="E",
                 help="Override privacy.epsilon (e.g. for sweeps); the receipt and the ledger "
                 "charge this ε."),
]
TargetHalfwidthOpt = Annotated[
    float | None,
    typer.Option("--target-halfwidth", metavar="X",
                 help="With --dry-run: print the smallest ε (and, where it matters, n) whose "
                 "predicted noise half-width of the headline quantity (or accuracy.quantity) "
                 "is at most X, in that quantity's units."),
]
