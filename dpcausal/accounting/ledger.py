"""The privacy ledger: an append-only, hash-chained JSONL file of receipts, one per release.

Only this module writes the ledger. Every append happens under an exclusive file lock
(``<ledger>.lock``) and re-reads the ledger inside the lock, so concurrent runs (cron jobs, CI
matrices) can never overspend a cap: the budget check and the append are one critical section.
A line is written with a single ``write`` of the whole line followed by ``fsync``; a process killed
mid-write can leave at most a torn last line without a newline, which readers reject loudly
(``audit verify``) and :meth:`Ledger.append` refuses to extend, so it is never silently
double-counted or lost.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import filelock

from dpcausal.accounting.budget import Budget, compose_events
from dpcausal.accounting.receipt import GENESIS_HASH, finalize, receipt_hash
from dpcausal.errors import BudgetExceededError, LedgerLockError, OutputError

LOCK_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class LedgerState:
    """What a dataset has spent, and what a planned run would bring it to."""

    dataset: str
    spent: Budget
    requested: Budget
    cap: Budget

    @property
    def after(self) -> Budget:
        """The spend after the planned run."""
        return self.spent + self.requested

    def to_dict(self) -> dict[str, Any]:
        """The receipt's ``ledger`` field."""
        return {
            "dataset": self.dataset,
            "spent_before": self.spent.to_dict(),
            "spent_after": self.after.to_dict(),
            "cap": self.cap.to_dict(),
        }


def _line_problem(line: str, prev: str) -> str | None:
    """Why a ledger line cannot be trusted, or None."""
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"not valid JSON: {exc.msg}"
    if not isinstance(entry, dict):
        return "not a JSON object"
    if entry.get("prev_hash") != prev:
        return "hash chain broken: prev_hash does not match the previous line"
    if receipt_hash(entry) != entry.get("hash"):
        return "its hash does not match its content (edited after writing)"
    events = entry.get("events")
    if not isinstance(events, list):
        return "no events list"
    for ev in events:
        try:
            eps, delta = float(ev["epsilon"]), float(ev["delta"])
        except (KeyError, TypeError, ValueError):
            return "an event without numeric epsilon and delta"
        if not (math.isfinite(eps) and eps >= 0 and 0 <= delta <= 1):
            return "an event with a negative or non-finite epsilon or delta"
    if not isinstance((entry.get("ledger") or {}).get("dataset"), str):
        return "no ledger.dataset"
    return None


def _fmt(b: Budget) -> str:
    return f"ε={b.epsilon:g}, δ={b.delta:g}"


