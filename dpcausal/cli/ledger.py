"""``dpcausal ledger``: create a ledger, adopt an old one, record a dataset's cap."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from dpcausal.cli._run import guarded, stdout_console
from dpcausal.cli.options import Command, Group
from dpcausal.errors import SpecError

app = typer.Typer(no_args_is_help=True, cls=Group,
                  help="Create a ledger and record datasets' caps (each a visible, keyed line).")

LedgerArg = Annotated[Path, typer.Option("--ledger", metavar="FILE", help="The ledger file.",
                                             dir_okay=False)]
DatasetOpt = Annotated[str | None, typer.Option("--dataset", metavar="NAME",
                                                       help="A dataset label.")]
EpsOpt = Annotated[float | None, typer.Option("--epsilon", metavar="EPS",
                                                     help="The dataset's cap on ε.")]
NoteOpt = Annotated[str | None, typer.Option("--note", metavar="TEXT",
                                                    help="Why (recorded in the line).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the appended lines as JSON.")]


def _cap(epsilon: float, delta: float) -> Any:
    from dpcausal.accounting.budget import Budget

    if not (math.isfinite(epsilon) and epsilon > 0):
        raise SpecError(f"--epsilon must be a finite number > 0. Got {epsilon} instead.")
    if not 0.0 <= delta <= 1.0:
        raise SpecError(f"--delta must be in [0, 1]. Got {delta} instead.")
    return Budget(epsilon, delta)


def _show(records: list[dict[str, Any]], as_json: bool, ledger: Path) -> None:
    if as_json:
        sys.stdout.write(json.dumps(records, indent=2) + "\n")
        return
    console = stdout_console()
    for rec in records:
        if rec["kind"] == "cap":
            cap, prev = rec["cap"], rec["previous_cap"]
            was = f" (was ε={prev['epsilon']:g} δ={prev['delta']:g})" if prev else ""
            console.print(f"{ledger}: line {rec['seq']}: dataset '{rec['dataset']}' cap "
                          f"ε={cap['epsilon']:g} δ={cap['delta']:g}{was} [{rec['reason']}]",
                          markup=False)
        else:
            console.print(f"{ledger}: line {rec['seq']}: {rec['kind']} (ledger id "
                          f"{rec['ledger_id']}); key in {ledger}.key (keep it private and "
                          "back it up with the ledger)", markup=False)


@app.command("init", cls=Command)
def init_cmd(
    ledger: LedgerArg,
    dataset: DatasetOpt = None,
    epsilon: EpsOpt = None,
    delta: Annotated[float, typer.Option("--delta", metavar="DELTA",
                                                  help="The dataset's cap on δ.")] = 0.0,
    adopt: Annotated[bool, typer.Option(
        "--adopt", help="Take over a ledger written by an earlier dpcausal (unkeyed): verify it, "
        "then start its keyed chain with the caps its datasets were first charged under.")] = False,
    note: NoteOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a new ledger (and its key and head), optionally recording one dataset's cap.

    The ledger's directory is created if missing: this is the explicit way to start a ledger in a
    new place (a release run never does that).
    """

    def body() -> None:
        from dpcausal.accounting.ledger import Ledger

        if adopt:
            if dataset is not None or epsilon is not None:
                raise SpecError("--adopt takes the caps from the old ledger; set others afterwards "
                                "with 'dpcausal ledger set-cap'")
            _show(Ledger(ledger).adopt(), as_json, ledger)
            return
        if (dataset is None) != (epsilon is None):
            raise SpecError("--dataset and --epsilon go together (the dataset's cap)")
        cap = _cap(epsilon, delta) if epsilon is not None else None
        ledger.absolute().parent.mkdir(parents=True, exist_ok=True)
        _show(Ledger(ledger).init(dataset=dataset, cap=cap, note=note), as_json, ledger)

    guarded(body, as_json=as_json)


@app.command("set-cap", cls=Command)
def set_cap_cmd(
    ledger: LedgerArg,
    dataset: Annotated[str, typer.Option("--dataset", metavar="NAME",
                                                 help="The dataset label.")],
    epsilon: Annotated[float, typer.Option("--epsilon", metavar="EPS",
                                                   help="The new cap on ε.")],
    delta: Annotated[float | None, typer.Option(
        "--delta", metavar="DELTA",
        help="The new cap on δ (default: unchanged, or 0 for a new dataset).")] = None,
    allow_raise: Annotated[bool, typer.Option(
        "--raise", help="Allow a cap above the current one (a policy decision, recorded).")] = False,
    note: NoteOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Record a dataset's cap in the ledger. Lowering is always allowed; raising needs --raise."""

    def body() -> None:
        from dpcausal.accounting.ledger import Ledger

        _cap(epsilon, 0.0 if delta is None else delta)
        rec = Ledger(ledger).set_cap(dataset, epsilon, delta, allow_raise=allow_raise, note=note)
        _show([rec], as_json, ledger)

    guarded(body, as_json=as_json)
