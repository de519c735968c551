"""``dpcausal audit``: verify receipts and the ledger."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dpcausal.cli._run import (
    fail,
    guarded,
    show_progress,
    stderr_console,
    stdout_console,
    write_json,
)
from dpcausal.cli.options import Command, Group

if TYPE_CHECKING:
    from rich.progress import TaskID

app = typer.Typer(no_args_is_help=True, cls=Group,
                  help="Verify receipts and the ledger; audit a command's privacy empirically.")


@app.command("verify", cls=Command)
def verify_cmd(
    ledger: Annotated[str | None, typer.Option(
        "--ledger", metavar="FILE|URL",
        help="Ledger JSONL file or postgresql://host/dbname URL.")] = None,
    receipt: Annotated[
        list[Path] | None, typer.Option("--receipt", metavar="FILE", help="Receipt file (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No output but errors.")] = False,
) -> None:
    """Check the keyed hash chain and head, recompute totals against caps, check receipts.

    A receipt must be at the ledger line it was charged at, and its outputs must match their
    hashes. Exit 0 when everything holds, 4 naming the first broken line or file otherwise.
    """

    def body() -> None:
        from dpcausal.api.audit import verify, violation_of  # here: `--help` stays fast

        report = verify(ledger, receipt or [], check=False)
        violation = violation_of(report)
        if as_json:
            if violation is not None:  # one object: the report and the error
                fail(violation, as_json=True, report=report.to_dict(), allow_nan=True)
            write_json(report.to_dict(), allow_nan=True)
        elif not quiet:
            console = stdout_console()
            for ds, tot in report.totals.items():
                cap = tot["cap"]
                of = f"cap ε={cap['epsilon']:g} δ={cap['delta']:g}" if cap else "no cap recorded"
                console.print(f"dataset '{ds}': {tot['entries']} release(s), spent "
                              f"ε={tot['epsilon']:g} δ={tot['delta']:g} of {of} "
                              f"({report.accountant.get('name', 'basic')} composition)",
                              markup=False)
            for note in report.notes:
                console.print(f"note: {note}", markup=False)
            if report.ok:
                console.print(f"OK: {report.entries} ledger entries, {report.receipts_checked} "
                              "receipt(s) verified", markup=False)
        if violation is not None:
            raise violation

    guarded(body, as_json=as_json)


@app.command("repair", cls=Command)
def repair_cmd(
    ledger: Annotated[str, typer.Option(
        "--ledger", metavar="FILE",
        help="Ledger JSONL file (a database ledger never has a torn record).")],
) -> None:
    """Move aside an incomplete last line that the head record proves was never committed.

    Such a line was left by a run killed (or a disk that filled) while appending; it published
    nothing, so no spend is lost. The bytes are kept in LEDGER.torn-<time>. Anything else —
    a truncated committed line, a missing line, a bad MAC — is refused with exit 4 and the evidence:
    restore the ledger from a backup.
    """

    def body() -> None:
        from dpcausal.api.ledger import repair

        done = repair(ledger)
        if done.moved_to is None:
            stdout_console().print(f"{done.location}: no incomplete line; nothing to repair",
                                   markup=False)
        else:
            stdout_console().print(f"{done.location}: moved the incomplete last line (never "
                                   f"committed) to {done.moved_to}", markup=False)

    guarded(body)


@app.command("privacy", cls=Command)
def privacy_cmd(
    spec: Annotated[Path, typer.Option("--spec", metavar="FILE",
                                       help="The spec of the command to audit.",
                                       dir_okay=False)],
    data: Annotated[Path | None, typer.Option(
        "--data", metavar="FILE", help="Audit neighbours of this data file (default: a synthetic "
        "data set drawn inside the spec's bounds).")] = None,
    trials: Annotated[int | None, typer.Option(
        "--trials", min=0, metavar="N", help="Black-box releases per side of the closest pair, "
        "per stage (default: enough for each stage's claimed ε to be testable, within a cap; 0: "
        "gray-box only).")] = None,
    pairs: Annotated[int, typer.Option("--pairs", min=1, metavar="N",
                                       help="Neighbouring datasets tried.")] = 50,
    rows: Annotated[int, typer.Option("--rows", min=2, metavar="N",
                                      help="Rows of the synthetic data set.")] = 1000,
    seed: Annotated[int | None, typer.Option("--seed", metavar="N",
                                             help="Seed of the audit's own randomness.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the full report as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No output but errors.")] = False,
) -> None:
    """Empirically check that a command is as private as its receipt claims (exit 4 if not).

    Runs the spec's command on neighbouring datasets under its own neighbouring relation and
    measures the privacy loss exactly (gray-box) and from repeated releases (black-box ε lower
    bound). Nothing is released or charged; the report is for the curator only (with --data it is
    computed from the data without privacy).
    """

    def body() -> None:
        from dpcausal.api.audit import audit_privacy, privacy_violation

        with _progress_bar(quiet or as_json) as progress:
            report = audit_privacy(spec, data, trials=trials, pairs=pairs, rows=rows, seed=seed,
                                   check=False, progress=progress)
        violation = privacy_violation(report, spec)
        if as_json:
            if violation is not None:  # one object: the report and the error
                fail(violation, as_json=True, report=report.to_dict(), allow_nan=True)
            write_json(report.to_dict(), allow_nan=True)
        elif not quiet:
            _print_report(report)
        if violation is not None:
            raise violation

    guarded(body, as_json=as_json)


@contextmanager
def _progress_bar(quiet: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    if not show_progress(quiet):
        yield None
        return
    from rich.progress import Progress  # here: a release command never draws a bar

    with Progress(console=stderr_console(), transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)

        yield update


def _print_report(report: Any) -> None:
    console = stdout_console()
    d = report.to_dict()
    g = d["gray_box"]
    console.print(
        f"audit of {report.command}: claimed ε={report.epsilon:g} δ={report.delta:g}; "
        f"{report.pairs} neighbouring datasets of {report.rows} rows", markup=False)
    median = (g["loss_quantiles_50_90_100"] or [float("nan")])[0]
    console.print(f"  gray-box: max privacy loss {g['max_privacy_loss']:.4g} "
                  f"(median {median:.4g}); max sensitivity ratio "
                  f"{g['max_sensitivity_ratio']:.4g}; closest pair: {g['closest_pair']}", markup=False)
    for stage in (d["black_box"] or {}).get("stages", []):
        lb = stage["epsilon_lower_bound"]
        head = f"  black-box {stage['stage']} (claimed ε={stage['claimed_epsilon']:g}): "
        if lb is None:
            console.print(head + "not testable (see the note)", markup=False)
            continue
        console.print(head + f"ε lower bound {lb:.4g} at 95% confidence from "
                      f"{stage['releases_per_side']} {stage['mode']} per side (event: "
                      f"{stage['event']}; the most these releases can show is "
                      f"{stage['max_attainable_bound']:.3g})", markup=False)
    for note in d["notes"]:
        console.print(f"  note: {note}", markup=False)
    console.print(f"verdict: {d['verdict'].upper()}", markup=False)
