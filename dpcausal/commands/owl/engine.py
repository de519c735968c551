"""``owl`` on an engine: the same release as :func:`dpcausal.commands.owl.estimate.run`, by the
same solver (:func:`dpcausal.solvers.erm.solve_erm`) with its data passes run batch by batch
(local streaming) or partition by partition (Dask) instead of over one in-memory piece.

Every row is validated, clipped and mapped (``prepare``: outcome clipped to the public bounds,
covariates clipped and scaled so ‖v_i‖ ≤ 1) before it enters any sum, and the solve stops at the
same certificate (or the same guaranteed fallback) as in memory, so the sensitivity
(2W + 2(τ + A))/γ of
:func:`dpcausal.commands.owl.privacy.mechanism` holds unchanged. The ℓ2-Laplace noise is drawn
once, here on the client, by that mechanism.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.owl.privacy import mechanism
from dpcausal.commands.owl.rule import build_release
from dpcausal.commands.owl.setup import OwlSetup, build_setup, prepare
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.engine.base import Engine, batch_error
from dpcausal.errors import DataError
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release
from dpcausal.solvers.erm import solve_erm
from dpcausal.solvers.erm_passes import Part


def prepare_batch(spec: OwlSpec, setup: OwlSetup, frame: pd.DataFrame, start: int) -> Part:
    """owl's per-row mapping of one batch: (v, y, w); row numbers in errors are global."""
    try:
        data = prepare(spec, setup, frame.reset_index(drop=True), spec.data.path)
    except DataError as exc:
        raise batch_error(exc, start) from None
    return np.ascontiguousarray(data.v), data.y, data.w


def run(spec: OwlSpec, engine: Engine, plan: PrivacyPlan, side: dict[str, pd.DataFrame], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Fit over the engine's passes, perturb once on the client, build the rule (as the in-memory
    ``estimate.run``)."""
    setup = build_setup(spec)
    gamma = float(plan.details["gamma"])
    engine.load(functools.partial(prepare_batch, spec, setup))
    sol = solve_erm(engine, setup.accuracy(gamma, engine.n_rows))
    theta = noise.release(mechanism(setup, gamma, spec.privacy.epsilon, engine.n_rows),
                          sol.theta)
    return build_release(spec, setup, theta, plan, side, {"engine": engine.description})
