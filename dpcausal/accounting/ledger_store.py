"""Where a ledger's records live: the small interface every ledger storage implements.

The policy (caps, labels, totals, what to append) lives in :mod:`dpcausal.accounting.ledger`; the
keyed chain and head in :mod:`dpcausal.accounting.chain`. A store only keeps records durably and
exclusively:

- :meth:`LedgerStore.snapshot` reads every record, verifies the keyed chain and the head record, and
  reports what it found (never raising for damage: audits want every problem).
- :meth:`LedgerStore.transaction` holds the store's exclusive lock (file: ``flock`` on the resolved
  file; database: a per-ledger advisory lock) for one critical section: read a snapshot, let the
  policy decide, then :meth:`Transaction.append` seals the new records (``seq``, ``prev_hash``,
  ``hash``, ``mac``), writes them durably and moves the head. An append that fails leaves the store
  as it was (nothing spent) or raises saying what was kept.
- Creating a ledger (an append to a snapshot with ``exists`` False, whose first body is the
  ``ledger-init`` record) creates its key; adopting a legacy ledger (first body ``ledger-adopt``)
  too. A file ledger is created by its first charge (in an existing directory); a database ledger
  only by a transaction opened with ``create=True`` (``dpcausal ledger init`` or ``import``): a
  release run never creates a shared ledger.
- :meth:`Transaction.restore` writes the records of another ledger unchanged (same ``seq``,
  ``hash``, ``mac``, under the same key) into a new one: ``dpcausal ledger export``/``import``.

:func:`open_store` picks the store from the location: a ``postgresql://`` URL
(:mod:`dpcausal.accounting.ledger_pg`, which needs the optional ``psycopg`` driver, imported only
then) or a file path (:mod:`dpcausal.accounting.ledger_file`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dpcausal.accounting.chain import legacy_prefix
from dpcausal.accounting.ledger_url import is_database_url
from dpcausal.errors import LedgerIntegrityError, OutputError, SpecError


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


def check_restorable(snapshot: Snapshot, records: Sequence[Mapping[str, Any]], what: str) -> int:
    """Refuse to restore ``records`` into anything but a new store; return their init position.

    ``what`` says what exists there already (for the message).
    """
    snapshot.raise_if_damaged()
    if snapshot.exists:
        raise OutputError(f"{snapshot.location}: {what}; a ledger is copied only into a new one")
    start = legacy_prefix(records)
    if not records or start is None:
        raise ValueError("only a keyed ledger can be restored")
    return start


class Transaction(Protocol):
    """One critical section of a store: the snapshot it read and the append that ends it."""

    snapshot: Snapshot

    def append(self, bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Seal ``bodies`` after the snapshot's last record, write them durably, move the head."""
        ...

    def restore(self, records: Sequence[Mapping[str, Any]], key: bytes) -> None:
        """Write another ledger's ``records`` unchanged into this new, empty one, under ``key``."""
        ...


class LedgerStore(Protocol):
    """Durable, exclusive storage of one ledger's records (see the module docstring)."""

    location: str
    """The ledger as messages name it (a file path, or a database URL without credentials)."""

    def snapshot(self) -> Snapshot:
        """Read and verify everything (a consistent view; never raises for damage)."""
        ...

    def transaction(self, *, create: bool = False) -> AbstractContextManager[Transaction]:
        """Hold the exclusive lock; yield a transaction over a fresh snapshot.

        ``create`` allows the transaction to create the ledger (``ledger init``, ``import``).
        """
        ...

    def repair_torn_tail(self) -> str | None:
        """Move a provably uncommitted torn final record aside; return where, or None."""
        ...

    def load_key(self) -> bytes:
        """The ledger's HMAC key (to copy the ledger with its MACs valid); raises if unavailable."""
        ...

    def describe(self) -> dict[str, str]:
        """What the receipt records about the store: its kind (and a database's redacted URL)."""
        ...

    def key_location(self) -> str:
        """Where the key lives, for messages (never the key)."""
        ...


def open_store(location: str | Path, *, lock_timeout: float | None = None) -> LedgerStore:
    """The store for ``location``: a ``postgresql://`` URL or a file path."""
    if is_database_url(location):
        try:
            from dpcausal.accounting.ledger_pg import PostgresStore
        except ImportError as exc:
            if isinstance(exc, ModuleNotFoundError) and not (exc.name or "").startswith("psycopg"):
                raise  # a module of ours is missing: a bug, not a missing extra
            raise SpecError(
                f"a PostgreSQL ledger needs the optional driver psycopg, which cannot be imported "
                f"({exc}): pip install 'dpcausal[postgres]'") from exc
        return PostgresStore(str(location), lock_timeout=lock_timeout)
    from dpcausal.accounting.ledger_file import FileStore

    return FileStore(Path(location), lock_timeout=lock_timeout)
