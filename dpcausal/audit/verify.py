"""``audit verify``: the ledger's keyed chain and head, its totals and caps, and receipts.

The ledger is read by its store (keyed chain, head record: truncation, deletion, re-chaining and
reordering are problems); the totals are recomputed from the events with the ledger's own policy
replay and accountant (:func:`dpcausal.accounting.replay.replay`), so the audit and the charge add
up the same way. Each event's ε is recomputed from its kind, sensitivity and noise scale
(:func:`dpcausal.mechanisms.registry.check_event`): an event claiming less than its noise gives is
a problem.
A receipt names the line it was charged at (``seq``, ``hash``, ``ledger.ledger_id``): a ledger that
lost or rewrote that line, or is another ledger, is a problem even when the ledger alone verifies.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpcausal.accounting.budget import Budget, compose_events
from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.ledger import Ledger
from dpcausal.accounting.ledger_store import Snapshot
from dpcausal.accounting.receipt import receipt_hash
from dpcausal.accounting.replay import replay
from dpcausal.errors import OutputError, SpecError
from dpcausal.mechanisms.registry import check_event, claim_reason

REL_TOL = 1e-9
PLD_REL_TOL = 1e-6
"""Totals composed by privacy loss distributions are floating-point FFT results: recomputing them
with another numpy may move the last digits. A millionth of ε is far below any meaningful spend."""


@dataclass
class VerifyReport:
    """Findings of a verification: ``problems`` empty means everything holds."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    totals: dict[str, dict[str, Any]] = field(default_factory=dict)
    accountant: dict[str, Any] = field(default_factory=dict)
    entries: int = 0
    receipts_checked: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is broken."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON form for ``--json``."""
        return {"ok": self.ok, "problems": self.problems, "notes": self.notes,
                "totals": self.totals, "accountant": self.accountant,
                "ledger_entries": self.entries,
                "receipts_checked": self.receipts_checked}


def _close(a: float, b: float, tol: float = REL_TOL) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=1e-15)


def _same(a: Budget, d: Mapping[str, Any], tol: float = REL_TOL) -> bool:
    return _close(a.epsilon, float(d["epsilon"]), tol) and _close(a.delta, float(d["delta"]), tol)


def check_events(events: list[Mapping[str, Any]], where: str, report: VerifyReport) -> int:
    """Recompute each event's ε from its noise; return how many rest on their own proof.

    An event is a problem when its noise scale and sensitivity give, at its δ, a larger ε than it
    claims (too little noise for the claim). Events marked as objective perturbation,
    caller-calibrated or uncertified are not recomputed (their ε is not a function of the noise).
    """
    own_proof = 0
    for ev in events:
        try:
            event = PrivacyEvent(**dict(ev))
        except (TypeError, ValueError, SpecError):  # recorded without its mechanism (dpcausal 0.1)
            own_proof += 1
            continue
        if claim_reason(event) is not None:
            own_proof += 1
            continue
        try:
            got = check_event(event)
        except ValueError as exc:
            report.problems.append(f"{where}: stage '{event.stage}': {exc}")
            continue
        if got.epsilon > event.epsilon * (1 + REL_TOL) + 1e-12:
            report.problems.append(
                f"{where}: stage '{event.stage}' ({event.kind}) claims ε={event.epsilon:g} at "
                f"δ={event.delta:g}, but its noise scale {event.noise_scale:g} and sensitivity "
                f"{event.sensitivity:g} give ε={got.epsilon:g}: the noise is too small for the "
                "claim")
        elif got.problem is not None:
            report.notes.append(f"{where}: stage '{event.stage}': {got.problem}; composed by its "
                                "stated (ε, δ)")
    return own_proof


