"""two-stage defaults (issue 17): the unit-free ℓ₁ ball (``l1_scale``) and its public rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpcausal.commands.two_stage import penalty
from dpcausal.commands.two_stage import plan as ts_plan
from dpcausal.commands.two_stage.setup import build_setup, prepare, with_radius
from dpcausal.commands.two_stage.solver import qp_terms, solve_l1_ball_qp, sufficient_stats
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.commands.two_stage.stage1 import compute_weights


def _spec(scale: float, eps: float, **two: object) -> TwoStageSpec:
    return TwoStageSpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": ["x1", "x2"]}},
        "bounds": {"outcome": [0.0, 60.0 * scale], "covariates": [-1.0, 1.0]},
        "privacy": {"epsilon": eps},
        "two_stage": {"treated": 1, "control": 0, "weights": "ipw-rct",
                      "ipw_rct": {"p_treated": 0.4}, "outcome_center": "midpoint", **two},
    })


def _frame(scale: float) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(300, 2))
    a = rng.binomial(1, 0.4, 300)
    y = np.clip(10 + 8 * x[:, 0] + a * (6 * x[:, 1]) + rng.normal(0, 5, 300), 0, 60)
    return pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "A": a, "Y": y * scale})


def _theta(spec: TwoStageSpec, frame: pd.DataFrame, seed: int) -> np.ndarray:
    plan = ts_plan.plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    setup = with_radius(build_setup(spec), plan.details)
    data = prepare(spec, setup, frame, None)
    h, g = sufficient_stats(data.x, data.t, compute_weights(spec, setup, data))
    rng = np.random.default_rng(seed)
    u = rng.normal(size=setup.fmap.dim)
    b = rng.gamma(setup.fmap.dim, plan.events[0].noise_scale) * u / np.linalg.norm(u)
    p, c = qp_terms(h, g, len(frame), float(plan.details["gamma"]), b)
    return solve_l1_ball_qp(p, c, setup.l1_radius).theta


@pytest.mark.parametrize("eps", [2.0, 1e9])
def test_rescaling_the_outcome_leaves_the_release_law_unchanged(eps: float) -> None:
    """Dollars vs thousands: with the same noise draw θ scales exactly with the outcome, so the
    rule (sign of every score) and θ/M_y have the same law. Fails on the old fixed λ₁."""
    for seed in range(5):
        small = _theta(_spec(1.0, eps), _frame(1.0), seed)
        large = _theta(_spec(1000.0, eps), _frame(1000.0), seed)
        np.testing.assert_allclose(large / 1000.0, small, rtol=1e-6, atol=1e-9 * np.abs(small).max())


def test_the_old_radius_is_not_unit_free() -> None:
    """The old form (l1_radius in score units) gives a different rule on a rescaled outcome."""
    small = _theta(_spec(1.0, 2.0, l1_radius=5.0), _frame(1.0), 0)
    large = _theta(_spec(1000.0, 2.0, l1_radius=5.0), _frame(1000.0), 0)
    assert not np.allclose(large / 1000.0, small, rtol=1e-3)


def test_rule_grows_the_ball_with_n_eps_and_reaches_the_score_bound() -> None:
    """r rises with ε to 1 (λ₁ = 2M_y/M_∞) and is stays above its floor (ν₀ is bounded as ε → 0: noise and γ both grow like 1/ε); the plan records it."""
    scales = []
    for eps in (0.1, 1.0, 5.0, 50.0, 1e9):
        plan = ts_plan.plan(_spec(1.0, eps), 300, {}, rng=np.random.default_rng(0))
        scales.append(plan.details["l1_choice"]["l1_scale"])
    assert scales == sorted(scales)
    assert scales[0] >= penalty.SCALE_RANGE[0] and scales[0] < 0.5 and scales[-1] == 1.0
    setup = build_setup(_spec(1.0, 1e9))
    plan = ts_plan.plan(_spec(1.0, 1e9), 300, {}, rng=np.random.default_rng(0))
    assert plan.details["l1_radius"] == pytest.approx(2 * setup.m_y / setup.m_inf)


def test_dry_run_warns_on_shrinkage_only_when_it_bends_the_rule() -> None:
    low = ts_plan.plan(_spec(1.0, 0.5), 300, {}, rng=np.random.default_rng(0))
    high = ts_plan.plan(_spec(1.0, 1e9), 300, {}, rng=np.random.default_rng(0))
    assert "shrinkage" in low.details["warning_shrinkage"]
    assert "warning_shrinkage" not in high.details


def test_radius_forms_are_exclusive_and_center_inside_bounds() -> None:
    with pytest.raises(ValueError, match="at most one"):
        _spec(1.0, 1.0, l1_radius=3.0, l1_scale=0.5)
    with pytest.raises(Exception, match="outcome_center"):
        build_setup(_spec(1.0, 1.0, outcome_center=70.0))
    setup = build_setup(_spec(1.0, 1.0, outcome_center=10.0))
    assert setup.center == 10.0 and setup.m_y == 50.0
