"""The PostgreSQL ledger: one ledger per database, shared by every host and CI job that can reach it.

The schema (:mod:`dpcausal.accounting.ledger_pg_schema`) is created by ``dpcausal ledger init`` or
``import``, never by a release run. ``records`` hold the exact JSON lines a file ledger would (so
export and import are byte-exact); each committed transaction inserts its records *and* a keyed
head row (the head is never replaced: the tool only INSERTs). The last head names the last
committed record, so dropped rows, even the last ones, are detected.

Append-only: the tool never UPDATEs or DELETEs, and triggers refuse UPDATE, DELETE and TRUNCATE on
every table (for anyone but a role that disables them: its changes still break the chain's MACs).
The roles of jobs need only the grants in ``ledger_pg_schema.GRANTS``. The key is not in the
database (:mod:`dpcausal.accounting.ledger_key`).

Concurrency: a critical section is one READ COMMITTED transaction that first takes the ledger's
transaction-level advisory lock (``pg_advisory_xact_lock``, waited for at most ``lock_timeout``),
then reads, decides and inserts. Every writer waits for the lock, so no serialization failure can
arise; a program that inserts without the lock collides on ``seq`` (primary key) and the charge is
refused with nothing spent. A client killed mid-transaction spends nothing: the server rolls back
and frees the lock. Reads (plan checks, ``audit verify``) take a REPEATABLE READ snapshot, no lock.

Failures: a database that is down or unreachable fails before any row of data is read (exit 5,
nothing spent); a failure before the COMMIT rolls everything back (nothing spent). A COMMIT that
fails (the connection lost while committing) has an unknown outcome; the store then reconnects,
waits for the lock (the failed transaction holds it until it has ended) and looks for its row:
found, the charge stands and the release is published; absent, nothing was spent; the database
unreachable, the run exits 5 saying the charge may have been committed (charged, not published).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from dpcausal._version import __version__
from dpcausal.accounting import chain
from dpcausal.accounting.ledger_key import (
    EnvKey,
    env_key,
    key_for_new_ledger,
    missing_key_error,
)
from dpcausal.accounting.ledger_pg_schema import DDL, SCHEMA_VERSION, TABLES
from dpcausal.accounting.ledger_store import Snapshot, check_restorable
from dpcausal.accounting.ledger_url import redact_url, url_problem
from dpcausal.accounting.receipt import receipt_hash
from dpcausal.errors import LedgerIntegrityError, LedgerLockError, OutputError, SpecError

LOCK_TIMEOUT_SECONDS = 60.0
CONNECT_TIMEOUT_SECONDS = 10
LOCK_ID = int.from_bytes(hashlib.sha256(b"dpcausal ledger").digest()[:8], "big", signed=True)
"""The advisory lock of the database's ledger (advisory locks are per database)."""


