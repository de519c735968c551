"""The one place errors become exit codes, and the terminal output of release commands."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpcausal.errors import EXIT_INTERNAL, DPCausalError, SpecError

if TYPE_CHECKING:
    from dpcausal.commands import Command
    from dpcausal.pipeline import RunResult

T = TypeVar("T")


LOG_WIDTH = 1_000
"""Width of the summary when stdout is not a terminal (a file, a pipe, a CI log): wide enough
that no table cell is cut or wrapped."""


def stdout_console() -> Console:
    """Console for the human summary (stdout): the terminal's width, or ``LOG_WIDTH`` when stdout
    is not a terminal, so a CI log shows every stage name in full."""
    return Console(highlight=False, soft_wrap=True,
                   width=None if sys.stdout.isatty() else LOG_WIDTH)


def stderr_console() -> Console:
    """Console for progress and errors (stderr)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def write_json(obj: dict[str, Any], *, allow_nan: bool = False) -> None:
    """Print ``obj`` as the one JSON object of a ``--json`` run (stdout). Audit reports may hold
    an infinite privacy loss (``allow_nan``); a release or a plan never does."""
    sys.stdout.write(json.dumps(obj, indent=2, allow_nan=allow_nan) + "\n")


def fail(exc: DPCausalError, *, as_json: bool, report: dict[str, Any] | None = None,
         allow_nan: bool = False) -> NoReturn:
    """End the run with ``exc``: its message on stderr and its exit code; with ``--json`` also
    one JSON object on stdout — ``report`` (what the run has to show, e.g. a refused dry run's
    plan) merged with ``{"error", "exit_code", "file"/"field"/"column"}``."""
    stderr_console().print(f"error: {exc}", markup=False)
    if as_json:
        write_json({**(report or {}), **exc.to_dict()}, allow_nan=allow_nan)
    raise typer.Exit(exc.exit_code)


def guarded(fn: Callable[[], T], *, as_json: bool = False) -> T:
    """Run ``fn``; map a DPCausalError to its exit code and anything else to 1 (a bug).

    With ``as_json`` a failure also prints one JSON object on stdout (:func:`fail`), so a
    pipeline parsing stdout gets ``{"error", "exit_code", ...}`` instead of nothing.
    """
    try:
        return fn()
    except DPCausalError as exc:
        fail(exc, as_json=as_json)
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:
        # the message of an unexpected exception may quote data (a cell, a row): it goes to logs
        # only on request
        debug = bool(os.environ.get("DPCAUSAL_DEBUG"))
        stderr_console().print(
            "internal error (this is a bug in dpcausal; please report it with the command you ran): "
            + (f"{type(exc).__name__}: {exc}" if debug else
               f"{type(exc).__name__} (its message may quote data; rerun with DPCAUSAL_DEBUG=1 to "
               "see it and the traceback)"),
            markup=False,
        )
        if debug:
            traceback.print_exc()
        if as_json:
            write_json({"error": f"internal error (a bug in dpcausal): {type(exc).__name__}",
                        "exit_code": EXIT_INTERNAL})
        raise typer.Exit(EXIT_INTERNAL) from None


def show_progress(quiet: bool) -> bool:
    """Progress only on a terminal, never under CI, NO_COLOR or --quiet."""
    return (
        not quiet
        and sys.stderr.isatty()
        and not os.environ.get("CI")
        and "NO_COLOR" not in os.environ
    )


@contextmanager
def status(message: str, quiet: bool) -> Iterator[None]:
    """A spinner on stderr while ``message`` runs (TTY only)."""
    ctx = stderr_console().status(message) if show_progress(quiet) else nullcontext()
    with ctx:
        yield


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def print_plan(result: RunResult, console: Console) -> None:
    """The privacy plan as a table (dry run, and the top of every release summary)."""
    plan = result.plan
    cost = plan.cost
    console.print(
        f"[bold]{plan.command}[/bold] privacy plan: {len(plan.events)} mechanism(s), "
        f"total ε = {_fmt(cost.epsilon)}, δ = {_fmt(cost.delta)}, "
        f"guarantee: {plan.guarantee if plan.dp_guarantee else 'NONE (uncertified)'}; "
        f"{result.n_rows} rows; neighbours: {plan.neighbouring.get('relation')} "
        f"{plan.neighbouring.get('unit', '')}"
    )
    table = Table(show_header=True, header_style="bold")
    for col in ("stage", "mechanism", "ε", "δ", "sensitivity", "noise scale"):
        table.add_column(col, overflow="fold")  # a narrow terminal wraps names, never cuts them
    for ev in plan.events:
        table.add_row(ev.stage, ev.kind, _fmt(ev.epsilon), _fmt(ev.delta),
                      f"{_fmt(ev.sensitivity)} ({ev.norm})", _fmt(ev.noise_scale))
    console.print(table)
    print_accuracy(result, console)
    for key, val in plan.details.items():
        if not isinstance(val, dict | list):
            console.print(f"  {key}: {_fmt(val)}", markup=False)
    prep = plan.assumptions.get("preprocessing")
    if isinstance(prep, dict):
        print_preprocessing(prep, console)
    state = result.ledger_state
    if state is not None:
        console.print(
            f"ledger '{state.dataset}': spent ε={_fmt(state.spent.epsilon)} δ={_fmt(state.spent.delta)}"
            f" → after this run ε={_fmt(state.after.epsilon)} δ={_fmt(state.after.delta)}"
            f" (cap ε={_fmt(state.cap.epsilon)} δ={_fmt(state.cap.delta)};"
            f" {state.accountant.name} composition)",
            markup=False,
        )
    else:
        console.print("ledger: none (the run is receipted but not capped)")


