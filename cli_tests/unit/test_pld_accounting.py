"""PLD accounting (issue 22) and the mechanisms' privacy maps (issue 23, item 3).

Before anything is composed, every mechanism's single-release PLD must read back its own
calibration: dp-accounting's REPLACE_ONE convention doubles the shift (a release calibrated to
ε = 1 reads ≈ 2.1), which these tests would catch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from cli_tests.helpers import invoke, read_json
from dpcausal.accounting.accountant import Accountant, RunCost, _Pld
from dpcausal.accounting.budget import Budget
from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.ledger import Ledger
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.accounting.receipt import build_receipt, finalize
from dpcausal.audit.verify import verify
from dpcausal.errors import BudgetExceededError, LedgerIntegrityError, PrivacyError
from dpcausal.mechanisms import (
    ExponentialMechanism,
    GaussianMechanism,
    GaussianProcessMechanism,
    L2LaplaceMechanism,
    LaplaceMechanism,
    ObjectivePerturbation,
)
from dpcausal.mechanisms.curve import PLD_INTERVAL, PrivacyCurve, gaussian_epsilon
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector
from dpcausal.mechanisms.registry import check_event, claim_reason, release_curve

PURE = [
    LaplaceMechanism(0.5, 3.0), LaplaceMechanism(1.0, 0.2), LaplaceMechanism(2.5, 1.0),
    L2LaplaceMechanism(1.0, 2.0, 3), L2LaplaceMechanism(5.0, 0.1, 20),
    ExponentialMechanism(1.0, 0.5), ExponentialMechanism(0.75, 2.0, monotonic=True),
]
APPROX = [
    GaussianMechanism(1.0, 1e-6, 2.0), GaussianMechanism(0.3, 1e-5, 0.5),
    GaussianMechanism(3.0, 1e-7, 1.0),
    GaussianProcessMechanism(1.0, 1e-5, 0.7, 1.0, calibration="analytic"),
]


@pytest.mark.parametrize("mech", PURE, ids=lambda m: f"{type(m).__name__}-{m.epsilon}")
def test_single_pure_release_pld_reads_its_calibration(mech: Any) -> None:
    event = mech.event()
    curve = release_curve(event)
    assert curve.epsilon(0.0) == pytest.approx(mech.epsilon, abs=1e-12)
    # δ = 0 is degenerate for a numerical PLD (float noise in its infinity mass): read at 1e-12
    assert curve.pld().get_epsilon_for_delta(1e-12) == pytest.approx(mech.epsilon, abs=1e-6)


@pytest.mark.parametrize("mech", APPROX, ids=lambda m: f"{type(m).__name__}-{m.epsilon}")
def test_single_gaussian_release_pld_reads_its_calibration(mech: Any) -> None:
    event = mech.event()
    curve = release_curve(event)
    assert curve.family == "gaussian"
    assert curve.epsilon(event.delta) == pytest.approx(mech.epsilon, abs=1e-9)
    assert curve.pld().get_epsilon_for_delta(event.delta) == pytest.approx(mech.epsilon, abs=1e-6)
    # the library's REPLACE_ONE convention doubles the shift: the bug these tests guard against
    doubled = pld_lib.from_gaussian_mechanism(
        event.noise_scale, sensitivity=event.sensitivity, value_discretization_interval=1e-4,
        neighboring_relation=pld_lib.NeighborRel.REPLACE_ONE).get_epsilon_for_delta(event.delta)
    assert doubled > 1.5 * mech.epsilon


@pytest.mark.parametrize("mech", [GaussianMechanism(0.5, 1e-5, 1.0, calibration="classic"),
                                  GaussianProcessMechanism(1.0, 1e-5, 0.7, 1.0)],
                         ids=["gaussian-classic", "gp-classic"])
def test_classic_calibrations_compose_by_their_actual_noise(mech: Any) -> None:
    """σ_classic ≥ σ_analytic: the PLD reads the ε the noise really gives, below the claim."""
    event = mech.event()
    exact = gaussian_epsilon(event.sensitivity / event.noise_scale, event.delta)
    assert exact < mech.epsilon
    assert check_event(event).explains(event)
    assert release_curve(event).pld().get_epsilon_for_delta(event.delta) == pytest.approx(
        exact, abs=1e-6)


def test_off_grid_epsilon_is_rounded_up_by_at_most_one_interval() -> None:
    eps = 1.0 / 3.0
    read = release_curve(LaplaceMechanism(eps, 1.0).event()).pld().get_epsilon_for_delta(1e-12)
    assert eps - 1e-9 <= read <= eps + PLD_INTERVAL


@pytest.mark.parametrize("k", [10, 50, 365])
def test_k_gaussian_releases_match_one_gaussian_of_sigma_over_sqrt_k(k: int) -> None:
    mech = GaussianMechanism(1.0, 1e-6, 1.0)
    total = Accountant("pld").total()
    total.add_all(RunCost.from_plan(_plan(mech)) for _ in range(k))
    spent = total.spent(1e-6)
    analytic = gaussian_epsilon(math.sqrt(k) / mech.sigma, 1e-6)
    assert spent.epsilon == pytest.approx(analytic, abs=1e-4)
    assert spent.delta == 1e-6 and spent.epsilon < k * 1.0
    assert total.basic.epsilon == pytest.approx(k) and total.basic.delta == pytest.approx(k * 1e-6)


def test_one_coordinate_laplace_dominates_a_spread_l1_shift() -> None:
    """A vector Laplace with ℓ1 shift a is composed as the one-coordinate pair at a."""
    grid = np.linspace(-1.0, 3.0, 41)
    for a, a1 in ((1.0, 0.5), (2.0, 0.3), (3.0, 1.5)):
        one = PrivacyCurve("laplace", a).pld()
        spread = PrivacyCurve("laplace", a1).pld().compose(PrivacyCurve("laplace", a - a1).pld())
        gap = np.asarray(spread.get_delta_for_epsilon(grid)) - np.asarray(
            one.get_delta_for_epsilon(grid))
        assert gap.max() < 1e-12


def test_exact_curves_match_their_plds() -> None:
    for curve in (PrivacyCurve("laplace", 1.3), PrivacyCurve("pure", 0.8),
                  PrivacyCurve("claim", 0.8, 1e-6), PrivacyCurve("gaussian", 0.9)):
        dist = curve.pld()
        for eps in (0.0, 0.4, 1.0):
            assert dist.get_delta_for_epsilon(eps) == pytest.approx(curve.delta(eps), abs=1e-4)
            assert dist.get_delta_for_epsilon(eps) >= curve.delta(eps) - 1e-12  # pessimistic
        assert curve.epsilon(curve.delta(0.5)) == pytest.approx(0.5, abs=1e-9)


def test_releases_resting_on_their_own_proof_compose_by_their_claim() -> None:
    obj = ObjectivePerturbation(L2LaplaceMechanism(0.5, 1.0, 3), 1.0, 0.0).event()
    caller = GaussianNoiseVector(1.0, 1e-6, 1.0, 2.0, 3).event()
    uncert = PrivacyEvent("l2_laplace", "s", 1.0, 0.0, 1.0, "l2", 1.0, {"certified": False})
    for ev in (obj, caller, uncert):
        assert claim_reason(ev) is not None
        assert release_curve(ev).family in ("pure", "claim")
        assert release_curve(ev).epsilon(ev.delta) == pytest.approx(ev.epsilon)
    # an event whose claim is not explained by its own calibration is composed by its claim,
    # even without a marker (an objective event copying its noise's parameters)
    bare = PrivacyEvent("l2_laplace", "s", 1.0, 0.0, 1.0, "l2", 2.0, {"dim": 3})
    assert claim_reason(bare) is None and not check_event(bare).explains(bare)
    assert release_curve(bare) == PrivacyCurve("pure", 1.0)


def test_parts_of_a_split_cost_their_maximum() -> None:
    pld = _Pld(PLD_INTERVAL)
    a = pld.compose_curves([PrivacyCurve("gaussian", 0.5)] * 3)
    b = pld.compose_curves([PrivacyCurve("laplace", 0.9)])
    both = pld.maximum([a, b], upper=3.0)
    seq = a.compose(b)
    grid = np.linspace(0.0, 3.0, 31)
    d_max, d_a, d_b, d_seq = (np.asarray(p.get_delta_for_epsilon(grid)) for p in (both, a, b, seq))
    assert np.all(d_max >= np.maximum(d_a, d_b) - 1e-12)  # dominates each part
    assert np.all(d_max <= np.maximum(d_a, d_b) + 2e-4)  # and no more than the grid costs
    assert np.all(d_max <= d_seq + 1e-12)  # never worse than sequential composition


def test_a_split_run_under_pld_is_no_worse_than_basic_and_than_its_parts() -> None:
    g = [GaussianMechanism(0.5, 5e-6, 1.0, stage=f"n{i}").event() for i in range(2)]
    gp = GaussianProcessMechanism(1.0, 1e-5, 0.7, 1.0, stage="f").event()
    evs = [_part(g[0], "h/1"), _part(g[1], "h/1"), _part(gp, "h/2")]
    run = RunCost(tuple(e.to_dict() for e in evs), True)
    total = Accountant("pld").total()
    total.add(run)
    spent = total.spent(1e-5)
    assert run.basic == Budget(1.0, 1e-5)
    assert spent.epsilon <= 1.0
    part2 = gaussian_epsilon(gp.sensitivity / gp.noise_scale, 1e-5)
    assert spent.epsilon >= part2 - 1e-6  # at least the worse part


def test_uncertified_runs_compose_by_their_stated_cost() -> None:
    mech = GaussianMechanism(1.0, 1e-6, 1.0)
    plan = _plan(mech, dp=False)
    certified, claimed = Accountant("pld").total(), Accountant("pld").total()
    certified.add_all([RunCost.from_plan(_plan(mech))] * 10)
    claimed.add_all([RunCost.from_plan(plan)] * 10)
    assert claimed.spent(1e-5).epsilon > certified.spent(1e-5).epsilon + 0.5


def test_pld_cap_refuses_at_the_composed_total_and_verify_agrees(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    cap = Budget(5.0, 1e-5)
    Ledger(path).init(dataset="d", cap=cap, accountant=Accountant("pld"))
    mech = GaussianMechanism(1.0, 1e-6, 1.0)
    charged = 0
    while charged < 40 and Ledger(path).state("d", RunCost.from_plan(_plan(mech)),
                                              cap).after.fits_within(cap):
        Ledger(path).charge(_receipt(mech), dataset="d", spec_cap=cap)
        charged += 1
    with pytest.raises(BudgetExceededError, match="pld composition"):
        Ledger(path).charge(_receipt(mech), dataset="d", spec_cap=cap)
    assert 5 < charged < 40  # basic would stop at 5 (ε) and δ at 10
    sigma = mech.sigma
    composed = [gaussian_epsilon(math.sqrt(k) / sigma, 1e-5) for k in (charged, charged + 1)]
    assert composed[0] <= 5.0 < composed[1]  # refused exactly when the composed ε passes the cap
    report = verify(path, [])
    assert report.ok, report.problems
    assert report.accountant["name"] == "pld"
    state = Ledger(path).state("d", Budget(0.0), cap)
    assert report.totals["d"]["epsilon"] == pytest.approx(state.spent.epsilon, rel=1e-12)
    assert state.spent.epsilon == pytest.approx(composed[0], abs=1e-4)


def test_switching_basic_to_pld_is_allowed_and_back_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    cap = Budget(6.0, 1e-4)
    Ledger(path).init(dataset="d", cap=cap)
    mech = GaussianMechanism(1.0, 1e-6, 1.0)
    for _ in range(6):
        Ledger(path).charge(_receipt(mech), dataset="d", spec_cap=cap)
    with pytest.raises(BudgetExceededError):
        Ledger(path).charge(_receipt(mech), dataset="d", spec_cap=cap)
    Ledger(path).set_accountant(Accountant("pld"))
    assert Ledger(path).state("d", Budget(0.0), cap).spent.epsilon < 4.0  # whole history re-read
    Ledger(path).charge(_receipt(mech), dataset="d", spec_cap=cap)
    with pytest.raises(PrivacyError, match="only basic → pld"):
        Ledger(path).set_accountant(Accountant("basic"))
    assert verify(path, []).ok
    with Ledger(path).store.transaction() as txn:  # a looser switch written behind its back
        txn.append([{"kind": "accountant", "accountant": {"name": "basic"}}])
    with pytest.raises(LedgerIntegrityError, match="only basic → pld"):
        Ledger(path).charge(_receipt(mech), dataset="d", spec_cap=cap)
    assert not verify(path, []).ok


def test_verify_flags_an_event_claiming_less_than_its_noise_gives(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    ev = PrivacyEvent("laplace", "v", 1.0, 0.0, 2.0, "l1", 1.0)  # scale 1 at Δ = 2: ε = 2
    plan = PrivacyPlan("test", (ev,), {"relation": "replace-one"}, "pure", True)
    receipt = build_receipt(plan, spec_sha256="x", outputs={}, seeded_noise=False,
                            noise_source="chacha20/os-entropy", dataset="d")
    Ledger(path).charge(receipt, dataset="d", spec_cap=Budget(10.0))
    report = verify(path, [])
    assert any("claims ε=1" in p and "give ε=2" in p for p in report.problems), report.problems
    alone = tmp_path / "receipt.json"  # a receipt checked without its ledger
    alone.write_text(json.dumps(finalize({**receipt, "ledger": None}, None)))
    report = verify(None, [alone])
    assert any("claims ε=1" in p and "give ε=2" in p for p in report.problems), report.problems


def test_cli_pld_ledger_end_to_end(workdir: Path) -> None:
    ledger = workdir / "out" / "ledger.jsonl"
    assert invoke(["ledger", "init", "--ledger", ledger, "--accountant", "pld"]).exit_code == 0
    assert invoke(["ledger", "init", "--ledger", workdir / "out" / "x.jsonl", "--accountant",
                   "rdp"]).exit_code == 2
    dry = invoke(["select-policy", "--spec", "configs/select_policy.yaml", "--dry-run"])
    assert dry.exit_code == 0 and "pld composition" in dry.stdout
    run = invoke(["select-policy", "--spec", "configs/select_policy.yaml", "--json"])
    assert run.exit_code == 0, run.stderr
    receipt = read_json(workdir / "out" / "select_policy" / "receipt.json")
    assert receipt["ledger"]["accountant"]["name"] == "pld"
    assert receipt["ledger"]["accountant"]["pessimistic_estimate"] is True
    # a pure ε-DP release under a δ = 0 cap: PLD gains nothing, the total is the sum
    assert receipt["ledger"]["spent_after"]["epsilon"] == pytest.approx(receipt["epsilon"])
    out = invoke(["audit", "verify", "--ledger", ledger, "--receipt",
                  workdir / "out" / "select_policy" / "receipt.json"])
    assert out.exit_code == 0, out.stdout + out.stderr
    back = invoke(["ledger", "set-accountant", "--ledger", ledger, "--accountant", "basic"])
    assert back.exit_code == 3


def _plan(mech: Any, *, dp: bool = True) -> PrivacyPlan:
    return PrivacyPlan("test", (mech.event(),), {"relation": "replace-one"}, "approximate", dp)


def _receipt(mech: Any) -> dict[str, Any]:
    return build_receipt(_plan(mech), spec_sha256="x", outputs={}, seeded_noise=False,
                         noise_source="chacha20/os-entropy", dataset="d")


def _part(ev: PrivacyEvent, partition: str) -> PrivacyEvent:
    import dataclasses

    return dataclasses.replace(ev, partition=partition)
