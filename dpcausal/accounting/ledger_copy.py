"""Copy a ledger into a new one, every record unchanged: ``dpcausal ledger export`` / ``import``.

A file ledger moves into a database (or a database ledger into a file, or either into another of
either kind) record for record: the same ``seq``, ``prev_hash``, ``hash`` and ``mac`` under the same
key, which moves with them, so every receipt charged to the source still names its record in the
copy. The source is read under its lock (no run can append while it is copied) and must verify;
the copy is written in one commit and verified afterwards against the source (same records, so the
same totals and caps).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpcausal.accounting.budget import Budget
from dpcausal.accounting.ledger_store import open_store
from dpcausal.accounting.ledger_url import is_database_url, redact_url
from dpcausal.accounting.replay import replay
from dpcausal.errors import LedgerIntegrityError, OutputError, SpecError


@dataclass(frozen=True)
class CopyReport:
    """What was copied, as verified in the destination."""

    source: str
    dest: str
    records: int
    ledger_id: str
    last_hash: str
    key_location: str
    spent: dict[str, Budget] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``dpcausal ledger export|import --json``)."""
        return {"source": self.source, "dest": self.dest, "records": self.records,
                "ledger_id": self.ledger_id, "last_hash": self.last_hash,
                "key": self.key_location, "notes": self.notes,
                "spent": {ds: b.to_dict() for ds, b in sorted(self.spent.items())}}


def _identity(location: str | Path) -> str:
    if is_database_url(location):
        return redact_url(str(location))
    return os.path.realpath(location)


def copy_ledger(source: str | Path, dest: str | Path, *,
                lock_timeout: float | None = None) -> CopyReport:
    """Copy the ledger at ``source`` into a new ledger at ``dest`` and verify the copy.

    Raises
    ------
    OutputError
        The source is missing or unkeyed, the destination exists, or I/O failed (nothing copied).
    LedgerIntegrityError
        The source fails its integrity check (nothing copied), or the copy does not verify.
    """
    if _identity(source) == _identity(dest):
        raise SpecError("the source and the destination are the same ledger")
    src = open_store(source, lock_timeout=lock_timeout)
    dst = open_store(dest, lock_timeout=lock_timeout)
    with src.transaction() as read:
        snap = read.snapshot
        snap.raise_if_damaged()
        if not snap.exists:
            raise OutputError(f"{src.location}: ledger not found; check the source ledger")
        if not snap.keyed:
            raise OutputError(f"{src.location}: an unkeyed ledger of an earlier dpcausal; adopt "
                              f"it first with 'dpcausal ledger init --adopt --ledger "
                              f"{src.location}'")
        totals = replay(snap.records)
        if totals.problems:
            pos, problem = totals.problems[0]
            raise LedgerIntegrityError(f"{src.location}: record {pos}: {problem}; nothing was "
                                       "copied")
        key = src.load_key()
        with dst.transaction(create=True) as write:
            write.restore(snap.records, key)
    copy = dst.snapshot()
    problems = [*copy.problems,
                *([] if copy.records == snap.records else ["its records differ from the source's"])]
    if problems:
        problem = problems[0]
        raise LedgerIntegrityError(
            f"{dst.location}: the copy was written but does not verify ({problem}); do not use "
            "it: remove it and copy again (the source is unchanged)")
    return CopyReport(source=src.location, dest=dst.location, records=len(copy.records),
                      ledger_id=str(copy.ledger_id), last_hash=str(copy.records[-1]["hash"]),
                      key_location=dst.key_location(),
                      spent={ds: totals.spent(ds) for ds in sorted(totals.labels)},
                      notes=list(snap.notes))