def print_accuracy(result: RunResult, console: Console) -> None:
    """The predicted half-widths (DESIGN principle 9) and a ``--target-halfwidth`` report."""
    acc = result.plan.accuracy
    if acc:
        levels = sorted({f"{(1 - a.alpha) * 100:g}%" for a in acc})
        console.print(f"predicted accuracy ({', '.join(levels)} intervals from public inputs; "
                      "noise = the privacy noise alone, bound = a guaranteed upper bound; "
                      "* = headline):")
        table = Table(show_header=True, header_style="bold")
        for col in ("quantity", "± half-width", "units", "kind", "law"):
            table.add_column(col, overflow="fold")
        for a in acc:
            table.add_row(*(escape(c) for c in (
                a.quantity + (" *" if a.headline else ""), _fmt(a.halfwidth), a.units,
                a.kind + (" (bound)" if a.bound else ""), a.law)))
        console.print(table)
    if result.target is not None:
        for line in result.target.lines():
            console.print(line, markup=False)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The human summary: scalars as they are, released numbers with their interval (the
    convention of :mod:`dpcausal.intervals`), one level deep; other lists and objects are left
    to ``--json``."""
    from dpcausal.intervals import summary_interval

    def is_record(v: Any) -> bool:
        return isinstance(v, dict) and "estimate" in v

    lines = []
    for key, val in summary.items():
        if is_record(val):
            lines.append(f"  {key}: {summary_interval(val)}")
        elif isinstance(val, dict) and val and all(is_record(v) for v in val.values()):
            lines.append(f"  {key}:")
            lines += [f"    {k}: {summary_interval(v)}" for k, v in val.items()]
        elif not isinstance(val, dict | list):
            lines.append(f"  {key}: {_fmt(val)}")
    return lines


def print_preprocessing(doc: dict[str, Any], console: Console) -> None:
    """The declared preprocessing: each model column, its public bound and its rule."""
    cols = doc["model_columns"]
    console.print(f"preprocessing (declared, row by row): {len(doc['covariates'])} covariate(s) "
                  f"→ {len(cols)} model column(s)", markup=False)
    for m in cols:
        bound = f"[{_fmt(m['bounds'][0])}, {_fmt(m['bounds'][1])}]" if m["bounds"] else "no bound"
        console.print(f"  {m['name']} in {bound}: {m['rule']}", markup=False)


def emit(result: RunResult, *, as_json: bool, quiet: bool) -> None:
    """Print the outcome: one JSON object with --json, else a short human summary."""
    if as_json:
        if result.dry_run:
            obj: dict[str, Any] = result.plan_dict()
            if result.refusal is not None:  # the plan, then the refusal, in one object
                fail(result.refusal, as_json=True, report=obj)
        else:
            assert result.receipt is not None
            obj = {**result.receipt, "output_paths": [str(p) for p in result.output_paths],
                   "summary": result.summary}
        write_json(obj)
        return
    if not quiet:
        print_plan(result, stdout_console())
    if result.refusal is not None:
        fail(result.refusal, as_json=False)
    if quiet:
        return
    console = stdout_console()
    if result.dry_run:
        console.print("dry run: no data row was read, nothing was spent or written.")
        return
    for line in summary_lines(result.summary):
        console.print(line, markup=False)
    console.print("wrote: " + ", ".join(str(p) for p in result.output_paths), markup=False)


def run_release_command(
    command: Command,
    *,
    spec_path: Path,
    data: Path | None,
    out: Path | None,
    ledger: str | Path | None,
    seed: int | None,
    dry_run: bool,
    as_json: bool,
    quiet: bool,
    test_noise_seed: int | None,
    engine: str | None = None,
    engine_address: str | None = None,
    epsilon: float | None = None,
    target_halfwidth: float | None = None,
) -> None:
    """Load the spec, apply overrides, execute, print. Exit codes per DESIGN §3."""

    def body() -> None:
        from dpcausal.pipeline import execute  # imported here: `dpcausal --help` stays fast
        from dpcausal.spec.load import load_spec

        method = command.method()
        spec, sha = load_spec(spec_path, method.spec_model)
        if target_halfwidth is not None and not dry_run:
            raise SpecError("--target-halfwidth plans a run: use it with --dry-run",
                            field="--target-halfwidth")
        spec = spec.with_overrides(data=data, out=out, ledger=ledger, epsilon=epsilon)
        if engine is not None or engine_address is not None:
            spec = spec.with_overrides(engine=engine, engine_address=engine_address)
        if test_noise_seed is not None:
            stderr_console().print(
                "warning: --test-noise-seed makes the noise reproducible; this run has NO "
                "differential privacy guarantee and its receipt says so", markup=False)
        with status(f"dpcausal {command.name}: running", quiet or as_json):
            result = execute(method, spec, sha, seed=seed, dry_run=dry_run,
                             test_noise_seed=test_noise_seed, target_halfwidth=target_halfwidth)
        emit(result, as_json=as_json, quiet=quiet)

    guarded(body, as_json=as_json)
