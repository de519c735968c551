"""``select-policy`` on an engine: the same release as
:func:`dpcausal.commands.select_policy.estimate.run`, with the utilities U(π) summed partition by
partition.

Every row is validated and clipped (Y to the public outcome bounds, fixed scores to [−B, B];
covariates are clipped by the learners' feature map) before it enters a sum. Regime ``learned``:
the split is :func:`~dpcausal.commands.select_policy.setup.split_indices` of the global row index
(file order; by default a secret random permutation drawn on the client), so it does not depend on
the partitioning. The certified learners are fit from sums
over the nuisance rows of every partition — the ridge from its per-arm sufficient statistics (one
pass), the logistic by Newton with one loss/gradient/Hessian pass per step — with the batch sums
added exactly rounded (the summation the public accuracy bounds assume) and the same certificate
as in memory, so the stability bounds β_μ, β_e and Δ_cert hold unchanged and no nuisance row is
held on the client. Each scoring partition then returns its vector of
per-policy DR score sums. The exponential mechanism (and the
optional Laplace value release) draws its noise once, on the client.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.select_policy.estimate import release_selection
from dpcausal.commands.select_policy.library import PolicyLibrary
from dpcausal.commands.select_policy.release import build_release
from dpcausal.commands.select_policy.scores import (
    Nuisance,
    frozen_nuisance,
    learned_utilities,
    utilities_from_gammas,
)
from dpcausal.commands.select_policy.setup import (
    NuisanceInputs,
    ScoreInputs,
    Setup,
    _covariates,
    build_setup,
    split_indices,
    treated_indicator,
)
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.engine import split
from dpcausal.engine.base import Engine, batch_error
from dpcausal.errors import DataError, SpecError
from dpcausal.frames import numeric_column
from dpcausal.learners import CertifiedRidge, UnitBoxFeatures
from dpcausal.learners.logistic import logistic_sums
from dpcausal.learners.rounding import exact_total
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]


def prepare_batch(spec: SelectPolicySpec, setup: Setup, bits: split.Packed | None,
                  frame: pd.DataFrame, start: int) -> tuple[FloatArray, Any, FloatArray, Any]:
    """(x, treated, clipped y, nuisance flags) — or (x, q0, q1, None) with clipped fixed scores —
    of one batch. The flags mark the batch's nuisance rows (learned regime; a function of the
    global row index: < m for the index split, else the packed permutation mask ``bits``)."""
    path = spec.data.path
    frame = frame.reset_index(drop=True)
    try:
        names = _covariates(spec)
        x = np.empty((len(frame), len(names)), order="F")
        for j, c in enumerate(names):
            x[:, j] = numeric_column(frame, c, path)
        inputs = setup.inputs
        if isinstance(inputs, ScoreInputs):
            q0, q1 = inputs.scores(frame, path)
            return x, q0, q1, None
        y = inputs.outcome_values(frame, path)
        flags = None
        if setup.regime == "learned":
            flags = (split.members(bits, start, len(frame)) if bits is not None
                     else np.arange(start, start + len(frame)) < setup.m)
        return x, treated_indicator(spec, inputs, frame), y, flags
    except DataError as exc:
        raise batch_error(exc, start) from None


def _nuisance_rows(part: Any) -> tuple[FloatArray, Any, FloatArray]:
    x, treated, y, flags = part
    return x[flags], treated[flags], y[flags]


def ridge_sums(part: Any, start: int, *, fmap: UnitBoxFeatures, ridge: CertifiedRidge
               ) -> tuple[FloatArray, FloatArray]:
    """The batch's per-arm ridge sufficient statistics over its nuisance rows."""
    x, treated, y = _nuisance_rows(part)
    return ridge.arm_sums(fmap.transform(x), treated.astype(np.int8), y)


