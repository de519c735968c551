"""Plan and release from Python: :func:`plan` (the dry run) and :func:`release`, over the same
pipeline, ledger and checks as ``dpcausal <command>`` — which calls these two functions.

``data`` may be a path (CSV, CSV.GZ, Parquet or a directory of Parquet files), a pandas DataFrame,
a pyarrow Table (or any object with the Arrow C stream interface, e.g. a polars DataFrame), or
None for the spec's ``data.path``. A table in memory goes through the same column, type and bound
checks as a file (:mod:`dpcausal.io.memory`); its row count ``len(data)`` is public by the same
assumption as a file's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcausal.api.ledger import ledger_location
from dpcausal.api.results import Plan, Release
from dpcausal.api.specs import command_of, spec_sha256
from dpcausal.errors import SpecError
from dpcausal.io import memory

if TYPE_CHECKING:
    from dpcausal.pipeline import RunResult
    from dpcausal.spec.base import CommonSpec

Data = Any
"""A path, a pandas DataFrame, a pyarrow Table (or an Arrow C stream), or None (the spec's
``data.path``)."""


@contextmanager
def data_source(data: Data) -> Iterator[Path | None]:
    """``data`` as the path the readers take: a file's, or an in-memory table's label (registered
    for the body of the ``with``); None for None."""
    table = memory.as_memory_table(data)
    if table is None:
        if data is not None and not isinstance(data, str | PathLike):
            raise TypeError("data must be a pandas DataFrame, a pyarrow Table, a path or None; "
                            f"got {type(data).__name__}")
        yield None if data is None else Path(data)
        return
    with memory.registered(table) as label:
        yield label


@contextmanager
def _run_spec(spec: CommonSpec, data: Data, *, out: str | PathLike[str] | None,
              ledger: str | PathLike[str] | None, epsilon: float | None, engine: str | None,
              engine_address: str | None) -> Iterator[CommonSpec]:
    """The spec with the call's overrides applied (as the command line's options are), and an
    in-memory table registered as its data for the body of the ``with``."""
    command_of(spec)  # a dpcausal spec, or a TypeError
    with data_source(data) as path:
        run = spec.with_overrides(data=path, out=None if out is None else Path(out),
                                  ledger=None if ledger is None else ledger_location(ledger),
                                  epsilon=epsilon)
        if engine is not None or engine_address is not None:
            run = run.with_overrides(engine=engine, engine_address=engine_address)
        table = memory.lookup(path)
        if table is not None and run.engine is not None:
            raise SpecError(f"engine: an engine streams a file, and {table.label} is already in "
                            "memory; remove the spec's engine section (and engine=), or pass the "
                            "data as a path", field="engine")
        yield run


def plan(spec: CommonSpec, data: Data = None, *, ledger: str | PathLike[str] | None = None,
         seed: int | None = None, epsilon: float | None = None, engine: str | None = None,
         engine_address: str | None = None, target_halfwidth: float | None = None) -> Plan:
    """The privacy plan of releasing ``spec`` on ``data``: ``dpcausal <command> --dry-run``.

    Reads the data's schema and row count only — no value — and the public side files the
    command declares; spends nothing and writes nothing. A plan the ledger's cap or the accuracy
    guard refuses is returned with :attr:`Plan.refusal` set (``plan.check()`` raises it).

    Parameters
    ----------
    spec
        A spec from :func:`dpcausal.build_spec` or :func:`dpcausal.load_spec`.
    data
        The data: a path, a pandas DataFrame, a pyarrow Table, or None for ``spec.data.path``.
    ledger
        A ledger file or ``postgresql://`` URL replacing the spec's ``ledger.path`` / ``url``
        (``--ledger``; the spec must have a ``ledger`` section).
    seed
        Seed of the public randomness (``--seed``): random features, public simulations; never
        privacy noise.
    epsilon
        Replaces ``privacy.epsilon`` (``--epsilon``).
    engine, engine_address
        ``"local"`` or ``"dask"``, and a Dask scheduler address (``--engine``,
        ``--engine-address``); a path only.
    target_halfwidth
        Also find the smallest ε (and, where it matters, n) whose predicted half-width of the
        headline quantity (or ``accuracy.quantity``) is at most this (``--target-halfwidth``):
        :attr:`Plan.target`.

    Raises
    ------
    SpecError, DataError
        Invalid spec, options or data schema (exit code 2 on the command line).
    OutputError
        The ledger cannot be read or locked (exit code 5).
    """
    from dpcausal.pipeline import execute

    with _run_spec(spec, data, out=None, ledger=ledger, epsilon=epsilon, engine=engine,
                   engine_address=engine_address) as run:
        command = command_of(spec)
        result = execute(command.method(), run, spec_sha256(spec), seed=seed, dry_run=True,
                         target_halfwidth=target_halfwidth)
    return _plan(command.name, result)


def release(spec: CommonSpec, data: Data = None, *, out: str | PathLike[str] | None = None,
            ledger: str | PathLike[str] | None = None, seed: int | None = None,
            epsilon: float | None = None, engine: str | None = None,
            engine_address: str | None = None, test_noise_seed: int | None = None) -> Release:
    """Release ``spec``'s command on ``data``: ``dpcausal <command>``.

    The order is the command line's: the plan from public inputs, the ledger check (refused: no
    row is read), the rows read and checked, the noise drawn, then the ledger charged under its
    lock — before any output exists — and only then, with ``out``, the release published whole.

    Parameters
    ----------
    spec
        A spec from :func:`dpcausal.build_spec` or :func:`dpcausal.load_spec`.
    data
        The data: a path, a pandas DataFrame, a pyarrow Table, or None for ``spec.data.path``.
    out
        Publish the release into this directory (staged, then renamed whole, as the command line
        does with ``--out`` or ``output.dir``). Default: keep it in memory only;
        :meth:`Release.save` publishes it later (it is charged either way).
    ledger, seed, epsilon, engine, engine_address
        As for :func:`plan`.
    test_noise_seed
        TESTS ONLY: makes the privacy noise reproducible; the receipt then says
        ``dp_guarantee: false`` (a release with it has no privacy guarantee).

    Returns
    -------
    Release
        The outputs (DataFrames, documents, figures), their intervals, the receipt.

    Raises
    ------
    SpecError, DataError, SolverError
        Invalid spec, options or data (exit code 2 on the command line); nothing spent.
    PrivacyError
        Refused by privacy policy (exit code 3): over the ledger's cap
        (:class:`~dpcausal.BudgetExceededError`), too noisy for ``accuracy.max_halfwidth``, a
        missing bound, an uncertified mode; nothing read or spent.
    OutputError
        An output or the ledger could not be written or locked (exit code 5); its message says
        whether the budget was spent ("charged, not published").
    """
    from dpcausal.pipeline import execute

    with _run_spec(spec, data, out=out, ledger=ledger, epsilon=epsilon, engine=engine,
                   engine_address=engine_address) as run:
        command = command_of(spec)
        result = execute(command.method(), run, spec_sha256(spec), seed=seed,
                         test_noise_seed=test_noise_seed, write=out is not None)
    assert result.receipt is not None
    assert result.release is not None
    made = result.release
    return Release(command=command.name, plan=_plan(command.name, result),
                   receipt=result.receipt, tables=dict(made.tables),
                   documents=dict(made.documents), figures=dict(made.figures),
                   summary=dict(result.summary), files=dict(result.files),
                   paths=tuple(result.output_paths))


def _plan(command: str, result: RunResult) -> Plan:
    return Plan(command=command, n_rows=result.n_rows, privacy=result.plan,
                ledger=result.ledger_state, refusal=result.refusal, target=result.target,
                dry_run=result.dry_run)
