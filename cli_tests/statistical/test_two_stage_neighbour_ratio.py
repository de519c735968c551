"""Black-box neighbour-ratio test of two-stage (spec §10 T3, p = 1): empirical ε lower bound ≤ ε.

θ is released many times on D and on a neighbour D′ (one replaced row with an arm switch and the
opposite covariate extreme). With p = 1 the stage-2 argmin over |θ| ≤ λ₁ is clip(−c/P, ±λ₁), checked
against the production solver on a few draws, so 10⁵ releases are cheap. A deliberately broken
mechanism (noise scale ÷ 10) must be caught, showing the test has power.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpcausal.audit.estimators import epsilon_lower_bound
from dpcausal.commands.two_stage import plan as ts_plan
from dpcausal.commands.two_stage.calibration import calibrate
from dpcausal.commands.two_stage.privacy import mechanism, stability_bounds
from dpcausal.commands.two_stage.setup import build_setup, prepare
from dpcausal.commands.two_stage.solver import qp_terms, sufficient_stats
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.commands.two_stage.stage1 import compute_weights
from dpcausal.commands.two_stage.stage2 import fit_theta

pytestmark = pytest.mark.statistical
EPS = 1.0


def _spec() -> TwoStageSpec:
    return TwoStageSpec.model_validate({
        "data": {"columns": {"outcome": "y", "treatment": "a", "covariates": ["x"]}},
        "bounds": {"outcome": [-1.0, 1.0], "covariates": [-1.0, 1.0]},
        "privacy": {"epsilon": EPS},
        "two_stage": {"treated": 1, "weights": "ipw-rct", "ipw_rct": {"p_treated": 0.3},
                      "l1_radius": 1.0, "intercept": False, "outcome_center": "midpoint"},
    })


def _releases(frame: pd.DataFrame, draws: int, seed: int, scale_factor: float = 1.0) -> np.ndarray:
    spec = _spec()
    n = len(frame)
    plan = ts_plan.plan(spec, n, {}, rng=np.random.default_rng(0))
    setup = build_setup(spec)
    data = prepare(spec, setup, frame, None)
    w = compute_weights(spec, setup, data)
    cal = calibrate(n=n, dim=1, m_x=1.0, m_inf=setup.m_inf, m_y=setup.m_y,
                    l1_radius=setup.l1_radius, epsilon=EPS,
                    delta=0.0, eps_split=0.5, noise="gamma",
                    bounds=stability_bounds(spec, setup, n), mode="safe")
    gamma = float(plan.details["gamma"])
    mech = mechanism(spec, cal, 1)
    rng = np.random.default_rng(seed)
    b = np.array([mech.release(np.zeros(1), rng=rng)[0] for _ in range(draws)]) * scale_factor
    h, g = sufficient_stats(data.x, data.t, w)
    p, c0 = qp_terms(h, g, n, gamma, np.zeros(1))
    theta = np.clip(-(c0[0] + b / n) / p[0, 0], -setup.l1_radius, setup.l1_radius)
    for k in range(3):  # the closed form is the production solver's answer
        assert fit_theta(setup, data, w, gamma, np.array([b[k]]))[0] == pytest.approx(
            theta[k], abs=1e-9)
    return theta


def _pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    d = pd.DataFrame({"x": [1.0, 1.0, -1.0, 0.5, 1.0], "a": [1, 0, 0, 1, 1],
                      "y": [1.0, -1.0, 1.0, 0.0, 1.0]})
    dp = d.copy()
    dp.loc[4] = [-1.0, 0, -1.0]  # arm switch, x flipped, x·t flipped: the gradient moves by 2ζ
    return d, dp


def test_empirical_epsilon_below_claim() -> None:
    d, dp = _pair()
    lb = epsilon_lower_bound(_releases(d, 100_000, 1), _releases(dp, 100_000, 2),
                             rng=np.random.default_rng(3))
    assert lb.epsilon_lb <= EPS


def test_broken_mechanism_is_caught() -> None:
    d, dp = _pair()
    lb = epsilon_lower_bound(_releases(d, 100_000, 1, 0.1), _releases(dp, 100_000, 2, 0.1),
                             rng=np.random.default_rng(3))
    assert lb.epsilon_lb > EPS
