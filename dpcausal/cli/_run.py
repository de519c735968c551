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

from dpcausal.errors import EXIT_INTERNAL, DPCausalError, SpecError

if TYPE_CHECKING:
    from dpcausal.api import Plan, Release
    from dpcausal.commands import Command

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


def emit(result: Plan | Release, *, as_json: bool, quiet: bool) -> None:
    """Print the outcome: one JSON object with --json, else a short human summary."""
    from dpcausal.api import Plan
    from dpcausal.api.render import print_plan, summary_lines

    plan = result if isinstance(result, Plan) else result.plan
    if as_json:
        if isinstance(result, Plan):
            obj: dict[str, Any] = result.to_dict()
            if result.refusal is not None:  # the plan, then the refusal, in one object
                fail(result.refusal, as_json=True, report=obj)
        else:
            obj = result.to_dict()
        write_json(obj)
        return
    if not quiet:
        print_plan(plan, stdout_console())
    if plan.refusal is not None:
        fail(plan.refusal, as_json=False)
    if quiet:
        return
    console = stdout_console()
    if isinstance(result, Plan):
        console.print("dry run: no data row was read, nothing was spent or written.")
        return
    for line in summary_lines(dict(result.summary)):
        console.print(line, markup=False)
    console.print("wrote: " + ", ".join(str(p) for p in result.paths), markup=False)


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
    """Load the spec, then :func:`dpcausal.plan` (``--dry-run``) or :func:`dpcausal.release`
    with the options as its arguments, and print. Exit codes per DESIGN §3."""

    def body() -> None:
        from dpcausal import api  # imported here: `dpcausal --help` stays fast

        spec = api.load_spec(spec_path, command.name)
        if target_halfwidth is not None and not dry_run:
            raise SpecError("--target-halfwidth plans a run: use it with --dry-run",
                            field="--target-halfwidth")
        options: dict[str, Any] = {"ledger": ledger, "seed": seed, "epsilon": epsilon,
                                   "engine": engine, "engine_address": engine_address}
        if test_noise_seed is not None:
            stderr_console().print(
                "warning: --test-noise-seed makes the noise reproducible; this run has NO "
                "differential privacy guarantee and its receipt says so", markup=False)
        result: Plan | Release
        with status(f"dpcausal {command.name}: running", quiet or as_json):
            if dry_run:
                result = api.plan(spec, data, target_halfwidth=target_halfwidth, **options)
            else:  # the CLI always publishes: into --out, else the spec's output.dir
                result = api.release(spec, data, out=out if out is not None else
                                     spec.output.dir, test_noise_seed=test_noise_seed,
                                     **options)
        emit(result, as_json=as_json, quiet=quiet)

    guarded(body, as_json=as_json)
