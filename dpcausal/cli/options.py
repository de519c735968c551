"""Options shared by every release command (DESIGN §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SpecOpt = Annotated[
    Path, typer.Option("--spec", help="The YAML spec of the run.", dir_okay=False)
]
DataOpt = Annotated[
    Path | None, typer.Option("--data", help="Data file (CSV/Parquet); overrides data.path.")
]
OutOpt = Annotated[
    Path | None, typer.Option("--out", help="Output directory; overrides output.dir.")
]
LedgerOpt = Annotated[
    Path | None, typer.Option("--ledger", help="Ledger file; overrides ledger.path.")
]
SeedOpt = Annotated[
    int | None,
    typer.Option("--seed", help="Seed for public randomness only (splits, features); never noise."),
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
        help="TESTS ONLY: reproducible noise; the receipt then says dp_guarantee: false.",
    ),
]
EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", help="Run the data passes on 'local' (streamed batches) or 'dask'; "
                 "overrides engine.kind. Without it (and without an engine section) the table is "
                 "read into memory."),
]
EngineAddressOpt = Annotated[
    str | None,
    typer.Option("--engine-address",
                 help="Dask scheduler address (tcp://host:8786); implies --engine dask."),
]