class CommitOutcomeUnknown(OutputError):
    """The connection was lost while committing and could not be re-established: the charge may
    or may not have been committed."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PostgresStore:
    """A ledger kept in a PostgreSQL database (see the module docstring).

    Parameters
    ----------
    url
        ``postgresql://host[:port]/dbname[?service=...]`` without a password: credentials come
        from libpq's environment variables, password file or service file.
    lock_timeout
        Seconds to wait for the ledger's lock before failing with exit code 5 (default 60 s).
    """

    def __init__(self, url: str, *, lock_timeout: float | None = None) -> None:
        problem = url_problem(url)
        if problem:
            raise SpecError(f"ledger URL: {problem}")
        self._url = url
        self.location = redact_url(url)
        self.lock_timeout = LOCK_TIMEOUT_SECONDS if lock_timeout is None else lock_timeout

    # -- connections and errors -----------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        extra: dict[str, Any] = {"application_name": "dpcausal"}
        if "connect_timeout" not in self._url and not os.environ.get("PGCONNECT_TIMEOUT"):
            extra["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
        try:
            return psycopg.connect(self._url, **extra)
        except psycopg.Error as exc:
            raise OutputError(f"{self.location}: cannot connect to the ledger database "
                              f"({_first_line(exc)}); nothing was read or spent") from exc

    def _error(self, exc: psycopg.Error, spent: str = "nothing was spent") -> OutputError:
        loc = self.location
        if isinstance(exc, pg_errors.LockNotAvailable):
            return LedgerLockError(f"{loc}: could not lock the ledger within "
                                   f"{self.lock_timeout:g} s (another dpcausal run holds it); "
                                   f"{spent}; retry later")
        if isinstance(exc, pg_errors.InsufficientPrivilege):
            return OutputError(f"{loc}: the database refused ({_first_line(exc)}); {spent}. A "
                               "job's role needs USAGE on schema dpcausal, SELECT on its tables "
                               "and INSERT on dpcausal.records and dpcausal.heads (README)")
        if isinstance(exc, pg_errors.UniqueViolation):
            return LedgerIntegrityError(f"{loc}: the ledger changed while locked (a program "
                                        f"inserts rows without dpcausal's lock); {spent}")
        return OutputError(f"{loc}: the ledger database failed ({_first_line(exc)}); {spent}")

    def _lock(self, conn: psycopg.Connection[Any]) -> None:
        """Begin a READ COMMITTED transaction (whatever the server's default) holding the lock."""
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        conn.execute("SELECT set_config('lock_timeout', %s, true)",
                     [f"{max(1, round(self.lock_timeout * 1000))}ms"])
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_ID])

    # -- reading --------------------------------------------------------------------------------

    def _present(self, conn: psycopg.Connection[Any]) -> list[bool] | None:
        """Which tables exist; None when the schema does not."""
        row = conn.execute(
            "SELECT to_regnamespace('dpcausal') IS NOT NULL, "
            + ", ".join(f"to_regclass('dpcausal.{t}') IS NOT NULL" for t in TABLES)).fetchone()
        assert row is not None
        return [bool(x) for x in row[1:]] if row[0] else None

    def _missing(self) -> OutputError:
        return OutputError(f"{self.location}: no dpcausal ledger in this database (no schema "
                           "'dpcausal'); create one with 'dpcausal ledger init --ledger "
                           f"{self.location}' (or 'dpcausal ledger import'); nothing was spent")

    def _read(self, conn: psycopg.Connection[Any], env: EnvKey) -> Snapshot:
        """The snapshot of an existing schema (a key not known yet: nothing checked)."""
        snap = Snapshot(location=self.location, exists=True)
        loc = self.location
        tables = self._present(conn)
        assert tables is not None
        if not all(tables):
            gone = ", ".join(f"dpcausal.{t}" for t, ok in zip(TABLES, tables, strict=True) if not ok)
            snap.problems.append(f"{loc}: the ledger's table(s) {gone} are missing (dropped); "
                                 "restore the database from a backup")
            return snap
        row = conn.execute("SELECT max(version) FROM dpcausal.schema_version").fetchone()
        version = row[0] if row else None
        if version is not None and version > SCHEMA_VERSION:
            raise OutputError(f"{loc}: the ledger's schema is version {version}, written by a "
                              f"newer dpcausal (this one knows {SCHEMA_VERSION}); upgrade dpcausal")
        rows = conn.execute("SELECT seq, record FROM dpcausal.records ORDER BY seq").fetchall()
        heads = conn.execute("SELECT count, head FROM dpcausal.heads ORDER BY count").fetchall()
        if version is None or not rows:
            snap.problems.append(f"{loc}: the ledger's tables are empty (emptied, or the schema "
                                 "was created by hand); restore the database from a backup")
            return snap
        for pos, (seq, text) in enumerate(rows, start=1):
            try:
                rec = json.loads(text)
                if not isinstance(rec, dict):
                    raise ValueError("not an object")
            except ValueError as exc:
                snap.problems.append(f"{loc}: row {seq} is not a JSON record ({exc})")
                rec = {}
            if seq != pos and len(snap.problems) < 20:
                snap.problems.append(f"{loc}: row {seq} is at position {pos}: rows before it "
                                     "are missing (deleted)")
            snap.records.append(rec)
        start = chain.legacy_prefix(snap.records)
        if start is None:
            snap.problems.append(f"{loc}: no ledger-init record: not a dpcausal ledger")
            return snap
        snap.keyed = True
        snap.ledger_id = snap.records[start].get("ledger_id")
        if env.key is not None:
            self._check(snap, env, heads, start)
        return snap

    def _check(self, snap: Snapshot, env: EnvKey, heads: Sequence[tuple[Any, ...]],
               start: int) -> None:
        loc = self.location
        key = env.key
        assert key is not None
        first = snap.records[start]
        if receipt_hash(first) == first.get("hash") and first.get("mac") != chain.mac_of(
                key, str(first.get("hash"))):
            snap.problems.append(f"{loc}: the key from {env.where} is not this ledger's "
                                 "key (its init record's MAC does not verify); give the job the "
                                 "key created by 'dpcausal ledger init'")
            return
        snap.problems.extend(f"{loc}: record {n}: {p}"
                             for n, p in chain.check_chain(snap.records, key))
        if not heads:
            snap.problems.append(f"{loc}: no head row (it names the last committed record; "
                                 "without it dropped rows cannot be ruled out)")
            return
        for count, text in heads:
            try:
                head = json.loads(text)
                found = chain.head_problems(head, key, snap.records, snap.ledger_id)
                if not found and head.get("count") != count:
                    found = ["its count differs from its row's"]
            except (ValueError, AttributeError):
                found = ["not a JSON head record"]
            snap.problems.extend(f"{loc}: head row {count}: {p}" for p in found)
        snap.committed = int(heads[-1][0])
        if len(snap.records) > snap.committed:
            snap.problems.append(
                f"{loc}: {len(snap.records) - snap.committed} record(s) after the last head row "
                "(inserted outside dpcausal's transactions, which add records and head together)")

    def snapshot(self) -> Snapshot:
        """A consistent read of the ledger (REPEATABLE READ, no lock); problems listed."""
        env = env_key(self.location, may_be_missing=True)  # a missing file: after the schema
        conn = self._connect()
        try:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            if self._present(conn) is None:
                raise self._missing()
            if env.key is None:
                raise missing_key_error(self.location, env)
            return self._read(conn, env)
        except psycopg.Error as exc:
            raise self._error(exc, "nothing was read or spent") from exc
        finally:
            conn.close()

    # -- writing --------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, create: bool = False) -> Iterator[_PgTransaction]:
        """Hold the ledger's advisory lock for one read-decide-append transaction.

        Without ``create`` a database without the ledger's schema is refused (a release run never
        creates a shared ledger). Leaving without an append rolls everything back.
        """
        env = env_key(self.location, may_be_missing=True)
        conn = self._connect()
        try:
            try:
                self._lock(conn)
                present = self._present(conn)
                if present is None and not create:
                    raise self._missing()
                snap = (Snapshot(location=self.location, exists=False) if present is None
                        else self._read(conn, env))
            except psycopg.Error as exc:
                raise self._error(exc, "nothing was read or spent") from exc
            if snap.exists and env.key is None:
                raise missing_key_error(self.location, env)
            yield _PgTransaction(self, conn, snap, env)
        finally:
            conn.close()  # without a commit the server rolls back: nothing spent

    def repair_torn_tail(self) -> str | None:
        """A database has no torn records (a transaction commits whole): nothing to repair."""
        snap = self.snapshot()
        if snap.problems:
            raise LedgerIntegrityError("; ".join(snap.problems) + ". Nothing was changed: "
                                       "restore the database from a backup")
        return None

    def load_key(self) -> bytes:
        """The ledger's key, from the environment."""
        key = env_key(self.location).key
        assert key is not None
        return key

    def describe(self) -> dict[str, str]:
        """The receipt's ``ledger.store``: kind and URL without user, password or options."""
        return {"kind": "postgresql", "url": self.location}

    def key_location(self) -> str:
        """Where the jobs' key comes from."""
        try:
            return env_key(self.location, may_be_missing=True).where
        except SpecError:
            return "nowhere: set DPCAUSAL_LEDGER_KEY_FILE"

    def commit(self, conn: psycopg.Connection[Any], rows: Sequence[tuple[int, str]],
               head: Mapping[str, Any], *, create: bool) -> None:
        """Insert ``rows`` and ``head`` (and the schema when ``create``) and commit.

        Raises OutputError when nothing was committed; resolves a lost commit (module docstring).
        """
        try:
            if create:
                for stmt in DDL:
                    conn.execute(stmt)
                conn.execute("INSERT INTO dpcausal.schema_version VALUES (%s, %s)",
                             [SCHEMA_VERSION, __version__])
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO dpcausal.records (seq, record) VALUES (%s, %s)",
                                list(rows))
            conn.execute("INSERT INTO dpcausal.heads (count, head) VALUES (%s, %s)",
                         [head["count"], json.dumps(head, sort_keys=True)])
        except psycopg.Error as exc:
            raise self._error(exc) from exc
        try:
            conn.commit()
        except psycopg.Error as exc:  # lost, or refused: look instead of guessing which
            self._resolve_failed_commit(rows[-1], exc)

    def _resolve_failed_commit(self, last: tuple[int, str], exc: psycopg.Error) -> None:
        """Return when the failed commit's last row is in the ledger; raise when it is not, or
        when that cannot be known (a new connection waits for the lock: the failed transaction
        holds it until it has ended)."""
        seq, text = last
        unknown = (f"{self.location}: committing the charge failed ({_first_line(exc)}) and the "
                   "database could not be reached again: it is unknown whether the charge was "
                   "committed. Nothing "
                   f"was published; if the ledger holds record {seq} "
                   f"(hash {json.loads(text).get('hash', '')[:12]}), its budget is spent "
                   f"(charged, not published): check with 'dpcausal audit verify --ledger "
                   f"{self.location}'")
        try:
            conn = self._connect()
        except OutputError as exc2:
            raise CommitOutcomeUnknown(unknown) from exc2
        try:
            self._lock(conn)
            row = conn.execute("SELECT record FROM dpcausal.records WHERE seq = %s",
                               [seq]).fetchone()
        except psycopg.Error as exc2:
            raise CommitOutcomeUnknown(unknown) from exc2
        finally:
            conn.close()
        if row is None or row[0] != text:
            raise OutputError(f"{self.location}: committing the charge failed "
                              f"({_first_line(exc)}); it was not committed: nothing was spent or "
                              "published") from exc


