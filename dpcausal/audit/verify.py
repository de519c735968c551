"""``audit verify``: integrity of the ledger's hash chain, its totals and caps, and receipts' outputs."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpcausal.accounting.budget import Budget, compose_events
from dpcausal.accounting.receipt import GENESIS_HASH, receipt_hash
from dpcausal.errors import OutputError

REL_TOL = 1e-9


@dataclass
class VerifyReport:
    """Findings of a verification: ``problems`` empty means everything holds."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    totals: dict[str, dict[str, Any]] = field(default_factory=dict)
    entries: int = 0
    receipts_checked: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is broken."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON form for ``--json``."""
        return {"ok": self.ok, "problems": self.problems, "notes": self.notes,
                "totals": self.totals, "ledger_entries": self.entries,
                "receipts_checked": self.receipts_checked}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-15)


def _event_total(entry: dict[str, Any]) -> Budget:
    return compose_events(entry.get("events") or [])


def verify_ledger(path: Path, report: VerifyReport) -> dict[str, str]:
    """Check every line of the ledger; return hash → dataset of the entries found."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise OutputError(f"{path}: ledger not found; check --ledger") from exc
    except OSError as exc:
        raise OutputError(f"{path}: cannot read the ledger: {exc.strerror}") from exc
    if raw and not raw.endswith(b"\n"):
        report.problems.append(f"{path}: last line is incomplete (a write was interrupted)")
    prev = GENESIS_HASH
    running: dict[str, Budget] = {}
    seen: dict[str, str] = {}
    for lineno, line in enumerate(raw.decode("utf-8", "replace").splitlines(), start=1):
        where = f"{path}: line {lineno}"
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            report.problems.append(f"{where}: not a JSON receipt ({exc})")
            break
        report.entries += 1
        try:
            if entry.get("prev_hash") != prev:
                report.problems.append(f"{where}: hash chain broken (prev_hash does not match the "
                                       "previous line: a line was removed, reordered or edited)")
            if receipt_hash(entry) != entry.get("hash"):
                report.problems.append(f"{where}: hash mismatch (the line was edited after writing)")
            prev = entry.get("hash", "")
            seen[prev] = (entry.get("ledger") or {}).get("dataset", "")
            total = _event_total(entry)
            if not (_close(total.epsilon, float(entry["epsilon"]))
                    and _close(total.delta, float(entry["delta"]))):
                report.problems.append(f"{where}: epsilon/delta do not equal the sum of its events")
            led = entry.get("ledger") or {}
            ds = led.get("dataset")
            if not ds:
                report.problems.append(f"{where}: entry has no ledger.dataset")
                continue
            before = running.get(ds, Budget(0.0, 0.0))
            after = before + total
            sb, sa, cap = led["spent_before"], led["spent_after"], led["cap"]
            if not (_close(before.epsilon, sb["epsilon"]) and _close(before.delta, sb["delta"])):
                report.problems.append(
                    f"{where}: spent_before {sb} does not match the recomputed total "
                    f"{before.to_dict()} for dataset '{ds}'")
            if not (_close(after.epsilon, sa["epsilon"]) and _close(after.delta, sa["delta"])):
                report.problems.append(f"{where}: spent_after {sa} does not match {after.to_dict()}")
            cap_b = Budget(float(cap["epsilon"]), float(cap["delta"]))
            if not after.fits_within(cap_b):
                report.problems.append(
                    f"{where}: dataset '{ds}' total {after.to_dict()} exceeds its cap {cap}")
            running[ds] = after
            report.totals[ds] = {**after.to_dict(), "cap": cap_b.to_dict(),
                                 "entries": report.totals.get(ds, {}).get("entries", 0) + 1}
        except (KeyError, TypeError, ValueError) as exc:
            report.problems.append(f"{where}: malformed receipt ({type(exc).__name__}: {exc})")
    return seen


def verify_receipt(path: Path, report: VerifyReport, ledger_hashes: dict[str, str] | None) -> None:
    """Check a receipt's own hash, its presence in the ledger, and its outputs' hashes."""
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
    if ledger_hashes is not None and receipt.get("ledger") and receipt["hash"] not in ledger_hashes:
        report.problems.append(f"{path}: receipt is not in the ledger (no line has its hash)")
    for out in receipt.get("outputs", []):
        target = Path(path).parent / out["path"]
        if not target.exists():
            report.notes.append(f"{target}: output not present (not checked)")
            continue
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        if digest != out["sha256"]:
            report.problems.append(f"{target}: content does not match the receipt's sha256")


def verify(ledger: Path | None, receipts: list[Path]) -> VerifyReport:
    """Verify a ledger and/or receipts."""
    report = VerifyReport()
    hashes = verify_ledger(ledger, report) if ledger is not None else None
    for r in receipts:
        verify_receipt(r, report, hashes)
    return report
