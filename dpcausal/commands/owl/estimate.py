"""owl in memory: the weighted ERM fit on the prepared rows, its output perturbation, the
release."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.owl.auto import select_and_release, settings
from dpcausal.commands.owl.privacy import mechanism
from dpcausal.commands.owl.rule import build_release
from dpcausal.commands.owl.setup import build_setup, fit_nonprivate, prepare
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]


def run(spec: OwlSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, pd.DataFrame], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Fit, perturb, and build the rule (and recommendations for ``apply_to``); with
    ``lambda: auto`` select λ privately first (:mod:`dpcausal.commands.owl.auto`)."""
    setup = build_setup(spec)
    data = prepare(spec, setup, frame, spec.data.path)
    if spec.owl.ridge_lambda == "auto":
        column = settings(spec).split.id_column
        ids = frame[column].tolist() if column is not None else None
        theta, chosen = select_and_release(spec, setup, data, ids, noise)
        return build_release(spec, setup, theta, plan, side, {"selected_lambda": chosen},
                             selected_lambda=chosen)
    gamma = float(plan.details["gamma"])
    theta_hat = fit_nonprivate(setup, data, gamma)
    theta = noise.release(mechanism(setup, gamma, spec.privacy.epsilon, data.y.size), theta_hat)
    del theta_hat
    return build_release(spec, setup, theta, plan, side)