def logistic_batch_sums(part: Any, start: int, *, fmap: UnitBoxFeatures, theta: FloatArray
                        ) -> tuple[float, FloatArray, FloatArray]:
    """The batch's logistic loss/gradient/Hessian sums at θ over its nuisance rows."""
    x, treated, _ = _nuisance_rows(part)
    return logistic_sums(fmap.transform(x), np.asarray(treated, dtype=np.float64), theta)


def utility_sums(part: Any, start: int, *, setup: Setup, nuis: Nuisance | None,
                 chunk_rows: int) -> FloatArray:
    """Σ over the batch's scoring rows of ψ_π, for every policy π of the library."""
    x, a, b, flags = part
    if flags is not None:  # learned regime: score the rows outside the nuisance block
        x, a, b = x[~flags], a[~flags], b[~flags]
    if x.shape[0] == 0:
        return np.zeros(setup.library.size)
    assert isinstance(setup.library, PolicyLibrary)  # K arms are refused on engines (the plan)
    if nuis is None:
        return utilities_from_gammas(setup.library, x, a, b, chunk_rows=chunk_rows)
    return learned_utilities(setup.library, nuis, x, a, b, chunk_rows=chunk_rows)


def fit_nuisance_engine(spec: SelectPolicySpec, setup: Setup, inputs: NuisanceInputs,
                        engine: Engine) -> Nuisance:
    """The certified learners fit from sums over the engine's nuisance rows (none is gathered)."""
    fmap = inputs.fmap
    assert setup.nuisances is not None  # regime learned
    ridge, logistic = setup.nuisances.ridge, setup.nuisances.logistic
    # per-batch block sums added exactly rounded: the summation the public accuracy bounds assume
    grams, rhs = exact_total(engine.map_list(
        functools.partial(ridge_sums, fmap=fmap, ridge=ridge)))
    outcome = ridge.solve(grams, rhs, m=setup.m)

    def sums(theta: FloatArray) -> tuple[float, FloatArray, FloatArray]:
        return exact_total(engine.map_list(
            functools.partial(logistic_batch_sums, fmap=fmap, theta=theta)))

    propensity = logistic.solve(sums, m=setup.m, p=fmap.dim)
    return Nuisance(fmap, outcome, propensity)


def compute_utilities(spec: SelectPolicySpec, setup: Setup, engine: Engine,
                      side: dict[str, Any]) -> FloatArray:
    """U(π) for every policy over the engine's partitions (private: only fed to the mechanism)."""
    sec = spec.select_policy
    bits = None
    if setup.regime == "learned" and sec.split.kind != "index":  # the permutation's mask (drawn
        # once: by default a secret permutation for this run, as in memory)
        bits = split.pack(split_indices(spec, setup.n_total, setup.m)[0], setup.n_total)
    engine.load(functools.partial(prepare_batch, spec, setup, bits))
    nuis: Nuisance | None = None
    inputs = setup.inputs
    if isinstance(inputs, NuisanceInputs):
        nuis = (frozen_nuisance(side["frozen_model"], inputs.fmap, mu_bounds=inputs.mu_bounds,
                                zeta=sec.zeta, path=sec.frozen_model, sign=inputs.sign)
                if setup.regime == "frozen" else fit_nuisance_engine(spec, setup, inputs, engine))
    return engine.map_sum(functools.partial(utility_sums, setup=setup, nuis=nuis,
                                            chunk_rows=sec.chunk_rows))


def run(spec: SelectPolicySpec, engine: Engine, plan: PrivacyPlan, side: dict[str, Any], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """As ``select_policy.run``, with the utilities computed on the engine."""
    setup = build_setup(spec, engine.n_rows, side)
    if setup.library.sha256 != plan.details["library_sha256"]:
        raise SpecError("the policy library changed between the plan and the run; rerun")
    utilities = compute_utilities(spec, setup, engine, side)
    doc, value_doc = release_selection(spec, setup, utilities, plan, noise=noise)
    del utilities
    return build_release(spec, setup, doc, value_doc, {"engine": engine.description})
