"""two-stage's stage 1: the covariate-balancing weights w ∈ nΔⁿ, computed without noise and never
released."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dpcausal.commands.two_stage import weights as wts
from dpcausal.commands.two_stage.privacy import stability_bounds
from dpcausal.commands.two_stage.setup import Prepared, TwoStageSetup, coef_vector, mmd_box
from dpcausal.commands.two_stage.spec import EbwSection, IpwLogitSection, TwoStageSpec
from dpcausal.errors import SolverError

FloatArray = npt.NDArray[np.float64]


def _moments(scaled: FloatArray, order: int) -> tuple[FloatArray, float]:
    """g(x) = (1, s) or (1, s, s²) and its public norm bound M_g (|s_j| ≤ 1 after scaling)."""
    parts = [np.ones((scaled.shape[0], 1)), scaled]
    if order == 2:
        parts.append(scaled**2)
    g = np.hstack(parts)
    return g, math.sqrt(g.shape[1])


def compute_weights(spec: TwoStageSpec, setup: TwoStageSetup, data: Prepared) -> FloatArray:
    """Stage 1 (never released). Returns w ∈ nΔⁿ.

    Notes
    -----
    A refusal is an output: once the rows are read, no branch may end the run on the data. When
    the bound in use holds for ANY weights in nΔⁿ (``sensitivity: universal``, or a method bound
    clipped to the universal caps; always the case for ``mmd``), a stage-1 solve that fails
    (the mmd program infeasible because an arm has fewer than n/R_MMD rows, no convergence, a
    singular system, non-finite weights) is replaced by the fixed public choice w ≡ 1, silently:
    the stability bound, the noise and the outputs are those of any other weights. Otherwise the
    bound is method-specific and the weights are closed forms (uniform, ipw-rct, ipw-known: finite
    by their public bounds) or duals (ipw-logit, ebw) within η/2 of the exact minimiser whichever
    way the solve ends: certified, or the guaranteed fallback (``dual.solve_dual``), never a
    refusal.
    """
    sec = spec.two_stage
    n = len(data.t)
    # Stage-1 accuracy matters only if the bound in use is method-specific: when it is clipped to
    # the universal caps (valid for ANY weights in nΔⁿ) the certificate is skipped, so no
    # data-dependent refusal can occur there (review finding: refusal side channel).
    certify = (sec.sensitivity == "method"
               and stability_bounds(spec, setup, n).method_specific(sec.calibration))
    if certify:
        w = _stage1(spec, data, certify=True)
    else:
        try:
            w = _stage1(spec, data, certify=False)
        except (SolverError, np.linalg.LinAlgError, FloatingPointError):
            w = wts.uniform_weights(n)  # the fixed public choice (any weights are covered)
        if not weights_ok(w):
            w = wts.uniform_weights(n)
    if not weights_ok(w):
        raise RuntimeError("stage-1 weights are not finite, nonnegative and positive in sum")
    return w * (n / float(w.sum()))


def weights_ok(w: FloatArray) -> bool:
    """Whether stage-1 weights can be normalised into nΔⁿ (finite, ≥ 0, positive sum)."""
    return bool(np.all(np.isfinite(w)) and np.all(w >= 0) and float(w.sum()) > 0)


def _stage1(spec: TwoStageSpec, data: Prepared, *, certify: bool) -> FloatArray:
    """The spec's weight method on the prepared rows (may raise SolverError)."""
    sec = spec.two_stage
    n = len(data.t)
    if sec.weights == "uniform":
        return wts.uniform_weights(n)
    if sec.weights == "ipw-rct":
        assert sec.ipw_rct is not None
        return wts.ipw_rct_weights(data.a, sec.ipw_rct.p_treated)
    if sec.weights == "ipw-known":
        assert sec.ipw_known is not None
        score = sec.ipw_known.intercept + data.raw @ coef_vector(spec)
        return wts.ipw_from_scores(data.a, score)
    if sec.weights == "ipw-logit":
        cfg = sec.ipw_logit or IpwLogitSection()
        feats = np.hstack([np.ones((n, 1)), data.scaled])
        return wts.ipw_logit_weights(data.a, feats, radius=cfg.radius, ridge=cfg.ridge,
                                     certify=certify)
    if sec.weights == "ebw":
        ebw = sec.ebw or EbwSection()
        g, m_g = _moments(data.scaled, ebw.moments)
        return wts.ebw_weights(data.a, g, kappa=ebw.min_arm_fraction, m_g=m_g, radius=ebw.radius,
                               ridge=ebw.ridge, arm_totals=ebw.arm_totals, certify=certify)
    assert sec.mmd is not None
    return wts.mmd_weights(data.a, data.scaled, bandwidth=sec.mmd.bandwidth, alpha=sec.mmd.alpha,
                           ridge=sec.mmd.ridge, box=mmd_box(sec.mmd))
