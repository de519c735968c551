"""two-stage's private outcome centre (``outcome_center: private``, the default; issue 17).

The plan lists the centre as its own Laplace event at ``center_share`` of ε; the released centre
follows Laplace((U − L)/n / ε_c) (three-arm law through the production path and the guard);
neighbours never move its input by more than its sensitivity and the composed gray-box loss never
exceeds ε; rescaling the outcome leaves the release's law unchanged; and moving only the public
upper bound no longer flips the rule at large ε (it did with the midpoint centre).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cli_tests.helpers import assert_three_arm, ks_three_arm
from dpcausal.audit.privacy import run_audit
from dpcausal.commands.two_stage import center
from dpcausal.commands.two_stage import plan as ts_plan
from dpcausal.commands.two_stage.audit import ADAPTER
from dpcausal.commands.two_stage.estimate import run
from dpcausal.commands.two_stage.privacy import OBJECTIVE_STAGE
from dpcausal.commands.two_stage.setup import build_setup, prepare, targets, with_center
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.mechanisms import NoiseGuard

COVS = ["x1", "x2"]


def _spec(eps: float = 1.0, outcome: tuple[float, float] = (0.0, 60.0), **two: Any) -> TwoStageSpec:
    return TwoStageSpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": COVS}},
        "bounds": {"outcome": list(outcome), "covariates": [-1.0, 1.0]},
        "privacy": {"epsilon": eps},
        "two_stage": {"treated": 1, "control": 0, "weights": "ipw-rct",
                      "ipw_rct": {"p_treated": 0.4}, "plot": False, **two},
    })


def _skewed(n: int, seed: int, scale: float = 1.0) -> pd.DataFrame:
    """A skewed outcome far below its bounds' midpoint (earnings-like), a rule on x1."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2))
    a = rng.binomial(1, 0.4, n)
    y = np.clip(4.0 + 1.5 * x[:, 1] + (2 * a - 1) * 1.2 * x[:, 0] + rng.gamma(1.3, 1.0, n), 0, 60)
    return pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "A": a, "Y": y * scale})


def _release(spec: TwoStageSpec, frame: pd.DataFrame, seed: int) -> dict[str, Any]:
    plan = ts_plan.plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    guard = NoiseGuard(plan, test_seed=seed)
    rel = run(spec, frame, plan, {}, rng=np.random.default_rng(0), noise=guard)
    guard.check_all_drawn()
    return rel.documents["rule.json"]


def test_plan_charges_the_centre_as_its_own_event() -> None:
    spec = _spec(eps=2.0, center_share=0.1)
    plan = ts_plan.plan(spec, 400, {}, rng=np.random.default_rng(0))
    obj, cev = plan.event(OBJECTIVE_STAGE), plan.event(center.STAGE)
    assert [e.stage for e in plan.events] == [OBJECTIVE_STAGE, center.STAGE]
    assert cev.kind == "laplace" and cev.epsilon == pytest.approx(0.2)
    assert cev.sensitivity == pytest.approx(60.0 / 400, rel=1e-7) and cev.sensitivity > 60.0 / 400
    assert obj.epsilon == pytest.approx(1.8)
    assert plan.cost.epsilon == pytest.approx(2.0)
    assert plan.details["outcome_center"]["source"] == "private"
    assert plan.details["outcome_center"]["winsorised_at"] == 30.0
    assert any(a.quantity == "outcome_center" for a in plan.accuracy)
    # M_y = (U − L)/2 whatever the centre: stage 2's calibration is that of the midpoint
    mid = ts_plan.plan(_spec(eps=1.8, outcome_center="midpoint"), 400, {},
                       rng=np.random.default_rng(0))
    assert obj.noise_scale == pytest.approx(mid.events[0].noise_scale, rel=1e-12)
    assert plan.details["gamma"] == pytest.approx(mid.details["gamma"], rel=1e-12)
    with pytest.raises(Exception, match="center_share"):
        _spec(outcome_center="midpoint", center_share=0.1)


