"""``dpcausal audit``: verify receipts and the ledger."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from dpcausal.audit.verify import verify
from dpcausal.cli._run import guarded, stdout_console
from dpcausal.errors import AuditViolation, SpecError

app = typer.Typer(no_args_is_help=True, help="Verify receipts and the privacy ledger.")


@app.command("verify")
def verify_cmd(
    ledger: Annotated[Path | None, typer.Option("--ledger", help="Ledger JSONL file.")] = None,
    receipt: Annotated[
        list[Path] | None, typer.Option("--receipt", help="Receipt file (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Check the hash chain, recompute totals against caps, and check output hashes.

    Exit 0 when everything holds, 4 naming the first broken line or file otherwise.
    """

    def body() -> None:
        if ledger is None and not receipt:
            raise SpecError("give --ledger FILE and/or --receipt FILE")
        report = verify(ledger, list(receipt or []))
        if as_json:
            sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        elif not quiet:
            console = stdout_console()
            for ds, tot in report.totals.items():
                console.print(
                    f"dataset '{ds}': {tot['entries']} release(s), spent ε={tot['epsilon']:g} "
                    f"δ={tot['delta']:g} of cap ε={tot['cap']['epsilon']:g} δ={tot['cap']['delta']:g}",
                    markup=False)
            for note in report.notes:
                console.print(f"note: {note}", markup=False)
            if report.ok:
                console.print(f"OK: {report.entries} ledger entries, {report.receipts_checked} "
                              "receipt(s) verified", markup=False)
        if not report.ok:
            raise AuditViolation(
                report.problems[0]
                + (f" (and {len(report.problems) - 1} more problem(s))"
                   if len(report.problems) > 1 else "")
            )

    guarded(body)
