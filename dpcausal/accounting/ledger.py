"""The privacy ledger's policy: caps owned by the ledger, dataset labels, totals, the charge.

Only this module decides what is appended to a ledger; a :class:`LedgerStore` keeps the records
(keyed hash chain, head record, lock: :mod:`dpcausal.accounting.ledger_store`).

Records, in order: one ``ledger-init`` (or ``ledger-adopt`` after legacy lines), then ``cap`` and
``accountant`` records (the policy) and releases (receipts, which have no ``kind``).

- **Caps belong to the ledger.** A dataset's cap is the last ``cap`` record for its label. The first
  charge of a new label records the spec's ``ledger.budget`` as its cap (a ``cap`` record appended in
  the same critical section); ``dpcausal ledger init``/``set-cap`` record one explicitly. A spec can
  lower the cap for its own run (the run is checked against the smaller of the two), never raise
  it: raising takes ``dpcausal ledger set-cap --raise``, itself a visible record.
- **Labels.** A label that differs from an existing one only by case, whitespace or Unicode
  normalization is refused: near-duplicates would split one dataset's budget in two.
- **The accountant belongs to the ledger.** How a dataset's releases add up (``basic`` sums, or
  ``pld`` privacy loss distributions: :mod:`dpcausal.accounting.accountant`) is recorded in the
  init line (``dpcausal ledger init --accountant``); a later ``accountant`` line may only switch
  to a rule that never reports more (``basic`` → ``pld``), and applies to the whole history.
  Every total is recomputed from the events with the ledger's accountant, at the cap's δ.
- **One critical section.** The cap check and the append happen under one lock, re-reading the
  ledger; concurrent runs can never overspend.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpcausal._version import __version__
from dpcausal.accounting import chain
from dpcausal.accounting.accountant import Accountant, RunCost
from dpcausal.accounting.budget import Budget
from dpcausal.accounting.ledger_store import LedgerStore, Snapshot, open_store
from dpcausal.accounting.replay import Replay, budget_of, replay
from dpcausal.errors import (
    BudgetExceededError,
    LedgerIntegrityError,
    OutputError,
    PrivacyError,
    SpecError,
)

LABEL_PATTERN = re.compile(r"^[A-Za-z0-9._:/@+-]{1,200}$")
"""Dataset labels: the same rule as the spec's ``ledger.dataset``."""


