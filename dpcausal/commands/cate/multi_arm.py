"""cate with K ≥ 3 arms (``cate.arms``): each arm against the declared control, released jointly.

Stage 1 on D̃: a DP multinomial logistic propensity (:class:`~dpcausal.learners.dp_multinomial.
DPMultinomial`) and one DP ridge per arm (:class:`~dpcausal.learners.dp_ridge.DPRidgeArms` with K
arms). Stage 2 on D: for every contrast k vs the control c, the binary learner's weighted kernel
ridge over ALL n rows of D, the rows of other arms entering with weight 0 (R) or with the DR
pseudo-outcome's indicators at 0 (DR) (:func:`contrast_inputs`). The K − 1 fitted functions are
released by ONE Gaussian-process mechanism with K − 1 independent paths at √(K − 1) times the
binary RKHS sensitivity (:func:`~dpcausal.commands.cate.privacy.function_mechanism`; proof:
docs/proofs/cate.md §10).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.cate.estimate import clip_xy, halves
from dpcausal.commands.cate.krr import KrrFit, Learner, fit_krr, pseudo_outcomes
from dpcausal.commands.cate.privacy import (
    arm_nuisance_learners,
    function_mechanism,
    point_noise_sd,
)
from dpcausal.commands.cate.queries import query_points
from dpcausal.commands.cate.release import build_release
from dpcausal.commands.cate.rff import fit_rff_streaming
from dpcausal.commands.cate.setup import CateSetup, build_setup, rff_features
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common.arms import arm_codes
from dpcausal.learners.dp_multinomial import ArmPropensities
from dpcausal.learners.dp_ridge import OutcomeModel
from dpcausal.mechanisms import NoiseGuard
from dpcausal.mechanisms.gaussian_process import gaussian_kernel
from dpcausal.method import Release
from dpcausal.spec.arms import label_index

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]


def contrast_indices(spec: CateSpec) -> tuple[list[int], int]:
    """(the arm indices of the contrasts, in declared order; the control's index)."""
    labels = spec.cate.labels()
    control = label_index(labels, spec.cate.control_label())
    assert control is not None  # the spec model checks the control is one of the arms
    return [i for i in range(len(labels)) if i != control], control


def contrast_inputs(learner: Learner, codes: IntArray, y: FloatArray, pi: FloatArray,
                    mu: FloatArray, k: int, c: int, kappa: float) -> tuple[FloatArray, FloatArray]:
    """Weights ρ and pseudo-outcomes φ of the contrast arm k vs control c over every row.

    ``pi`` (n × K) holds the propensities already clipped to [κ, 1 − κ], ``mu`` (n × K) the outcome
    models clipped to the outcome bounds.

    R: the binary R-learner on the conditional propensity e = π_k/(π_k + π_c) clipped to
    [κ, 1 − κ], with "treated" = 1{A = k}; rows of any other arm get ρ = 0 (they do not enter the
    fit), so ρ ≤ (1 − κ)² and √ρ|φ| ≤ Δy + (1 − κ)Δy exactly as for two arms.
    DR: ρ ≡ 1, φ = μ_k − μ_c + 1{A = k}(Y − μ_k)/π_k − 1{A = c}(Y − μ_c)/π_c, so |φ| ≤ Δy/κ + Δy
    exactly as for two arms.
    """
    is_k = codes == k
    is_c = codes == c
    if learner == "r":
        e = np.clip(pi[:, k] / (pi[:, k] + pi[:, c]), kappa, 1.0 - kappa)
        rho, phi = pseudo_outcomes("r", is_k.astype(np.float64), y, e, mu[:, c], mu[:, k])
        return np.where(is_k | is_c, rho, 0.0), phi
    phi = (mu[:, k] - mu[:, c] + np.where(is_k, (y - mu[:, k]) / pi[:, k], 0.0)
           - np.where(is_c, (y - mu[:, c]) / pi[:, c], 0.0))
    return np.ones_like(y), phi


def _nuisances(spec: CateSpec, setup: CateSetup, x1: FloatArray, codes1: IntArray,
               y1: FloatArray, noise: NoiseGuard) -> tuple[ArmPropensities, OutcomeModel]:
    prop_l, out_l = arm_nuisance_learners(spec, setup)
    prop = prop_l.fit(x1, codes1, clip=setup.kappa, noise=noise)
    outm = out_l.fit(x1, codes1.astype(np.float64), y1, noise=noise)
    return prop, outm


def second_stage_fits(spec: CateSpec, setup: CateSetup, prop: ArmPropensities,
                      outm: OutcomeModel, x2: FloatArray, codes2: IntArray, y2: FloatArray
                      ) -> list[KrrFit] | FloatArray:
    """The non-private fit of every contrast, in declared order (not a release): the exact
    kernel's fits, or with ``features: rff`` their weights (r × 2m)."""
    arms, control = contrast_indices(spec)
    pi = prop.predict(x2)
    mu = np.column_stack([outm.predict(x2, j) for j in range(len(spec.cate.labels()))])
    s = setup.box.unit(x2)
    inputs = [contrast_inputs(setup.learner, codes2, y2, pi, mu, k, control, setup.kappa)
              for k in arms]
    if spec.cate.features == "rff":
        assert setup.rff_accuracy is not None
        feats = rff_features(spec, setup)
        return np.vstack([fit_rff_streaming(feats, s, rho, phi, lam0=setup.lam0,
                                            huber_c=setup.huber_c, accuracy=setup.rff_accuracy).w
                          for rho, phi in inputs])
    assert setup.krr_accuracy is not None
    kmat = gaussian_kernel(s, s, setup.bandwidth)
    return [fit_krr(s, rho, phi, bandwidth=setup.bandwidth, lam0=setup.lam0,
                    huber_c=setup.huber_c, accuracy=setup.krr_accuracy, kmat=kmat)
            for rho, phi in inputs]


def second_stage_values(spec: CateSpec, setup: CateSetup, prop: ArmPropensities,
                        outm: OutcomeModel, x2: FloatArray, codes2: IntArray, y2: FloatArray,
                        sq: FloatArray) -> tuple[FloatArray, FloatArray | None]:
    """The non-private fits of every contrast (not a release): their values at the box-scaled
    queries ``sq`` (r × d) and, with ``features: rff``, their weights (r × 2m; else None)."""
    fits = second_stage_fits(spec, setup, prop, outm, x2, codes2, y2)
    if isinstance(fits, np.ndarray):
        return rff_features(spec, setup).evaluate(sq, fits.T).T, fits
    return np.vstack([fit.predict(sq) for fit in fits]), None


def run(spec: CateSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, Any], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Fit the K-arm DP nuisances on D̃, every contrast's second stage on D, and release the
    K − 1 contrasts at the query points through one joint Gaussian-process draw."""
    setup = build_setup(spec, len(frame))
    queries = query_points(spec, setup, side)
    x, y = clip_xy(spec, setup, frame)
    cols = setup.columns
    codes = arm_codes(frame[cols.treatment], spec.cate, path=spec.data.path,
                      column=cols.treatment)
    i1, i2 = halves(spec, setup, frame)
    prop, outm = _nuisances(spec, setup, x[i1], codes[i1], y[i1], noise)
    sq = setup.box.unit(queries[list(setup.covariates)].to_numpy(dtype=np.float64))
    values, w_hat = second_stage_values(spec, setup, prop, outm, x[i2], codes[i2], y[i2], sq)
    mech = function_mechanism(spec, setup)
    weights = None
    if w_hat is not None:
        weights = noise.release_weights(mech, w_hat)
        tau = rff_features(spec, setup).evaluate(sq, weights.T).T
    else:
        tau = noise.release(mech, values, points=sq)
    del values, w_hat
    return build_release(spec, setup, queries, tau, weights,
                         point_noise_sd(spec, setup, len(queries)))
