"""cate in memory: the DP nuisances on D̃, the second stage on D, and τ̂ released at the query
points."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.cate.krr import (
    InfluenceVectors,
    KrrFit,
    fit_krr,
    pseudo_outcomes,
    residual_bound,
)
from dpcausal.commands.cate.privacy import (
    certified_gamma,
    function_mechanism,
    nuisance_learners,
    point_noise_sd,
    queries_mechanism,
)
from dpcausal.commands.cate.queries import query_points
from dpcausal.commands.cate.release import build_release
from dpcausal.commands.cate.rff import FourierFeatures, fit_rff_streaming
from dpcausal.commands.cate.setup import CateSetup, build_setup, rff_features
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common import row_split
from dpcausal.commands.common.arms import treated_mask
from dpcausal.commands.common.columns import ArmColumns
from dpcausal.frames import numeric_column
from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.dp_logistic import PropensityModel
from dpcausal.learners.dp_ridge import OutcomeModel
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]
SEARCH_SEED = 0
"""Public seed of the Sobol candidates of the queries-mode γ search (no data)."""


@dataclasses.dataclass(frozen=True)
class Prepared:
    """Validated, clipped arrays of the sensitive table, split into the two halves."""

    x1: FloatArray
    a1: FloatArray
    y1: FloatArray
    x2: FloatArray
    a2: FloatArray
    y2: FloatArray


class RowBounds(Protocol):
    """The public bounds rows are clipped to (a τ(x) or an ATE setup)."""

    @property
    def columns(self) -> ArmColumns: ...  # pragma: no cover - protocol

    @property
    def covariates(self) -> tuple[str, ...]: ...  # pragma: no cover - protocol

    @property
    def y_bounds(self) -> tuple[float, float]: ...  # pragma: no cover - protocol

    @property
    def box(self) -> BoxFeatures: ...  # pragma: no cover - protocol


def clip_xy(spec: CateSpec, setup: RowBounds, frame: pd.DataFrame
            ) -> tuple[FloatArray, FloatArray]:
    """(x, y) of ``frame``: x clipped to the box, y to the outcome bounds."""
    path = spec.data.path
    x = np.column_stack([numeric_column(frame, c, path) for c in setup.covariates])
    y = np.clip(numeric_column(frame, setup.columns.outcome, path), *setup.y_bounds)
    return np.clip(x, setup.box.lo, setup.box.hi), y


def clip_rows(spec: CateSpec, setup: RowBounds, frame: pd.DataFrame
              ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(x, a, y) of ``frame``: validated (A = 1 for cate.treated, 0 for cate.control, any other
    value refused), x clipped to the box, y to the outcome bounds."""
    cols = setup.columns
    x, y = clip_xy(spec, setup, frame)
    a = treated_mask(frame[cols.treatment], spec.cate, path=spec.data.path,
                     column=cols.treatment, command="cate").astype(np.float64)
    return x, a, y


