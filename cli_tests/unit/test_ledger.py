"""The ledger: caps, hash chain, torn lines, and concurrent appends."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from dpcausal.accounting.budget import Budget, compose
from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.ledger import Ledger
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.accounting.receipt import GENESIS_HASH, build_receipt, receipt_hash
from dpcausal.audit.verify import verify
from dpcausal.errors import BudgetExceededError, OutputError


def _plan(eps: float, delta: float = 0.0) -> PrivacyPlan:
    ev = PrivacyEvent("laplace", "test", eps, delta, 1.0, "l1", 1.0 / eps)
    return PrivacyPlan("test", (ev,), {"relation": "replace-one"}, "pure", True)


def _append(ledger: Ledger, eps: float, cap: float = 1.0) -> dict:
    plan = _plan(eps)
    receipt = build_receipt(plan, spec_sha256="x", outputs={}, seeded_noise=False, dataset="d")
    return ledger.append(receipt, dataset="d", cap=Budget(cap), requested=plan.cost)


def test_compose_and_fits_within() -> None:
    total = compose([Budget(0.1), Budget(0.1), Budget(0.1)])
    assert total.fits_within(Budget(0.3))  # float slack: 0.1+0.1+0.1 > 0.3 in binary
    assert not Budget(0.31).fits_within(Budget(0.3))
    assert not Budget(0.1, 1e-6).fits_within(Budget(1.0, 0.0))


def test_append_chains_hashes_and_refuses_over_cap(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.jsonl")
    first = _append(ledger, 0.4)
    second = _append(ledger, 0.4)
    assert first["prev_hash"] == GENESIS_HASH
    assert second["prev_hash"] == first["hash"]
    assert receipt_hash(second) == second["hash"]
    assert second["ledger"]["spent_before"]["epsilon"] == pytest.approx(0.4)
    with pytest.raises(BudgetExceededError, match=r"requested ε=0.4.*spent ε=0.8.*cap ε=1"):
        _append(ledger, 0.4)
    assert len(ledger.entries()) == 2
    assert Ledger.spent_in(ledger.entries(), "d") == Budget(0.8, 0.0)
    assert Ledger.spent_in(ledger.entries(), "other") == Budget(0.0, 0.0)
    assert verify(ledger.path, []).ok


def test_torn_last_line_is_refused(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.jsonl")
    _append(ledger, 0.1)
    with ledger.path.open("ab") as fh:
        fh.write(b'{"half": ')
    with pytest.raises(OutputError, match="incomplete"):
        _append(ledger, 0.1)
    report = verify(ledger.path, [])
    assert not report.ok and "incomplete" in report.problems[0]


@pytest.mark.parametrize("tamper", ["edit", "delete", "swap"])
def test_verify_catches_tampering(tmp_path: Path, tamper: str) -> None:
    ledger = Ledger(tmp_path / "l.jsonl")
    for _ in range(3):
        _append(ledger, 0.2)
    lines = ledger.path.read_text().splitlines()
    if tamper == "edit":
        entry = json.loads(lines[1])
        entry["epsilon"] = 0.01
        entry["events"][0]["epsilon"] = 0.01
        lines[1] = json.dumps(entry)
    elif tamper == "delete":
        del lines[1]
    else:
        lines[0], lines[1] = lines[1], lines[0]
    ledger.path.write_text("\n".join(lines) + "\n")
    report = verify(ledger.path, [])
    assert not report.ok
    assert "line" in report.problems[0]


def test_verify_recomputes_totals_even_with_rehashed_forgery(tmp_path: Path) -> None:
    # A forger who lowers spent_before and re-hashes the whole chain is still caught by the totals.
    ledger = Ledger(tmp_path / "l.jsonl")
    _append(ledger, 0.5)
    _append(ledger, 0.4)
    entries = [json.loads(x) for x in ledger.path.read_text().splitlines()]
    entries[1]["ledger"]["spent_before"]["epsilon"] = 0.0
    entries[1]["ledger"]["spent_after"]["epsilon"] = 0.4
    prev = GENESIS_HASH
    for e in entries:
        e["prev_hash"] = prev
        e["hash"] = receipt_hash(e)
        prev = e["hash"]
    ledger.path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    report = verify(ledger.path, [])
    assert not report.ok and "spent_before" in report.problems[0]


def _racer(path: str, barrier: mp.synchronize.Barrier, out: mp.Queue) -> None:  # type: ignore[name-defined]
    barrier.wait()
    try:
        _append(Ledger(Path(path)), 0.5, cap=1.0)
        out.put("ok")
    except BudgetExceededError:
        out.put("refused")


def test_concurrent_appends_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(6)
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(str(path), barrier, out)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    results = sorted(out.get(timeout=5) for _ in procs)
    assert results.count("ok") == 2 and results.count("refused") == 4
    assert len(Ledger(path).entries()) == 2
    assert verify(path, []).ok
