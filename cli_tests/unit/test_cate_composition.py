"""Parallel composition over the parts of a public split (the foundation hook cate uses)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_tests.helpers import releases
from dpcausal.accounting.budget import Budget, compose_events
from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.ledger import Ledger
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.accounting.receipt import build_receipt
from dpcausal.audit.verify import VerifyReport, verify_ledger
from dpcausal.mechanisms import analytic_gaussian_sigma


def _ev(eps: float, delta: float, part: str | None) -> PrivacyEvent:
    """A calibrated event (audit verify recomputes each event's ε from its noise)."""
    if delta == 0.0:
        return PrivacyEvent("laplace", "s", eps, 0.0, 1.0, "l1", 1.0 / eps, partition=part)
    return PrivacyEvent("gaussian", "s", eps, delta, 1.0, "l2",
                        analytic_gaussian_sigma(eps, delta, 1.0), partition=part)


def test_untagged_events_add_up_as_before() -> None:
    evs = [_ev(0.5, 1e-6, None).to_dict(), _ev(0.25, 0.0, None).to_dict()]
    assert "partition" not in evs[0]
    assert compose_events(evs) == Budget(0.75, 1e-6)


def test_parts_of_one_split_compose_in_parallel_and_splits_add_up() -> None:
    evs = [_ev(0.5, 5e-7, "a/1"), _ev(0.5, 5e-7, "a/1"), _ev(1.0, 1e-6, "a/2"),
           _ev(0.3, 0.0, "b/x"), _ev(0.2, 0.0, None)]
    total = compose_events(e.to_dict() for e in evs)
    assert total.epsilon == pytest.approx(1.0 + 0.3 + 0.2)
    assert total.delta == pytest.approx(1e-6)
    plan = PrivacyPlan("cate", tuple(evs), {"relation": "replace-one"}, "approximate", True)
    assert plan.cost == total
    with pytest.raises(ValueError, match="split/part"):
        _ev(1.0, 0.0, "nosplit")


def test_ledger_and_verify_use_the_same_rule(tmp_path: Path) -> None:
    evs = (_ev(1.0, 1e-6, "h/1"), _ev(1.0, 1e-6, "h/2"))
    plan = PrivacyPlan("cate", evs, {"relation": "replace-one"}, "approximate", True)
    ledger = Ledger(tmp_path / "l.jsonl")
    cap = Budget(2.5, 1e-5)
    for _ in range(2):
        rec = build_receipt(plan, spec_sha256="0" * 64, outputs={}, seeded_noise=False,
                            noise_source="chacha20/os-entropy", dataset="d")
        ledger.charge(rec, dataset="d", spec_cap=cap)
    assert ledger.state("d", Budget(0.0), cap).spent == Budget(2.0, 2e-6)
    first = releases(tmp_path / "l.jsonl")[0]
    assert first["epsilon"] == 1.0 and first["events"][0]["partition"] == "h/1"
    report = VerifyReport()
    verify_ledger(tmp_path / "l.jsonl", report)
    assert report.ok, report.problems
