"""Audit from Python: verify a ledger and receipts (``dpcausal audit verify``) and check a
command's privacy empirically (``dpcausal audit privacy``); both commands call these functions."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from dpcausal.api.ledger import ledger_location
from dpcausal.api.run import Data, data_source
from dpcausal.api.specs import command_of, load_spec
from dpcausal.errors import AuditViolation, LedgerIntegrityError, SpecError

if TYPE_CHECKING:
    from dpcausal.audit.privacy import AuditReport
    from dpcausal.audit.verify import VerifyReport
    from dpcausal.spec.base import CommonSpec


def violation_of(report: VerifyReport) -> AuditViolation | None:
    """The error a report with problems raises (its first problem, and how many more)."""
    if report.ok:
        return None
    more = len(report.problems) - 1
    return AuditViolation(report.problems[0]
                          + (f" (and {more} more problem(s))" if more else ""))


def verify(ledger: str | PathLike[str] | None = None,
           receipts: Iterable[str | PathLike[str]] = (), *,
           check: bool = True) -> VerifyReport:
    """Verify a ledger and/or receipts: ``dpcausal audit verify --ledger L --receipt R ...``.

    Checks the ledger's keyed hash chain and head, recomputes every dataset's total with the
    ledger's accountant against its cap, recomputes each event's ε from its noise, and checks
    each receipt against its ledger line and its outputs' hashes.

    Parameters
    ----------
    ledger
        A ledger file, or a ``postgresql://`` URL.
    receipts
        ``receipt.json`` files (their outputs are read beside them).
    check
        Raise on the first problem (as the command line exits 4); False: return the report
        with its ``problems``.

    Returns
    -------
    VerifyReport
        ``ok``, ``problems``, ``notes``, each dataset's ``totals`` (spend and cap), the
        ``accountant``, ``entries`` and ``receipts_checked``; ``to_dict()`` is the ``--json``
        object.

    Raises
    ------
    AuditViolation
        The ledger fails its integrity check, or (with ``check``) a problem was found (exit
        code 4 on the command line).
    SpecError
        Neither a ledger nor a receipt was given (exit code 2).
    """
    from dpcausal.audit.verify import verify as run

    files = [Path(r) for r in receipts]
    if ledger is None and not files:
        raise SpecError("give a ledger (--ledger FILE|URL) and/or receipts (--receipt FILE)")
    try:
        report = run(None if ledger is None else ledger_location(ledger), files)
    except LedgerIntegrityError as exc:
        raise AuditViolation(str(exc)) from exc
    found = violation_of(report)
    if check and found is not None:
        raise found
    return report


def privacy_violation(report: AuditReport,
                      spec: CommonSpec | str | PathLike[str]) -> AuditViolation | None:
    """The error an audit that found a violation raises: every problem, after the spec file (or
    ``<command spec>`` for a spec object)."""
    if not report.violation:
        return None
    path = Path(spec) if isinstance(spec, str | PathLike) else None
    where = path if path is not None else f"<{report.command} spec>"
    return AuditViolation(f"{where}: " + "; ".join(report.problems), file=path)


def audit_privacy(spec: CommonSpec | str | PathLike[str], data: Data = None, *,
                  trials: int | None = None, pairs: int = 50, rows: int = 1000,
                  seed: int | None = 0, check: bool = True,
                  progress: Callable[[str, int, int], None] | None = None) -> AuditReport:
    """Check empirically that a command is as private as its receipt claims:
    ``dpcausal audit privacy``.

    Runs the spec's command on neighbouring datasets under its own neighbouring relation and
    measures the privacy loss exactly (gray-box: each mechanism's input on both sides against its
    stated sensitivity) and from repeated releases (black-box: a 95% lower bound on ε). Nothing
    is released or charged, and no ledger is touched. The report is for the curator only: with
    ``data`` it is computed from the data without privacy.

    Parameters
    ----------
    spec
        The spec of the command to audit: a spec object, or a YAML file (loaded as
        :func:`dpcausal.load_spec` does).
    data
        Audit neighbours of this data (a path, a pandas DataFrame or a pyarrow Table). Default: a
        synthetic data set drawn inside the spec's bounds (not the spec's ``data.path``).
    trials
        Black-box releases per side of the closest pair, per stage (default: enough for each
        stage's claimed ε to be testable, within a cap; 0: gray-box only).
    pairs
        Neighbouring datasets tried.
    rows
        Rows of the synthetic data set.
    seed
        Seed of the audit's own randomness (None: fresh).
    check
        Raise :class:`~dpcausal.AuditViolation` when the claim does not hold (as the command line
        exits 4); False: return the report with its ``problems``.
    progress
        Called as ``progress(stage, done, total)`` while the audit runs.

    Returns
    -------
    AuditReport
        ``violation``, ``problems`` and ``notes``; the gray-box ``max_loss``, ``losses`` and
        ``max_sensitivity_ratio``; the ``black_box`` bounds per stage; ``to_dict()`` is the
        ``--json`` object.

    Raises
    ------
    AuditViolation
        With ``check``: an estimate exceeds the claimed ε (exit code 4 on the command line).
    SpecError, DataError
        An invalid spec or option, or data that does not fit the spec (exit code 2).
    """
    import numpy as np

    from dpcausal import preprocess
    from dpcausal.audit.privacy import run_audit
    from dpcausal.io.tables import read_table
    from dpcausal.pipeline import load_side_inputs

    for name, value, least in (("pairs", pairs, 1), ("rows", rows, 2), ("trials", trials, 0)):
        if value is not None and value < least:  # the command line's option limits
            raise SpecError(f"--{name} must be at least {least}. Got {value} instead.")
    model = load_spec(spec) if isinstance(spec, str | PathLike) else spec
    adapter = command_of(model).audit_adapter()
    with data_source(data) as path:
        model = model.with_overrides(data=path)
        # the audit runs on the model columns: a row-local preprocessing maps neighbours to
        # neighbours, and the synthetic rows fill the model columns' (derived) bounds
        prep = preprocess.for_spec(model)
        model = prep.model_spec(model)
        if adapter.audit_spec is not None:
            model = adapter.audit_spec(model)
        rng = np.random.default_rng(seed)
        side = load_side_inputs(adapter.method, model, prep)
        if path is not None:
            frame = read_table(path, prep.raw_columns(adapter.method.data_columns(model)))
            prep.check(frame, path)
            frame = prep.transform(frame)
        else:
            frame = adapter.synthesize(model, rows, rng)
        report: AuditReport = run_audit(adapter, model, frame, side, pairs=pairs, trials=trials,
                                        rng=rng, progress=progress)
    found = privacy_violation(report, spec)
    if check and found is not None:
        raise found
    return report