def verify_ledger(location: str | Path, report: VerifyReport) -> Snapshot:
    """Check the ledger's integrity and recompute every dataset's total against its cap.

    ``location`` is a ledger file or a ``postgresql://`` URL; messages name it as its store does
    (a URL without credentials).
    """
    snap = Ledger(location).snapshot()
    path = snap.location
    if not snap.exists and not snap.problems:
        raise OutputError(f"{path}: ledger not found; check --ledger")
    report.problems.extend(snap.problems)
    report.notes.extend(snap.notes)
    if snap.torn_tail:
        report.problems.append(
            f"{path}: the last line is incomplete ({len(snap.torn_tail)} bytes) and the head "
            "record proves it was never committed; 'dpcausal audit repair' moves it aside")
    if snap.records and not snap.keyed:
        report.notes.append(
            f"{path}: an unkeyed ledger of an earlier dpcausal: truncation and re-chaining cannot "
            f"be detected; adopt it with 'dpcausal ledger init --adopt --ledger {path}'")
    last_cap: dict[str, dict[str, Any]] = {}
    own_proof = 0

    def check(pos: int, rec: Mapping[str, Any], ds: str, before: Budget, after: Budget,
              ledger_cap: Budget | None) -> None:
        nonlocal own_proof
        where = f"{path}: line {pos}"
        led = rec["ledger"]
        if not _same(compose_events(rec["events"]), {"epsilon": rec["epsilon"],
                                                     "delta": rec["delta"]}):
            report.problems.append(f"{where}: epsilon/delta do not equal the sum of its events")
        own_proof += check_events(rec["events"], where, report)
        tol = PLD_REL_TOL if (led.get("accountant") or {}).get("name") == "pld" else REL_TOL
        if not _same(before, led["spent_before"], tol):
            report.problems.append(f"{where}: spent_before {led['spent_before']} does not match "
                                   f"the recomputed total {before.to_dict()} for dataset '{ds}'")
        if not _same(after, led["spent_after"], tol):
            report.problems.append(f"{where}: spent_after {led['spent_after']} does not match "
                                   f"{after.to_dict()}")
        cap = Budget(float(led["cap"]["epsilon"]), float(led["cap"]["delta"]))
        if "mac" in rec and ledger_cap is None:
            report.problems.append(f"{where}: a release of dataset '{ds}' before any cap record")
        if ledger_cap is not None and not cap.fits_within(ledger_cap):
            report.problems.append(f"{where}: checked against cap {cap.to_dict()}, above the "
                                   f"ledger's cap {ledger_cap.to_dict()} for dataset '{ds}'")
        if not after.fits_within(cap):
            report.problems.append(f"{where}: dataset '{ds}' total {after.to_dict()} exceeds "
                                   f"its cap {cap.to_dict()}")
        last_cap[ds] = cap.to_dict()

    result = replay(snap.records, check)
    report.problems.extend(f"{path}: line {pos}: {p}" for pos, p in result.problems)
    report.entries = sum(result.releases.values())
    report.accountant = result.accountant.to_dict()
    if own_proof:
        report.notes.append(
            f"{path}: {own_proof} event(s) are not recomputed from their noise (objective "
            "perturbation, caller-calibrated, uncertified, or recorded without their mechanism); "
            "they are composed by their stated (ε, δ)")
    for ds in sorted(result.labels):
        spent = result.spent(ds)
        cap = result.caps[ds].to_dict() if ds in result.caps else last_cap.get(ds)
        report.totals[ds] = {**spent.to_dict(), "cap": cap,
                             "entries": result.releases.get(ds, 0)}
    return snap


def _receipt_in_ledger(receipt: Mapping[str, Any], snap: Snapshot) -> str | None:
    """Why the ledger does not hold this receipt where it says it was charged, or None."""
    seq = receipt.get("seq")
    if seq is None:  # a receipt of the unkeyed format: look it up by hash
        if any(r.get("hash") == receipt["hash"] for r in snap.records):
            return None
        return "receipt is not in the ledger (no line has its hash)"
    led_id = (receipt.get("ledger") or {}).get("ledger_id")
    if led_id != snap.ledger_id:
        return (f"receipt was charged to ledger {led_id}, but this ledger is {snap.ledger_id} "
                "(another ledger, or this one was deleted and re-created)")
    if not isinstance(seq, int) or seq > len(snap.records):
        return (f"receipt was charged at line {seq} but the ledger has {len(snap.records)} lines: "
                "committed history was lost (truncated, or rolled back to an older copy)")
    if snap.records[seq - 1].get("hash") != receipt["hash"]:
        return f"line {seq} of the ledger is not this receipt: history was rewritten"
    return None


def verify_receipt(path: Path, report: VerifyReport, snap: Snapshot | None) -> None:
    """Check a receipt's own hash, its line in the ledger (else its events' ε), and its outputs'
    hashes."""
    try:
        receipt = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise OutputError(f"{path}: receipt not found") from exc
    except (OSError, ValueError) as exc:
        report.problems.append(f"{path}: not a readable JSON receipt ({exc})")
        return
    report.receipts_checked += 1
    if not isinstance(receipt, dict) or receipt_hash(receipt) != receipt.get("hash"):
        report.problems.append(f"{path}: hash mismatch (the receipt was edited)")
        return
    if snap is not None and receipt.get("ledger"):
        problem = _receipt_in_ledger(receipt, snap)
        if problem:
            report.problems.append(f"{path}: {problem}")
    else:  # not checked as a ledger line: its events' ε are recomputed here
        check_events(list(receipt.get("events") or []), str(path), report)
    for out in receipt.get("outputs", []):
        target = Path(path).parent / out["path"]
        if not target.exists():
            report.notes.append(f"{target}: output not present (not checked)")
            continue
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        if digest != out["sha256"]:
            report.problems.append(f"{target}: content does not match the receipt's sha256")


def verify(ledger: str | Path | None, receipts: list[Path]) -> VerifyReport:
    """Verify a ledger and/or receipts."""
    report = VerifyReport()
    snap = verify_ledger(ledger, report) if ledger is not None else None
    for r in receipts:
        verify_receipt(r, report, snap)
    return report
