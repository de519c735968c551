"""The JSONL file ledger: one record per line, a key file and a head record beside it.

Files, all beside the *resolved* ledger (symlinks followed once, when the store is opened):

- ``LEDGER`` — the records, appended with one ``write`` and ``fsync``;
- ``LEDGER.key`` — the HMAC key (32 random bytes, hex; mode 0600), created with the ledger;
- ``LEDGER.head`` — ``{ledger_id, count, size, last_hash, mac}``, replaced atomically (temp file,
  ``fsync``, ``os.replace``, directory ``fsync``) after every append: the commit point;
- ``LEDGER.lock`` — the exclusive ``flock`` every read and append holds.

One lock per file, not per spelling: the lock is taken on the resolved path, the path is resolved
again under the lock (a re-pointed symlink is refused), and a ledger with more than one hard link is
refused (two names would take two locks). A failed append truncates the file back to its previous
length (the run spends nothing). A run killed after its line is written but before the head moves
leaves a complete, keyed line after the head: it counts as spent (it was never published). A run
killed mid-write leaves an incomplete line after the head: provably never committed, moved aside by
``audit repair``.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpcausal.accounting import chain
from dpcausal.accounting.ledger_key import read_key_file, write_key_file
from dpcausal.accounting.ledger_store import Snapshot, check_restorable
from dpcausal.errors import LedgerIntegrityError, LedgerLockError, OutputError
from dpcausal.io.durable import fsync_dir, write_all

LOCK_TIMEOUT_SECONDS = 60.0


class FileStore:
    """A ledger kept in a JSONL file (see the module docstring).

    Parameters
    ----------
    path
        The ledger file. Its directory must exist: a ledger is never created in a missing
        directory (a typo there would start a fresh, empty budget).
    lock_timeout
        Seconds to wait for the lock before failing with exit code 5 (default 60 s).
    """

    def __init__(self, path: Path, *, lock_timeout: float | None = None) -> None:
        self.location = str(path)
        self.lock_timeout = LOCK_TIMEOUT_SECONDS if lock_timeout is None else lock_timeout
        self._given = Path(os.path.abspath(path))
        self.path = Path(os.path.realpath(self._given))
        for parent in (self._given.parent, self.path.parent):
            if not parent.is_dir():
                raise OutputError(
                    f"{path}: the ledger's directory {parent} does not exist; a ledger is never "
                    "created in a missing directory (a mistyped path would start a fresh budget). "
                    "Fix ledger.path or --ledger, or create a new ledger explicitly with "
                    f"'dpcausal ledger init --ledger {path}'")
        name = self.path.name
        self.key_path = self.path.with_name(name + ".key")
        self.head_path = self.path.with_name(name + ".head")
        self.lock_path = self.path.with_name(name + ".lock")
        self._check_file()

    # -- identity and locking -------------------------------------------------------------------

    def _check_file(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise OutputError(f"{self.location}: cannot read the ledger: {exc.strerror}") from exc
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{self.location}: the ledger is not a regular file; fix --ledger")
        if st.st_nlink > 1:
            raise OutputError(
                f"{self.location}: the ledger file has {st.st_nlink} hard links; hard-linked "
                "ledgers are refused (each name would take its own lock, so two runs could both "
                "spend the last budget). Keep one name and use a symlink for the others")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        import filelock  # lazy (issue 24): a plan that never locks the ledger does not load it

        lock = filelock.FileLock(str(self.lock_path), timeout=self.lock_timeout)
        try:
            lock.acquire()
        except filelock.Timeout as exc:
            raise LedgerLockError(
                f"{self.location}: could not lock the ledger within {self.lock_timeout:g} s "
                f"(another dpcausal run holds {self.lock_path}); retry later") from exc
        except OSError as exc:
            raise OutputError(
                f"{self.location}: cannot lock the ledger ({self.lock_path}): {exc.strerror}"
            ) from exc
        try:
            if Path(os.path.realpath(self._given)) != self.path:
                raise OutputError(f"{self.location}: the ledger path was re-pointed while waiting "
                                  "for its lock (a symlink changed); nothing was spent; retry")
            self._check_file()
            yield
        finally:
            lock.release()

    # -- reading --------------------------------------------------------------------------------

    def _load_key(self) -> tuple[bytes | None, str | None]:
        return read_key_file(self.key_path)

    def load_key(self) -> bytes:
        """The ledger's key (``LEDGER.key``); raises LedgerIntegrityError when unusable."""
        key, problem = self._load_key()
        if key is None:
            raise LedgerIntegrityError(problem or f"{self.location}: its key file {self.key_path} "
                                       "is missing; restore it from a backup")
        return key

    def describe(self) -> dict[str, str]:
        """The receipt's ``ledger.store``: the kind only (a path may name a user or a project)."""
        return {"kind": "file"}

    def key_location(self) -> str:
        """The key file beside the ledger."""
        return str(self.key_path)

    def _load_head(self) -> tuple[dict[str, Any] | None, str | None]:
        try:
            head = json.loads(self.head_path.read_bytes())
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError) as exc:
            return None, f"{self.head_path}: cannot read the head record ({exc})"
        if not isinstance(head, dict):
            return None, f"{self.head_path}: the head record is not a JSON object"
        return head, None

    def _read(self) -> tuple[Snapshot, int, bytes | None]:
        """Snapshot, file length, key: the caller holds the lock."""
        snap = Snapshot(location=self.location, exists=self.path.exists())
        key, key_problem = self._load_key()
        head, head_problem = self._load_head()
        side = [str(p) for p, there in ((self.key_path, key or key_problem),
                                        (self.head_path, head or head_problem)) if there]
        if not snap.exists:
            if side:
                snap.problems.append(
                    f"{self.location}: the ledger file is missing but {' and '.join(side)} "
                    "exist: the ledger was deleted or moved")
            return snap, 0, None
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise OutputError(f"{self.location}: cannot read the ledger: {exc.strerror}") from exc
        cut = raw.rfind(b"\n") + 1
        tail = raw[cut:]
        ends: list[int] = []
        bad: set[int] = set()
        for lineno, line in enumerate(raw[:cut].split(b"\n")[:-1], start=1):
            ends.append((ends[-1] if ends else 0) + len(line) + 1)
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError) as exc:
                snap.problems.append(f"{self.location}: line {lineno} is not a JSON record ({exc})")
                bad.add(lineno)
                rec = {}
            snap.records.append(rec)
        if chain.legacy_prefix(snap.records) is None:
            self._read_unkeyed(snap, side, tail, head)
        else:
            self._read_keyed(snap, key, key_problem, head, head_problem, tail, ends, bad)
        return snap, len(raw), key

    def _read_unkeyed(self, snap: Snapshot, side: list[str], tail: bytes,
                      head: dict[str, Any] | None) -> None:
        if side:
            if snap.records or tail:
                what = "has no ledger-init line: it was replaced by another file"
            else:
                count = head.get("count") if head else None
                what = ("is empty" + (f" but its head record says {count} line(s) were committed"
                                      if count else "") + ": it was emptied")
            snap.problems.append(f"{self.location}: the ledger {what} ({' and '.join(side)} "
                                 "belong to it)")
            return
        snap.problems.extend(f"{self.location}: line {n}: {p}"
                             for n, p in chain.check_legacy_chain(snap.records))
        if tail:
            snap.problems.append(f"{self.location}: the last line is incomplete and this unkeyed "
                                 "(legacy) ledger has no head record to prove it was never "
                                 "committed")

    def _read_keyed(self, snap: Snapshot, key: bytes | None, key_problem: str | None,
                    head: dict[str, Any] | None, head_problem: str | None, tail: bytes,
                    ends: list[int], bad: set[int]) -> None:
        snap.keyed = True
        start = chain.legacy_prefix(snap.records) or 0
        snap.ledger_id = snap.records[start].get("ledger_id")
        loc = self.location
        if key is None:
            snap.problems.append(key_problem or f"{loc}: its key file {self.key_path} is missing; "
                                 "restore it from a backup (without it the ledger cannot be "
                                 "verified or extended)")
            return
        snap.problems.extend(f"{loc}: line {n}: {p}" for n, p in chain.check_chain(snap.records, key)
                             if n not in bad)
        if head is None:
            snap.problems.append(head_problem or f"{loc}: its head record {self.head_path} is "
                                 "missing (it names the last committed line; without it truncation "
                                 "cannot be ruled out); restore it from a backup")
            return
        found = chain.head_problems(head, key, snap.records, snap.ledger_id)
        count = int(head["count"]) if not found else 0  # head_problems checked it is an int >= 1
        if not found and head.get("size") != ends[count - 1]:
            found = [f"line {count} does not end where the head record says ({head.get('size')})"]
        if found:
            cut = f"; the file ends with {len(tail)} bytes of an incomplete line" if tail else ""
            snap.problems.extend(f"{loc}: {p}{cut}" for p in found)
            return
        snap.committed = count
        if tail and not snap.problems:
            snap.torn_tail = tail
        elif tail:
            snap.problems.append(f"{loc}: the last line is incomplete")
        extra = len(snap.records) - snap.committed
        if extra:
            snap.notes.append(
                f"{loc}: {extra} line(s) after the head record (written by a run killed or failed "
                "after its append, before publishing): they count as spent")

    def snapshot(self) -> Snapshot:
        """Read and verify the ledger under its lock (never raises for damage; see problems).

        Where there is no ledger, key or head at all, nothing is locked or created (a dry run or a
        refused run leaves no trace); a charge re-reads under the lock anyway.
        """
        if not any(p.exists() for p in (self.path, self.key_path, self.head_path)):
            return Snapshot(location=self.location, exists=False)
        with self._locked():
            return self._read()[0]

    # -- writing --------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, create: bool = False) -> Iterator[_FileTransaction]:
        """Hold the lock for one read-decide-append critical section.

        ``create`` changes nothing: a file ledger is created by its first append, in an existing
        directory.
        """
        with self._locked():
            snap, size, key = self._read()
            yield _FileTransaction(self, snap, size, key)

    def _write_head(self, head: Mapping[str, Any]) -> None:
        """Write the head to a temp file and ``os.replace`` it: the commit point."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.head_path.name}.", suffix=".tmp",
                                   dir=self.path.parent)
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)  # public like the ledger (mkstemp makes 0600)
            write_all(fd, (json.dumps(head, sort_keys=True) + "\n").encode())
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(tmp, self.head_path)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            raise

    def commit(self, data: bytes, head: Mapping[str, Any], *, base_size: int,
               key: bytes | None) -> None:
        """Append ``data`` and move the head; on failure truncate back and raise (nothing spent).

        ``key`` is the key to create with the ledger (a new or adopted ledger), else None.
        """
        existed = self.path.exists()
        fd = -1
        created_key = False
        try:
            if key is not None:
                write_key_file(self.key_path, key)
                created_key = True
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            if os.fstat(fd).st_size != base_size:
                raise LedgerIntegrityError(
                    f"{self.location}: the ledger changed while locked (a program writes it "
                    "without dpcausal's lock); nothing was spent")
            write_all(fd, data)
            os.fsync(fd)
            self._write_head(head)
        except OSError as exc:
            self._roll_back(fd, base_size, existed=existed, created_key=created_key, exc=exc)
        finally:
            if fd >= 0:
                os.close(fd)
        try:
            fsync_dir(self.path.parent)
        except OSError as exc:
            raise OutputError(
                f"{self.location}: the charge was written but its directory could not be synced "
                f"({exc.strerror}); charged, not published") from exc

    def _roll_back(self, fd: int, base_size: int, *, existed: bool, created_key: bool,
                   exc: OSError) -> None:
        try:
            if fd >= 0:
                os.ftruncate(fd, base_size)
                os.fsync(fd)
            if not existed:
                self.path.unlink(missing_ok=True)
            if created_key:
                self.key_path.unlink(missing_ok=True)
        except OSError as exc2:
            raise OutputError(
                f"{self.location}: cannot append to the ledger ({exc.strerror}) nor remove the "
                f"partial line ({exc2.strerror}); nothing was published. The ledger may end with "
                "an incomplete line ('dpcausal audit repair' moves it aside) or a complete one, "
                "which counts as spent") from exc
        raise OutputError(f"{self.location}: cannot append to the ledger ({exc.strerror}); the "
                          "partial line was removed: nothing was spent or published") from exc

    def repair_torn_tail(self) -> str | None:
        """Move an incomplete last line that the head proves uncommitted to ``LEDGER.torn-<time>``.

        Anything else (a torn line the head counts as committed, a legacy ledger without a head,
        any integrity problem) raises :class:`LedgerIntegrityError` with the evidence.
        """
        with self._locked():
            snap, size, _ = self._read()
            if snap.problems:
                raise LedgerIntegrityError(
                    "; ".join(snap.problems) + ". Nothing was changed: only an incomplete last "
                    "line that the head record proves was never committed can be repaired; "
                    "restore the ledger from a backup")
            if not snap.torn_tail:
                return None
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
            saved = self.path.with_name(f"{self.path.name}.torn-{stamp}")
            fd = os.open(saved, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                write_all(fd, snap.torn_tail)
                os.fsync(fd)
            finally:
                os.close(fd)
            with self.path.open("r+b") as fh:
                fh.truncate(size - len(snap.torn_tail))
                fh.flush()
                os.fsync(fh.fileno())
            return str(saved)


class _FileTransaction:
    """The append that ends a file store's critical section."""

    def __init__(self, store: FileStore, snapshot: Snapshot, size: int, key: bytes | None) -> None:
        self.store = store
        self.snapshot = snapshot
        self._size = size
        self._key = key

    def append(self, bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Seal ``bodies`` after the last record, append them in one write, move the head."""
        snap = self.snapshot
        snap.raise_if_damaged()
        new_key = None
        if not snap.keyed:  # creating the ledger, or adopting a legacy one: its key is born here
            expected = "ledger-adopt" if snap.records else "ledger-init"
            if not bodies or bodies[0].get("kind") != expected:
                raise ValueError(f"the first record of this ledger must be {expected}")
            key = new_key = chain.new_key()
            ledger_id = str(bodies[0]["ledger_id"])
        else:
            assert self._key is not None
            assert snap.ledger_id is not None
            key, ledger_id = self._key, snap.ledger_id
        sealed = chain.seal_all(bodies, after=snap.records, key=key)
        data = _lines(sealed)
        head = chain.make_head(key, ledger_id=ledger_id, count=len(snap.records) + len(sealed),
                               last_hash=sealed[-1]["hash"], size=self._size + len(data))
        self.store.commit(data, head, base_size=self._size, key=new_key)
        return sealed

    def restore(self, records: Sequence[Mapping[str, Any]], key: bytes) -> None:
        """Write ``records`` unchanged as this new ledger, with ``key`` as its key file."""
        start = check_restorable(self.snapshot, records, "a file exists there")
        data = _lines(records)
        head = chain.make_head(key, ledger_id=str(records[start]["ledger_id"]),
                               count=len(records), last_hash=str(records[-1]["hash"]),
                               size=len(data))
        self.store.commit(data, head, base_size=0, key=key)


def _lines(records: Sequence[Mapping[str, Any]]) -> bytes:
    return b"".join((chain.record_json(r) + "\n").encode() for r in records)