def halves(spec: CateSpec, setup: CateSetup, frame: pd.DataFrame | None = None
           ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(D̃ rows, D rows) by ``cate.split`` (:mod:`dpcausal.commands.common.row_split`): by default a
    fresh secret permutation, so call it once per run. An ``id-hash`` split reads its id column
    from ``frame``."""
    column = spec.cate.split.id_column
    ids = None if column is None or frame is None else frame[column].tolist()
    return row_split.parts(spec.cate.split, setup.n_total, setup.n_nuisance, ids)


def prepare(spec: CateSpec, setup: CateSetup, frame: pd.DataFrame) -> Prepared:
    """Read, validate (A ∈ {0, 1}), clip to the public bounds and split into the two halves."""
    x, a, y = clip_rows(spec, setup, frame)
    i1, i2 = halves(spec, setup, frame)
    return Prepared(x[i1], a[i1], y[i1], x[i2], a[i2], y[i2])


def second_stage(setup: CateSetup, prop: PropensityModel, outm: OutcomeModel, x: FloatArray,
                 a: FloatArray, y: FloatArray) -> tuple[KrrFit, FloatArray, FloatArray]:
    """ρ, φ on D from the (fixed) nuisances, and the exact weighted KRR fit (not a release)."""
    pi = prop.predict(x)
    rho, phi = pseudo_outcomes(setup.learner, a, y, pi, outm.predict(x, 0), outm.predict(x, 1))
    s = setup.box.unit(x)
    assert setup.krr_accuracy is not None
    fit = fit_krr(s, rho, phi, bandwidth=setup.bandwidth, lam0=setup.lam0,
                  huber_c=setup.huber_c, accuracy=setup.krr_accuracy)
    return fit, rho, phi


def second_stage_rff(setup: CateSetup, feats: FourierFeatures, prop: PropensityModel,
                     outm: OutcomeModel, x: FloatArray, a: FloatArray, y: FloatArray) -> FloatArray:
    """Weights ŵ of the random-feature second stage (not a release).

    Notes
    -----
    Sensitivity: J(w) = (1/n)Σ ρ_i ℓ_c(wᵀζ_i − φ_i) + λ0‖w‖² is 2λ0-strongly convex in w and each
    record's gradient ρℓ′ζ has norm ≤ L_w (‖ζ‖ = 1), so ‖ŵ_D − ŵ_D′‖₂ ≤ L_w/(λ0 n) — the same Δ as
    the exact kernel (plus tol/λ0 for the solver). The release is
    :meth:`GaussianProcessMechanism.release_weights` with that Δ. Streams: ζ is computed in row
    blocks, never as an n × 2m matrix.
    """
    pi = prop.predict(x)
    rho, phi = pseudo_outcomes(setup.learner, a, y, pi, outm.predict(x, 0), outm.predict(x, 1))
    assert setup.rff_accuracy is not None
    return fit_rff_streaming(feats, setup.box.unit(x), rho, phi, lam0=setup.lam0,
                             huber_c=setup.huber_c, accuracy=setup.rff_accuracy).w


def search_gamma(spec: CateSpec, setup: CateSetup, fit: KrrFit, rho: FloatArray,
                 prop: PropensityModel, outm: OutcomeModel, sq: FloatArray) -> float:
    """γ(T, D) by search over candidates in the box (a lower bound of the sup; times safety)."""
    from scipy.stats import qmc  # lazy (issue 24): only this search needs scipy.stats

    sec = spec.cate
    sobol = qmc.Sobol(setup.q, scramble=True, seed=np.random.default_rng(SEARCH_SEED))
    m = 1 << max(6, math.ceil(math.log2(sec.search_points)))
    cands = [fit.points, sq, sobol.random(m)]
    if setup.q <= 10:
        corners = np.array(np.meshgrid(*[[0.0, 1.0]] * setup.q, indexing="ij")).reshape(setup.q, -1).T
        cands.append(corners)
    cand = np.clip(np.vstack(cands), 0.0, 1.0)
    infl = InfluenceVectors.build(sq, fit.points, rho, bandwidth=setup.bandwidth, lam0=setup.lam0)
    xr = setup.box.lo + cand * (setup.box.hi - setup.box.lo)
    s_val = residual_bound(setup.learner, prop.predict(xr), outm.predict(xr, 0),
                           outm.predict(xr, 1), fit.predict(cand), setup.y_bounds)
    return sec.gamma_safety * float(np.max(infl.norms(cand) * s_val))


def run(spec: CateSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, Any], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Fit the DP nuisances on D̃, the second stage on D, and release τ̂ at the query points
    (two arms; K ≥ 3 arms: :func:`dpcausal.commands.cate.multi_arm.run`)."""
    setup = build_setup(spec, len(frame))
    queries = query_points(spec, setup, side)
    data = prepare(spec, setup, frame)
    prop_l, out_l = nuisance_learners(spec, setup)
    prop = prop_l.fit(data.x1, data.a1, clip=setup.kappa, noise=noise)
    outm = out_l.fit(data.x1, data.a1, data.y1, noise=noise)
    sq = setup.box.unit(queries[list(setup.covariates)].to_numpy(dtype=np.float64))
    weights = None
    if spec.cate.features == "rff":
        feats = rff_features(spec, setup)
        w_hat = second_stage_rff(setup, feats, prop, outm, data.x2, data.a2, data.y2)
        weights = noise.release_weights(function_mechanism(spec, setup), w_hat)
        del w_hat
        tau = feats.evaluate(sq, weights)
    else:
        fit, rho, _ = second_stage(setup, prop, outm, data.x2, data.a2, data.y2)
        g_q = fit.predict(sq)
        if spec.cate.mode == "function":
            tau = noise.release(function_mechanism(spec, setup), g_q, points=sq)
        else:
            if spec.cate.gamma_method == "certified":
                gamma = certified_gamma(setup, len(queries))
                tau = noise.release(queries_mechanism(spec, setup, len(queries), gamma), g_q)
            else:  # γ(T, D) is data-dependent (smooth sensitivity): the planned mechanism is per
                # unit of γ, so release g/γ through it and scale back: g + γ·c·N(0, I) exactly
                gamma = max(search_gamma(spec, setup, fit, rho, prop, outm, sq), 1e-300)
                unit = queries_mechanism(spec, setup, len(queries), None)
                tau = gamma * noise.release(unit, g_q / gamma)
        del g_q, fit, rho
    return build_release(spec, setup, queries, tau, weights,
                         point_noise_sd(spec, setup, len(queries)))
