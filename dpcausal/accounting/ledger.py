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
from pathlib import Path
from typing import Any

import filelock

from dpcausal.accounting.budget import Budget, compose_events
from dpcausal.accounting.receipt import GENESIS_HASH, finalize
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
        """Parse every line; raise OutputError on a torn or non-JSON line."""
        if not self.path.exists():
            return []
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise OutputError(f"{self.path}: cannot read the ledger: {exc.strerror}") from exc
        if raw and not raw.endswith(b"\n"):
            raise OutputError(
                f"{self.path}: the last line is incomplete (a run was interrupted while writing); "
                "run 'dpcausal audit verify' and restore the ledger from backup before spending more"
            )
        out = []
        for lineno, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise OutputError(f"{self.path}: line {lineno} is not valid JSON ({exc.msg})") from exc
        return out

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
        """Read the current spend (without the lock) and describe the planned run."""
        return LedgerState(dataset, self.spent_in(self.entries(), dataset), requested, cap)

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