def now_iso() -> str:
    """The current UTC time, to the second (the form of every ``created_at``)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def label_key(label: str) -> str:
    """The form two labels share when they differ only by case, whitespace or Unicode form."""
    return "".join(unicodedata.normalize("NFKC", label).casefold().split())


def check_label(label: str, known: Iterable[str]) -> None:
    """Refuse a label that is a near-duplicate of an existing one (exit 2)."""
    for other in known:
        if other != label and label_key(other) == label_key(label):
            raise SpecError(
                f"dataset label '{label}' differs from the ledger's existing label '{other}' only "
                f"by case, whitespace or Unicode form; use '{other}' exactly (or a clearly "
                "different name for a different dataset)")


def _fmt(b: Budget) -> str:
    return f"ε={b.epsilon:g}, δ={b.delta:g}"


def _cap_min(a: Budget, b: Budget) -> Budget:
    return Budget(min(a.epsilon, b.epsilon), min(a.delta, b.delta))


@dataclass(frozen=True, slots=True)
class LedgerState:
    """What a dataset has spent, its cap, and what a planned run would bring it to.

    ``cap`` is the cap the run is checked against: the ledger's, or the spec's when lower; on a
    dataset's first charge (``ledger_cap`` None) the spec's, which the charge records. ``spent``
    and ``after`` are composed by ``accountant`` at the cap's δ; ``requested`` is the run's own
    cost (basic composition of its events, as its receipt states it). ``store`` says where the
    ledger is kept (its kind; a database's URL without credentials).
    """

    dataset: str
    spent: Budget
    requested: Budget
    after: Budget
    cap: Budget
    ledger_cap: Budget | None = None
    ledger_id: str | None = None
    store: dict[str, str] | None = None
    accountant: Accountant = field(default_factory=Accountant)

    @property
    def cap_source(self) -> str:
        """``ledger``, ``spec`` (lower than the ledger's, for this run) or ``first-charge``."""
        if self.ledger_cap is None:
            return "first-charge"
        return "ledger" if self.cap == self.ledger_cap else "spec"

    def to_dict(self) -> dict[str, Any]:
        """The receipt's ``ledger`` field."""
        out: dict[str, Any] = {"dataset": self.dataset, "ledger_id": self.ledger_id,
                               "spent_before": self.spent.to_dict(),
                               "spent_after": self.after.to_dict(), "cap": self.cap.to_dict(),
                               "cap_source": self.cap_source,
                               "accountant": self.accountant.to_dict()}
        if self.store is not None:
            out["store"] = self.store
        return out


def _record_base(kind: str, created_at: str | None) -> dict[str, Any]:
    return {"kind": kind, "tool": "dpcausal", "version": __version__,
            "created_at": created_at or now_iso()}


class Ledger:
    """A ledger: its policy over a store.

    Parameters
    ----------
    location
        The ledger file, or a ``postgresql://`` URL (no password: libpq's environment, password
        file or service file supply credentials).
    lock_timeout
        Seconds to wait for the lock before failing with exit code 5 (default 60 s).
    """

    def __init__(self, location: str | Path, *, lock_timeout: float | None = None) -> None:
        self.store: LedgerStore = open_store(location, lock_timeout=lock_timeout)
        self.location = self.store.location

    # -- reading --------------------------------------------------------------------------------

    def _trusted(self, snap: Snapshot) -> Replay:
        snap.raise_if_damaged()
        if snap.exists and snap.records and not snap.keyed:
            raise OutputError(
                f"{self.location} was written by an earlier dpcausal (an unkeyed hash chain, which "
                "cannot reveal truncation or a re-chained file); adopt it once with 'dpcausal "
                f"ledger init --adopt --ledger {self.location}' (it verifies the old chain and "
                "starts the keyed one), then rerun; nothing was spent")
        result = replay(snap.records)
        if result.problems:
            pos, problem = result.problems[0]
            raise LedgerIntegrityError(
                f"{self.location}: line {pos} fails the ledger's integrity check ({problem}); "
                f"nothing was spent. Run 'dpcausal audit verify --ledger {self.location}'")
        return result

    def snapshot(self) -> Snapshot:
        """The store's verified snapshot (problems listed, not raised)."""
        return self.store.snapshot()

    def _state(self, snap: Snapshot, policy: Replay, dataset: str, run: RunCost,
               spec_cap: Budget, ledger_id: str | None) -> LedgerState:
        check_label(dataset, policy.labels)
        ledger_cap = policy.caps.get(dataset)
        cap = spec_cap if ledger_cap is None else _cap_min(ledger_cap, spec_cap)
        total = policy.total(dataset)
        spent = total.spent(cap.delta)
        total.add(run)
        return LedgerState(dataset, spent, run.basic, total.spent(cap.delta), cap, ledger_cap,
                           ledger_id or snap.ledger_id, self.store.describe(), policy.accountant)

    def state(self, dataset: str, requested: RunCost | Budget, spec_cap: Budget) -> LedgerState:
        """The dataset's spend and cap as a planned run would meet them (writes nothing).

        ``requested`` is the planned run (:meth:`RunCost.from_plan`), or only its (ε, δ).
        """
        run = requested if isinstance(requested, RunCost) else RunCost.stated(requested)
        snap = self.store.snapshot()
        return self._state(snap, self._trusted(snap), dataset, run, spec_cap, None)

    @staticmethod
    def check(state: LedgerState) -> None:
        """Raise BudgetExceededError when the planned run does not fit the cap."""
        if not state.after.fits_within(state.cap):
            where = {"ledger": "recorded in the ledger",
                     "spec": "set lower by the spec's ledger.budget",
                     "first-charge": "from the spec's ledger.budget"}[state.cap_source]
            raise BudgetExceededError(
                f"privacy budget of dataset '{state.dataset}' exceeded: requested "
                f"{_fmt(state.requested)} / spent {_fmt(state.spent)} / after this run "
                f"{_fmt(state.after)} ({state.accountant.name} composition) / cap "
                f"{_fmt(state.cap)} ({where}); lower privacy.epsilon (or delta). A spec cannot "
                "raise a cap the ledger holds: if your policy allows more, 'dpcausal ledger set-cap --raise' "
                "records it")

    # -- writing --------------------------------------------------------------------------------

    def charge(self, receipt: Mapping[str, Any], *, dataset: str,
               spec_cap: Budget) -> dict[str, Any]:
        """Under the lock: re-check the cap, then append the receipt (and the first cap record).

        The run's cost is read from the receipt's events (what ``audit verify`` recomputes).

        Returns the receipt as written (``ledger``, ``seq``, ``prev_hash``, ``hash``, ``mac``).
        Creates the ledger (and its key) when it does not exist yet, in an existing directory.
        """
        with self.store.transaction() as txn:
            snap = txn.snapshot
            policy = self._trusted(snap)
            bodies: list[dict[str, Any]] = []
            ledger_id = snap.ledger_id
            if not snap.keyed:
                ledger_id = chain.new_ledger_id()
                bodies.append(self._init_body(ledger_id, receipt.get("created_at")))
            state = self._state(snap, policy, dataset, RunCost.from_record(receipt), spec_cap,
                                ledger_id)
            self.check(state)
            if state.ledger_cap is None:
                bodies.append(self._cap_body(dataset, spec_cap, None, "first-charge",
                                             receipt.get("created_at")))
            bodies.append({**receipt, "ledger": state.to_dict()})
            return txn.append(bodies)[-1]

    @staticmethod
    def _init_body(ledger_id: str, created_at: str | None,
                   accountant: Accountant | None = None) -> dict[str, Any]:
        acc = accountant or Accountant()
        return {**_record_base("ledger-init", created_at), "format": chain.FORMAT,
                "ledger_id": ledger_id, "composition": acc.name, "accountant": acc.to_dict()}

    @staticmethod
    def _cap_body(dataset: str, cap: Budget, previous: Budget | None, reason: str,
                  created_at: str | None, note: str | None = None) -> dict[str, Any]:
        body = {**_record_base("cap", created_at), "dataset": dataset, "cap": cap.to_dict(),
                "previous_cap": previous.to_dict() if previous else None, "reason": reason}
        if note:
            body["note"] = note
        return body

    def init(self, *, dataset: str | None = None, cap: Budget | None = None,
             note: str | None = None, accountant: Accountant | None = None) -> list[dict[str, Any]]:
        """Create a new ledger (refused if one exists), optionally with a dataset's cap, with
        ``accountant`` (default ``basic``)."""
        if dataset is not None:
            _check_label_syntax(dataset)
        with self.store.transaction(create=True) as txn:
            snap = txn.snapshot
            snap.raise_if_damaged()
            if snap.exists and (snap.records or snap.keyed):
                raise OutputError(f"{self.location}: a ledger already exists there; 'ledger init' "
                                  "only creates new ledgers (use 'ledger set-cap' to change a "
                                  "cap, 'ledger init --adopt' for a ledger of an earlier version)")
            bodies = [self._init_body(chain.new_ledger_id(), None, accountant)]
            if dataset is not None and cap is not None:
                bodies.append(self._cap_body(dataset, cap, None, "init", None, note))
            return txn.append(bodies)

    def set_cap(self, dataset: str, epsilon: float, delta: float | None = None, *,
                allow_raise: bool = False, note: str | None = None) -> dict[str, Any]:
        """Record ``dataset``'s cap. Lowering is always allowed; raising needs ``allow_raise``.

        ``delta`` None keeps the current cap's δ (0 for a dataset without a cap).
        """
        _check_label_syntax(dataset)
        with self.store.transaction() as txn:
            snap = txn.snapshot
            if not snap.exists or not snap.keyed:
                self._trusted(snap)
                raise OutputError(f"{self.location}: no ledger there; create it with 'dpcausal "
                                  f"ledger init --ledger {self.location}'")
            policy = self._trusted(snap)
            check_label(dataset, policy.labels)
            previous = policy.caps.get(dataset)
            if delta is None:
                delta = previous.delta if previous else 0.0
            cap = Budget(epsilon, delta)
            raised = previous is not None and not cap.fits_within(previous)
            if previous is not None and raised and not allow_raise:
                raise BudgetExceededError(
                    f"dataset '{dataset}': the new cap {_fmt(cap)} is higher than the ledger's "
                    f"{_fmt(previous)}; raising a cap is a policy decision: rerun with --raise "
                    "(recorded in the ledger) if your policy allows it")
            reason = "raise" if raised else ("set" if previous is None else "lower")
            return txn.append([self._cap_body(dataset, cap, previous, reason, None, note)])[0]

    def set_accountant(self, accountant: Accountant, *,
                       note: str | None = None) -> dict[str, Any]:
        """Switch the ledger's accountant; only to one that never reports more (basic → pld).

        The new accountant recomputes every dataset's whole history: a release already made is
        re-accounted by a rule at least as tight, never a looser one.
        """
        with self.store.transaction() as txn:
            snap = txn.snapshot
            policy = self._trusted(snap)
            if not snap.exists or not snap.keyed:
                raise OutputError(f"{self.location}: no ledger there; create it with 'dpcausal "
                                  f"ledger init --accountant {accountant.name}'")
            current = policy.accountant
            if accountant == current:
                raise SpecError(f"{self.location}: the ledger already uses the "
                                f"{current.name} accountant with these parameters")
            if not current.tighter_or_equal(accountant):
                raise PrivacyError(
                    f"{self.location}: the ledger's accountant is {current.name}; switching to "
                    f"{accountant.name} could report more than the totals its releases were "
                    "checked against, so it is refused (only basic → pld is allowed; start a new "
                    "ledger for another rule)")
            body = {**_record_base("accountant", None), "accountant": accountant.to_dict(),
                    "previous": current.to_dict()}
            if note:
                body["note"] = note
            return txn.append([body])[0]

    def adopt(self) -> list[dict[str, Any]]:
        """Start the keyed chain of a legacy (unkeyed) ledger after verifying it.

        Appends a ``ledger-adopt`` record naming the last legacy line, and for each dataset a cap
        record with the cap of its first legacy release (the cap it was first charged under; later
        larger caps in the legacy lines were raises the new rules do not allow).
        """
        with self.store.transaction() as txn:
            snap = txn.snapshot
            snap.raise_if_damaged()
            if snap.keyed:
                raise OutputError(f"{self.location}: the ledger is already keyed; nothing to adopt")
            if not snap.records:
                raise OutputError(f"{self.location}: no legacy ledger to adopt; use 'dpcausal "
                                  "ledger init' for a new one")
            first_caps: dict[str, Budget] = {}

            def first_cap(pos: int, rec: Mapping[str, Any], ds: str, *_: Any) -> None:
                first_caps.setdefault(ds, budget_of(rec["ledger"]["cap"]))

            result = replay(snap.records, first_cap)
            if result.problems:
                pos, problem = result.problems[0]
                raise LedgerIntegrityError(f"{self.location}: line {pos}: {problem}; not adopted")
            body = {**_record_base("ledger-adopt", None), "format": chain.FORMAT,
                    "ledger_id": chain.new_ledger_id(), "composition": "basic",
                    "accountant": Accountant().to_dict(),
                    "adopted": {"lines": len(snap.records), "last_hash": snap.records[-1]["hash"]}}
            caps = [self._cap_body(ds, c, None, "adopt", None) for ds, c in first_caps.items()]
            return txn.append([body, *caps])

    def repair_torn_tail(self) -> str | None:
        """Move a provably uncommitted torn last line aside (see the store)."""
        return self.store.repair_torn_tail()


def _check_label_syntax(label: str) -> None:
    if not LABEL_PATTERN.match(label):
        raise SpecError(f"dataset label '{label}' is not valid: use 1-200 letters, digits and "
                        "._:/@+- (a name, never a data hash)")
