"""owl in memory: the weighted ERM fit on the prepared rows, its output perturbation, the
release."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.owl.privacy import mechanism
from dpcausal.commands.owl.rule import build_release
from dpcausal.commands.owl.setup import OwlSetup, Prepared, build_setup, prepare
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release
from dpcausal.solvers.erm import solve_weighted_erm

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]


def fit_nonprivate(setup: OwlSetup, data: Prepared, gamma: float) -> FloatArray:
    """θ̂ = argmin Σ w_i ℓ(y_i v_iᵀθ) + (γ/2)‖θ‖², within the public distance of
    ``setup.accuracy(γ, n)``. Not a release: noise it first."""
    sol = solve_weighted_erm(data.v, data.y, data.w, setup.accuracy(gamma, data.y.size))
    return sol.theta


def run(spec: OwlSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, pd.DataFrame], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Fit, perturb, and build the rule (and recommendations for ``apply_to``)."""
    setup = build_setup(spec)
    gamma = float(plan.details["gamma"])
    data = prepare(spec, setup, frame, spec.data.path)
    theta_hat = fit_nonprivate(setup, data, gamma)
    theta = noise.release(mechanism(setup, gamma, spec.privacy.epsilon, data.y.size), theta_hat)
    del theta_hat
    return build_release(spec, setup, theta, plan, side)