class Ledger:
    """A ledger file.

    Parameters
    ----------
    path
        The JSONL file; created on the first append.
    lock_timeout
        Seconds to wait for the lock before failing with exit code 5 (default
        ``LOCK_TIMEOUT_SECONDS``, 60 s).
    """

    def __init__(self, path: Path, *, lock_timeout: float | None = None) -> None:
        self.path = Path(path)
        self.lock_timeout = LOCK_TIMEOUT_SECONDS if lock_timeout is None else lock_timeout

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = filelock.FileLock(str(self.path) + ".lock", timeout=self.lock_timeout)
            with lock:
                yield
        except filelock.Timeout as exc:
            raise LedgerLockError(
                f"{self.path}: could not lock the ledger within {self.lock_timeout:g} s "
                f"(another dpcausal run holds {self.path}.lock); retry later"
            ) from exc
        except OSError as exc:
            raise OutputError(f"{self.path}: cannot open the ledger: {exc.strerror}") from exc

    def entries(self) -> list[dict[str, Any]]:
        """Parse and check every line; raise OutputError on anything a spend must not trust.

        Checked: a complete last line, JSON objects, each line's own hash, the chain of
        ``prev_hash``, and events whose ε and δ are finite and non-negative. A forged or edited
        line could otherwise refund budget. (Dropping whole lines from the end keeps a valid chain:
        keep receipts, or back the ledger up append-only, to detect that.)
        """
        if not self.path.exists():
            return []
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise OutputError(f"{self.path}: cannot read the ledger: {exc.strerror}") from exc
        if raw and not raw.endswith(b"\n"):
            raise OutputError(
                f"{self.path}: the last line is incomplete (a run was killed while appending; it "
                f"released nothing); run 'dpcausal audit repair --ledger {self.path}' to move it aside"
            )
        out: list[dict[str, Any]] = []
        prev = GENESIS_HASH
        for lineno, line in enumerate(raw.decode("utf-8", "replace").splitlines(), start=1):
            if not line.strip():
                continue
            problem = _line_problem(line, prev)
            if problem:
                raise OutputError(
                    f"{self.path}: line {lineno} fails the ledger's integrity check ({problem}); "
                    f"nothing was spent. Run 'dpcausal audit verify --ledger {self.path}' and "
                    "restore the ledger from a backup"
                )
            entry = json.loads(line)
            out.append(entry)
            prev = entry["hash"]
        return out

    def repair_torn_tail(self) -> Path | None:
        """Under the lock, move an incomplete last line to ``<ledger>.torn-<time>``.

        A torn line comes from a run killed during its append; such a run wrote no output (outputs
        are written only after a complete, fsynced append), so removing it refunds nothing that
        was released. Returns the file the torn bytes were saved to, or None if there was none.
        """
        with self._locked():
            if not self.path.exists():
                return None
            raw = self.path.read_bytes()
            if not raw or raw.endswith(b"\n"):
                return None
            cut = raw.rfind(b"\n") + 1
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            saved = self.path.with_name(f"{self.path.name}.torn-{stamp}")
            saved.write_bytes(raw[cut:])
            with self.path.open("r+b") as fh:
                fh.truncate(cut)
                fh.flush()
                os.fsync(fh.fileno())
            return saved

    @staticmethod
    def spent_in(entries: list[dict[str, Any]], dataset: str) -> Budget:
        """Total (ε, δ) charged to ``dataset`` by ``entries`` (basic composition over runs)."""
        eps: list[float] = []
        dels: list[float] = []
        for entry in entries:
            if (entry.get("ledger") or {}).get("dataset") != dataset:
                continue
            run = compose_events(entry.get("events", []))
            eps.append(run.epsilon)
            dels.append(run.delta)
        return Budget(math.fsum(eps), min(1.0, math.fsum(dels)))

    def state(self, dataset: str, requested: Budget, cap: Budget) -> LedgerState:
        """Read the current spend (under the lock, so never a half-written line).

        Creates nothing: with no ledger file yet, nothing has been spent.
        """
        if not self.path.exists():
            return LedgerState(dataset, Budget(0.0, 0.0), requested, cap)
        with self._locked():
            entries = self.entries()
        return LedgerState(dataset, self.spent_in(entries, dataset), requested, cap)

    @staticmethod
    def check(state: LedgerState) -> None:
        """Raise BudgetExceededError when the planned run does not fit the cap."""
        if not state.after.fits_within(state.cap):
            raise BudgetExceededError(
                f"privacy budget of dataset '{state.dataset}' exceeded: requested "
                f"{_fmt(state.requested)} / spent {_fmt(state.spent)} / cap {_fmt(state.cap)}; "
                "lower privacy.epsilon (or delta), or raise ledger.budget if your policy allows"
            )

    def append(
        self, receipt: dict[str, Any], *, dataset: str, cap: Budget, requested: Budget
    ) -> dict[str, Any]:
        """Under the lock: re-check the cap, then append the finalized receipt.

        Returns the receipt as written (with ``ledger``, ``prev_hash`` and ``hash``).
        """
        with self._locked():
            entries = self.entries()
            state = LedgerState(dataset, self.spent_in(entries, dataset), requested, cap)
            self.check(state)
            prev = entries[-1]["hash"] if entries else GENESIS_HASH
            final = finalize({**receipt, "ledger": state.to_dict()}, prev)
            line = (json.dumps(final, sort_keys=True, allow_nan=False) + "\n").encode()
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    view = memoryview(line)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise OutputError(f"{self.path}: cannot append to the ledger: {exc.strerror}") from exc
            return final
