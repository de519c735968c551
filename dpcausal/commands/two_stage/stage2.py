"""two-stage's stage 2, shared by the in-memory and engine runs: draw b once, solve the exact ℓ₁-
ball QP from H = Σw x xᵀ and g = Σw t x, build the rule."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.two_stage.calibration import calibrate
from dpcausal.commands.two_stage.center import epsilons
from dpcausal.commands.two_stage.privacy import mechanism, stability_bounds
from dpcausal.commands.two_stage.rule import rule_release
from dpcausal.commands.two_stage.setup import M_X, Prepared, TwoStageSetup
from dpcausal.commands.two_stage.solver import qp_terms, solve_l1_ball_qp, sufficient_stats
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.mechanisms import NoiseGuard, ObjectivePerturbation
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]


def fit_theta(setup: TwoStageSetup, data: Prepared, w: FloatArray, gamma: float,
              b: FloatArray) -> FloatArray:
    """θ = exact argmin of the perturbed stage-2 objective (solver.py)."""
    h, g = sufficient_stats(data.x, data.t, w)
    p, c = qp_terms(h, g, len(data.t), gamma, b)
    return solve_l1_ball_qp(p, c, setup.l1_radius).theta


def objective_noise(spec: TwoStageSpec, setup: TwoStageSetup, n: int, *,
                    noise: NoiseGuard) -> FloatArray:
    """Draw stage 2's noise vector b through the guard (it reads no data and does not depend on
    the outcome centre: M_y, so the calibration, is public whatever c is)."""
    bounds = stability_bounds(spec, setup, n)
    eps2 = epsilons(spec)[1]  # ε minus the private centre's share
    cal = calibrate(n=n, dim=setup.fmap.dim, m_x=M_X, m_inf=setup.m_inf, m_y=setup.m_y,
                    l1_radius=setup.l1_radius,
                    epsilon=eps2, delta=spec.privacy.delta,
                    eps_split=spec.two_stage.eps_split, noise=spec.two_stage.noise,
                    bounds=bounds, mode=spec.two_stage.calibration)
    return noise.objective_noise(ObjectivePerturbation(mechanism(spec, cal, setup.fmap.dim),
                                                       eps2, spec.privacy.delta))


def release_rule(spec: TwoStageSpec, setup: TwoStageSetup, plan: PrivacyPlan, h: FloatArray,
                 g: FloatArray, n: int, side: dict[str, pd.DataFrame], *,
                 noise: NoiseGuard, b: FloatArray | None = None) -> Release:
    """With the outcome centre already in ``setup`` (public, or released by ``center``): draw b
    once (``objective_noise``; or take ``b`` drawn earlier by it), solve the exact ℓ₁-ball QP
    from H = Σw x xᵀ and g = Σw t x, build the rule (and recommendations for ``apply_to``).
    Shared by the in-memory run and the engine run (dpcausal/commands/two_stage/engine.py),
    which differ only in how H and g are summed."""
    if b is None:
        b = objective_noise(spec, setup, n, noise=noise)
    p, c = qp_terms(h, g, n, float(plan.details["gamma"]), b)
    theta = solve_l1_ball_qp(p, c, setup.l1_radius).theta
    del b, p, c
    return rule_release(spec, setup, theta, plan, side)