def test_winsorised_targets_stay_within_m_y_for_every_centre() -> None:
    setup = build_setup(_spec(outcome=(6.265404784005447, 14.415106957297374)))
    y = np.concatenate([[setup.lower, setup.upper], np.linspace(setup.lower, setup.upper, 101)])
    a = np.arange(len(y)) % 2 == 0
    for c in (setup.lower, setup.upper, 7.1, np.nextafter(setup.upper, 0.0)):
        t = targets(with_center(setup, c), y, a)
        assert np.abs(t).max() <= 2.0 * setup.m_y
    assert setup.m_y == setup.half_range


def test_centre_noise_law_three_arm() -> None:
    """The released (unclamped) centre minus the clipped mean follows Laplace(Δ_c/ε_c): through
    ``center.release`` and a test-seeded guard; 0.7× and 1.3× the scale are rejected."""
    spec = _spec(eps=1.0, center_share=0.2)
    frame = _skewed(50, 0)
    plan = ts_plan.plan(spec, 50, {}, rng=np.random.default_rng(0))
    setup = build_setup(spec)
    data = prepare(spec, setup, frame, None)
    total = center.outcome_sum(data.y)
    scale = plan.event(center.STAGE).noise_scale
    out = []
    for s in range(3000):
        guard = NoiseGuard(plan, test_seed=s)
        out.append(center.release(spec, setup, total, 50, noise=guard).center_unclamped)
    dev = np.array(out) - total / 50
    pv = ks_three_arm(dev, lambda x, s: stats.laplace.cdf(x, scale=s), scale)
    assert_three_arm(pv)


def test_neighbours_never_exceed_the_stated_sensitivities_and_the_composed_loss() -> None:
    """Gray-box audit of the composed stages (the centre's Laplace, stage 2 conditioned on public
    centres in [L, U]): adversarial replace-one neighbours never move the centre's input by more
    than Δ_c, stage 2's gradient map by more than ζ·W̄₁ˢ, nor the composed loss past ε."""
    spec = _spec(eps=1.0, l1_scale=1.0)
    frame = _skewed(12, 1)
    report = run_audit(ADAPTER, spec, frame, {}, pairs=8, trials=0,
                       rng=np.random.default_rng(5))
    assert not report.problems, report.problems
    assert report.max_loss <= 1.0 + 1e-9
    assert report.ratio_per_stage[center.STAGE] <= 1.0
    assert report.ratio_per_stage[center.STAGE] > 0.99  # Y top vs bottom attains (U − L)/n
    assert report.ratio_per_stage[OBJECTIVE_STAGE] <= 1.0
    assert report.per_stage[center.STAGE] > 0.0


@pytest.mark.parametrize("scale", [1000.0])
def test_rescaling_the_outcome_rescales_centre_and_theta(scale: float) -> None:
    """Unit-free: with the same noise draws the released centre and θ scale with the outcome."""
    small = _release(_spec(eps=3.0), _skewed(300, 2), 11)
    large = _release(_spec(eps=3.0, outcome=(0.0, 60.0 * scale)), _skewed(300, 2, scale), 11)
    assert large["outcome_center"]["estimate"] == pytest.approx(
        scale * small["outcome_center"]["estimate"], rel=1e-9)
    np.testing.assert_allclose(large["theta"], scale * np.array(small["theta"]), rtol=1e-7,
                               atol=1e-9 * scale)


def test_moving_only_the_upper_bound_does_not_flip_the_rule() -> None:
    """Issue 17: the data unchanged, U = 60, 120, 240 (all far above every outcome): at large ε
    the recommendations agree (the midpoint centre flipped them between treat-all and
    treat-none)."""
    frame = _skewed(2000, 3)
    xs = np.column_stack([np.linspace(-1, 1, 41), np.zeros(41)])

    def treated(outcome_center: str, upper: float) -> np.ndarray:
        spec = _spec(eps=1e9, outcome=(0.0, upper), outcome_center=outcome_center)
        rule = _release(spec, frame, 0)
        v = np.column_stack([np.ones(len(xs)), xs]) / np.sqrt(3.0)
        return np.asarray(v @ np.array(rule["theta"]) > 0)

    private = [treated("private", u) for u in (60.0, 120.0, 240.0)]
    assert all(np.array_equal(private[0], p) for p in private[1:])
    assert 0 < private[0].sum() < len(xs)  # a real rule: treat where x1 > 0
    mid = [treated("midpoint", u) for u in (60.0, 120.0, 240.0)]
    assert not all(np.array_equal(mid[0], p) for p in mid[1:])  # the old default flips
