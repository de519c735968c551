"""Verify a ledger and receipts from Python: ``dpcausal audit verify`` (which calls it)."""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from dpcausal.errors import AuditViolation, LedgerIntegrityError, SpecError

if TYPE_CHECKING:
    from dpcausal.audit.verify import VerifyReport


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
    location = ledger if ledger is None or isinstance(ledger, str) else Path(ledger)
    try:
        report = run(location, files)
    except LedgerIntegrityError as exc:
        raise AuditViolation(str(exc)) from exc
    found = violation_of(report)
    if check and found is not None:
        raise found
    return report
