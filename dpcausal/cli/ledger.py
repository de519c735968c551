"""``dpcausal ledger``: create a ledger, adopt an old one, record a dataset's cap or its accountant,
copy a ledger."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from dpcausal.cli._run import guarded, stdout_console
from dpcausal.cli.options import Command, Group
from dpcausal.errors import SpecError

if TYPE_CHECKING:
    from dpcausal.api.ledger import LedgerUpdate

app = typer.Typer(no_args_is_help=True, cls=Group,
                  help="Create a ledger, record datasets' caps (each a visible, keyed line), and "
                  "copy a ledger between a file and a database.")

LedgerArg = Annotated[str, typer.Option(
    "--ledger", "--url", metavar="FILE|URL",
    help="The ledger: a JSONL file or a postgresql://host/dbname URL.")]
DatasetOpt = Annotated[str | None, typer.Option("--dataset", metavar="NAME",
                                                       help="A dataset label.")]
EpsOpt = Annotated[float | None, typer.Option("--epsilon", metavar="EPS",
                                                     help="The dataset's cap on ε.")]
NoteOpt = Annotated[str | None, typer.Option("--note", metavar="TEXT",
                                                    help="Why (recorded in the line).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the appended lines as JSON.")]
AccountantOpt = Annotated[str, typer.Option(
    "--accountant", metavar="NAME", help="How releases add up: basic (ε and δ sum) or pld (privacy loss "
    "distributions, dp-accounting: much tighter for repeated Gaussian releases).")]


def _show(update: LedgerUpdate, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(update.records, indent=2) + "\n")
        return
    console = stdout_console()
    where = update.location
    for rec in update.records:
        if rec["kind"] == "accountant":
            console.print(f"{where}: line {rec['seq']}: accountant {rec['accountant']['name']} "
                          f"(was {rec['previous']['name']}); every total is recomputed with it",
                          markup=False)
        elif rec["kind"] == "cap":
            cap, prev = rec["cap"], rec["previous_cap"]
            was = f" (was ε={prev['epsilon']:g} δ={prev['delta']:g})" if prev else ""
            console.print(f"{where}: line {rec['seq']}: dataset '{rec['dataset']}' cap "
                          f"ε={cap['epsilon']:g} δ={cap['delta']:g}{was} [{rec['reason']}]",
                          markup=False)
        else:
            console.print(f"{where}: line {rec['seq']}: {rec['kind']} (ledger id "
                          f"{rec['ledger_id']}, {rec.get('composition', 'basic')} accountant); "
                          f"key in {update.key_location} (keep it private and back it up; "
                          "without it the ledger can be neither verified nor extended)",
                          markup=False)


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
    accountant: AccountantOpt = "basic",
    as_json: JsonOpt = False,
) -> None:
    """Create a new ledger (and its key and head), optionally recording one dataset's cap.

    The ledger's directory is created if missing: this is the explicit way to start a ledger in a
    new place (a release run never does that). For a postgresql:// URL it creates the schema
    (versioned) in the database; the key goes to the file DPCAUSAL_LEDGER_KEY_FILE names
    (created when missing) and never into the database.
    """

    def body() -> None:
        from dpcausal.api import ledger as api

        if adopt:
            if dataset is not None or epsilon is not None or accountant != "basic":
                raise SpecError("--adopt takes the caps from the old ledger and starts it with the "
                                "basic accountant; set others afterwards with 'dpcausal ledger "
                                "set-cap' / 'set-accountant'")
            _show(api.adopt(ledger), as_json)
            return
        _show(api.init(ledger, dataset=dataset, epsilon=epsilon, delta=delta, note=note,
                       accountant=accountant), as_json)

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
        from dpcausal.api import ledger as api

        _show(api.set_cap(ledger, dataset, epsilon, delta, allow_raise=allow_raise, note=note),
              as_json)

    guarded(body, as_json=as_json)


def _copy(source: str, dest: str, as_json: bool) -> None:
    from dpcausal.api import ledger as api

    report = api.copy(source, dest)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        return
    console = stdout_console()
    console.print(f"copied {report.records} record(s) of ledger {report.ledger_id} from "
                  f"{report.source} to {report.dest}, unchanged (last hash "
                  f"{report.last_hash[:12]}); the copy verifies", markup=False)
    for ds, b in sorted(report.spent.items()):
        console.print(f"  dataset '{ds}': spent ε={b.epsilon:g} δ={b.delta:g}", markup=False)
    for note in report.notes:
        console.print(f"note: {note}", markup=False)
    console.print(f"its key: {report.key_location} (the source's key: keep it private)",
                  markup=False)


@app.command("export", cls=Command)
def export_cmd(
    ledger: LedgerArg,
    to: Annotated[str, typer.Option(
        "--to", metavar="FILE|URL",
        help="The new ledger to write: a JSONL file (its .key and .head are written beside it) "
        "or a postgresql:// URL of a database without a ledger.")],
    as_json: JsonOpt = False,
) -> None:
    """Copy the ledger, every record unchanged (MACs valid under the same key), into a new one.

    The ledger is read under its lock and must verify; the copy is verified after writing.
    """
    guarded(lambda: _copy(ledger, to, as_json), as_json=as_json)


@app.command("import", cls=Command)
def import_cmd(
    ledger: LedgerArg,
    source: Annotated[str, typer.Option(
        "--from", metavar="FILE|URL",
        help="The ledger to import: a JSONL file (with its .key and .head) or a postgresql:// "
        "URL.")],
    as_json: JsonOpt = False,
) -> None:
    """Create the ledger (a database or a file) as a copy of another, every record unchanged.

    For a database, DPCAUSAL_LEDGER_KEY_FILE names where the jobs' key is: the source's key is
    written there when the file does not exist (or it must be the source's key already).
    """
    guarded(lambda: _copy(source, ledger, as_json), as_json=as_json)


@app.command("set-accountant", cls=Command)
def set_accountant_cmd(
    ledger: LedgerArg,
    accountant: Annotated[str, typer.Option(
        "--accountant", metavar="NAME", help="The new accountant: only basic → pld is allowed.")],
    note: NoteOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Switch how the ledger adds up releases, to a rule that never reports more (basic → pld).

    The new accountant recomputes every dataset's whole history (releases already made are
    re-accounted by a rule at least as tight); the switch is a visible, keyed line.
    """

    def body() -> None:
        from dpcausal.api import ledger as api

        _show(api.set_accountant(ledger, accountant, note=note), as_json)

    guarded(body, as_json=as_json)
