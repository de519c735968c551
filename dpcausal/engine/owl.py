"""``owl`` on an engine: the same release as :func:`dpcausal.methods.owl.run`, with the ERM solve's
data passes run batch by batch (local streaming) or partition by partition (Dask).

Every row is validated, clipped and mapped (``prepare``: outcome clipped to the public bounds,
covariates clipped and scaled so ‖v_i‖ ≤ 1) before it enters any sum, and the solve stops at the
same certificate ‖∇G(θ)‖ ≤ τ as the in-memory solver, so the sensitivity (2W + 2τ)/γ of
:func:`dpcausal.methods.owl.mechanism` holds unchanged. The ℓ2-Laplace noise is drawn once, here on
the client, by that mechanism.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.engine.base import Engine, batch_error
from dpcausal.engine.newton import Part, solve_erm_engine
from dpcausal.errors import DataError
from dpcausal.mechanisms import NoiseGuard
from dpcausal.methods._arms import label_matches
from dpcausal.methods.base import Release
from dpcausal.methods.owl import (
    OwlSetup,
    apply_rule,
    build_setup,
    mechanism,
    prepare,
    rule_document,
)
from dpcausal.spec.owl import OwlSpec


def prepare_batch(spec: OwlSpec, setup: OwlSetup, frame: pd.DataFrame, start: int) -> Part:
    """owl's per-row mapping of one batch: (v, y, w); row numbers in errors are global."""
    try:
        data = prepare(spec, setup, frame.reset_index(drop=True), spec.data.path)
    except DataError as exc:
        raise batch_error(exc, start) from None
    return np.ascontiguousarray(data.v), data.y, data.w


def run(spec: OwlSpec, engine: Engine, plan: PrivacyPlan, side: dict[str, pd.DataFrame], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Fit over the engine's passes, perturb once on the client, build the rule (as ``owl.run``)."""
    setup = build_setup(spec)
    gamma = float(plan.details["gamma"])
    engine.load(functools.partial(prepare_batch, spec, setup))
    sol = solve_erm_engine(engine, d=setup.fmap.dim, gamma=gamma, loss=setup.loss,
                           grad_tol=setup.grad_tol)
    theta = noise.release(mechanism(setup, gamma, spec.privacy.epsilon), sol.theta)
    rule = rule_document(spec, setup, theta, plan)
    release = Release(documents={"rule.json": rule})
    summary: dict[str, Any] = {"released_theta_norm": float(np.linalg.norm(theta)),
                               "engine": engine.description}
    if "apply_to" in side:
        recs = apply_rule(rule, side["apply_to"], spec.owl.apply_to)
        release.tables["recommendations"] = recs
        summary["apply_to_rows"] = len(recs)
        summary["apply_to_share_treated"] = float(
            label_matches(recs["recommended"], spec.owl.treated).mean()
        )
    release.summary.update(summary)
    return release