class _PgTransaction:
    """The append that ends a database store's critical section."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any], snapshot: Snapshot,
                 env: EnvKey) -> None:
        self.store = store
        self.snapshot = snapshot
        self._conn = conn
        self._env = env

    def _commit(self, records: Sequence[Mapping[str, Any]], key: bytes, created: bool) -> None:
        """Insert ``records`` (the next ones, sealed) with their head; forget a key created for a
        ledger that was not committed."""
        snap = self.snapshot
        try:
            rows = [(seq, chain.record_json(r))
                    for seq, r in enumerate(records, start=len(snap.records) + 1)]
            all_records = [*snap.records, *records]
            ledger_id = all_records[chain.legacy_prefix(all_records) or 0]["ledger_id"]
            head = chain.make_head(key, ledger_id=str(ledger_id), count=len(all_records),
                                   last_hash=str(records[-1]["hash"]))
            self.store.commit(self._conn, rows, head, create=not snap.exists)
        except BaseException as exc:
            if created and not isinstance(exc, CommitOutcomeUnknown):
                assert self._env.path is not None
                self._env.path.unlink(missing_ok=True)
            raise

    def append(self, bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Seal ``bodies`` after the last record, insert them and their head, commit."""
        snap = self.snapshot
        snap.raise_if_damaged()
        if snap.keyed:
            assert self._env.key is not None
            key, created = self._env.key, False
        else:
            if not bodies or bodies[0].get("kind") != "ledger-init":
                raise ValueError("the first record of a database ledger must be ledger-init")
            key, created = key_for_new_ledger(self._env, None, self.store.location)
        sealed = chain.seal_all(bodies, after=snap.records, key=key)
        self._commit(sealed, key, created)
        return sealed

    def restore(self, records: Sequence[Mapping[str, Any]], key: bytes) -> None:
        """Insert ``records`` unchanged as this new ledger (its key must be ``key``)."""
        check_restorable(self.snapshot, records, "the database already holds a dpcausal ledger")
        key, created = key_for_new_ledger(self._env, key, self.store.location)
        self._commit(records, key, created)
