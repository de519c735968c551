"""select-policy in memory: the utilities of every policy, then the private choice (and value)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.select_policy import multi_arm
from dpcausal.commands.select_policy.accuracy import value_record
from dpcausal.commands.select_policy.library import PolicyLibrary
from dpcausal.commands.select_policy.multi_library import MultiArmLibrary
from dpcausal.commands.select_policy.privacy import choice_mechanism, value_mechanism
from dpcausal.commands.select_policy.release import build_release, selection_document
from dpcausal.commands.select_policy.scores import (
    fit_nuisance,
    frozen_nuisance,
    learned_utilities,
    utilities_from_gammas,
)
from dpcausal.commands.select_policy.setup import (
    ScoreInputs,
    Setup,
    _covariates,
    build_setup,
    split_indices,
    treated_indicator,
)
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.errors import SpecError
from dpcausal.frames import numeric_column
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]


def compute_utilities(spec: SelectPolicySpec, setup: Setup, frame: pd.DataFrame,
                      side: dict[str, Any]) -> FloatArray:
    """U(π) for every policy (private: never released; only fed to the mechanism)."""
    sec = spec.select_policy
    path = spec.data.path
    names = _covariates(spec)
    x = np.empty((len(frame), len(names)), order="F")  # column-major: each column is contiguous
    for j, c in enumerate(names):
        x[:, j] = numeric_column(frame, c, path)
    inputs = setup.inputs
    if isinstance(inputs, ScoreInputs):
        q0, q1 = inputs.scores(frame, path)
        assert isinstance(setup.library, PolicyLibrary)  # K arms run in regime learned only
        return utilities_from_gammas(setup.library, x, q0, q1, chunk_rows=sec.chunk_rows)
    y = inputs.outcome_values(frame, path)
    if isinstance(setup.library, MultiArmLibrary):  # K ≥ 3 arms (regime learned)
        codes = multi_arm.arm_codes(frame[inputs.treatment], sec, path=path,
                                    column=inputs.treatment)
        tr, sc = split_indices(spec, setup.n_total, setup.m, frame)
        return multi_arm.compute_utilities(sec, setup.library, inputs.fmap, inputs.y_bounds,
                                           inputs.mu_bounds, x, codes, y, tr, sc)
    treated = treated_indicator(spec, inputs, frame)
    if setup.regime == "frozen":
        nuis = frozen_nuisance(side["frozen_model"], inputs.fmap, mu_bounds=inputs.mu_bounds,
                               zeta=sec.zeta, path=sec.frozen_model, sign=inputs.sign)
        return learned_utilities(setup.library, nuis, x, treated, y, chunk_rows=sec.chunk_rows)
    tr, sc = split_indices(spec, setup.n_total, setup.m, frame)
    assert setup.nuisances is not None  # regime learned
    ridge, logistic = setup.nuisances.ridge, setup.nuisances.logistic
    if sec.split.kind == "index":  # contiguous blocks: views, no copies
        nuis = fit_nuisance(inputs.fmap, ridge, logistic, x[: setup.m], treated[: setup.m],
                            y[: setup.m])
        return learned_utilities(setup.library, nuis, x[setup.m:], treated[setup.m:],
                                 y[setup.m:], chunk_rows=sec.chunk_rows)
    nuis = fit_nuisance(inputs.fmap, ridge, logistic, x[tr], treated[tr], y[tr])
    return learned_utilities(setup.library, nuis, x[sc], treated[sc], y[sc],
                             chunk_rows=sec.chunk_rows)


def release_selection(spec: SelectPolicySpec, setup: Setup, utilities: npt.NDArray[np.float64],
                      plan: PrivacyPlan, *, noise: NoiseGuard
                      ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The private steps, shared by every engine: pick a policy by the exponential mechanism over
    ``utilities`` and, if asked, release its value by the Laplace mechanism.

    Returns the selection document and the value document (or None).
    """
    sec = spec.select_policy
    k = int(noise.release(choice_mechanism(setup, spec.privacy.epsilon), utilities))
    value_doc = None
    if sec.value_release is not None:
        mech = value_mechanism(setup, sec.value_release.epsilon)
        noisy = float(noise.release(mech, np.array([utilities[k] / setup.n]))[0])
        sign = setup.inputs.sign  # back on the outcome's own scale (post-processing)
        value_doc = {**value_record(setup, sign * noisy, epsilon=mech.epsilon,
                                    alpha=spec.accuracy.alpha),
                     "epsilon": mech.epsilon, "sensitivity": mech.l1_sensitivity,
                     "laplace_scale": mech.scale,
                     "estimand": "DR (AIPW) mean over the scoring block, V = U/n" if sign > 0
                     else "DR (AIPW) mean outcome over the scoring block, V = -U/n (U computed "
                          "on -Y: outcome_direction lower)"}
    return selection_document(spec, setup, k, plan, value_doc), value_doc


def run(spec: SelectPolicySpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, Any], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Score every policy, release one by the exponential mechanism (and optionally its value)."""
    setup = build_setup(spec, len(frame), side)
    if setup.library.sha256 != plan.details["library_sha256"]:
        raise SpecError("the policy library changed between the plan and the run; rerun")
    utilities = compute_utilities(spec, setup, frame, side)
    doc, value_doc = release_selection(spec, setup, utilities, plan, noise=noise)
    del utilities
    return build_release(spec, setup, doc, value_doc)
