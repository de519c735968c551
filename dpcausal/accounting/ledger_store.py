"""Where a ledger's records live: the small interface every ledger storage implements.

The policy (caps, labels, totals, what to append) lives in :mod:`dpcausal.accounting.ledger`; the
keyed chain and head in :mod:`dpcausal.accounting.chain`. A store only keeps records durably and
exclusively:

- :meth:`LedgerStore.snapshot` reads every record, verifies the keyed chain and the head record, and
  reports what it found (never raising for damage: audits want every problem).
- :meth:`LedgerStore.transaction` holds the store's exclusive lock (file: ``flock`` on the resolved
  file; a database: a per-ledger advisory lock or a SERIALIZABLE transaction) for one critical
  section: read a snapshot, let the policy decide, then :meth:`Transaction.append` seals the new
  records (``seq``, ``prev_hash``, ``hash``, ``mac``), writes them durably and moves the head. An
  append that fails leaves the store as it was (nothing spent) or raises saying what was kept.
- Creating a ledger (an append to a snapshot with ``exists`` False, whose first body is the
  ``ledger-init`` record) creates its key; adopting a legacy ledger (first body ``ledger-adopt``)
  too.

A PostgreSQL store (issue 15) implements the same three methods over a records table, a head row and
a key kept outside the database; :func:`open_store` picks the store from the location.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dpcausal.errors import LedgerIntegrityError


@dataclass
class Snapshot:
    """What a store holds, as read under its lock, with the evidence of any damage.

    Attributes
    ----------
    location
        The ledger as the user named it (for messages).
    exists
        False when no ledger has been created yet (nothing spent).
    records
        Every complete record, in order (including untrusted ones when ``problems`` is not empty).
    keyed
        True for a keyed (format 2) ledger; False for a legacy unkeyed one or none yet.
    ledger_id
        The ledger's public identifier (from its init/adopt record), None before creation.
    committed
        Records the head record says were committed.
    problems
        Integrity problems, each naming where and what (truncation, a bad MAC, a missing key, ...).
    torn_tail
        Bytes of an incomplete final record that the head proves was never committed (a run killed
        while appending); ``audit repair`` moves them aside. Empty when there is none.
    notes
        Facts worth reporting that are not problems (records after the head: charged, never
        published).
    """

    location: str
    exists: bool
    records: list[dict[str, Any]] = field(default_factory=list)
    keyed: bool = False
    ledger_id: str | None = None
    committed: int = 0
    problems: list[str] = field(default_factory=list)
    torn_tail: bytes = b""
    notes: list[str] = field(default_factory=list)

    def raise_if_damaged(self) -> None:
        """Raise :class:`LedgerIntegrityError` naming the first problem (nothing is spent)."""
        if self.problems:
            more = f" (and {len(self.problems) - 1} more problem(s))" if len(self.problems) > 1 else ""
            raise LedgerIntegrityError(
                f"{self.problems[0]}{more}; nothing was spent. Run 'dpcausal audit verify --ledger "
                f"{self.location}' for the evidence and restore the ledger from a backup")
        if self.torn_tail:
            raise LedgerIntegrityError(
                f"{self.location}: the last line is incomplete ({len(self.torn_tail)} bytes) and "
                "the head record proves it was never committed (a run was killed or the disk "
                "filled while appending; it published nothing); run 'dpcausal audit repair "
                f"--ledger {self.location}' to move it aside")


class Transaction(Protocol):
    """One critical section of a store: the snapshot it read and the append that ends it."""

    snapshot: Snapshot

    def append(self, bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Seal ``bodies`` after the snapshot's last record, write them durably, move the head."""
        ...


class LedgerStore(Protocol):
    """Durable, exclusive storage of one ledger's records (see the module docstring)."""

    location: str

    def snapshot(self) -> Snapshot:
        """Read and verify everything, under the lock."""
        ...

    def transaction(self) -> AbstractContextManager[Transaction]:
        """Hold the exclusive lock; yield a transaction over a fresh snapshot."""
        ...

    def repair_torn_tail(self) -> str | None:
        """Move a provably uncommitted torn final record aside; return where, or None."""
        ...


def open_store(location: str | Path, *, lock_timeout: float | None = None) -> LedgerStore:
    """The store for ``location`` (a file path; a database URL once a database store exists)."""
    from dpcausal.accounting.ledger_file import FileStore

    return FileStore(Path(location), lock_timeout=lock_timeout)
