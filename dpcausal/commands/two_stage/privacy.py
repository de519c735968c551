"""two-stage's privacy mechanism: the objective-perturbation noise b, calibrated to the public
stability bounds of the weights."""

from __future__ import annotations

import math

from dpcausal.commands.two_stage import dual
from dpcausal.commands.two_stage.calibration import (
    Calibrated,
    StabilityBounds,
    ebw_bounds,
    ipw_known_bounds,
    ipw_logit_bounds,
    ipw_rct_bounds,
    uniform_bounds,
    universal_bounds,
)
from dpcausal.commands.two_stage.dual_accuracy import DualAccuracy
from dpcausal.commands.two_stage.setup import TwoStageSetup
from dpcausal.commands.two_stage.spec import (
    CERTIFIED_METHODS,
    EbwSection,
    IpwLogitSection,
    TwoStageSpec,
)
from dpcausal.errors import UncertifiedModeError
from dpcausal.mechanisms import L2LaplaceMechanism
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector

OBJECTIVE_STAGE = "two_stage.objective_noise"
"""Stage 2's event (the noise vector b) in the plan, the receipt and the noise guard."""


def stability_bounds(spec: TwoStageSpec, setup: TwoStageSetup, n: int) -> StabilityBounds:
    """W̄ sups from public inputs: exact for certified methods, else the universal caps."""
    sec = spec.two_stage
    if sec.sensitivity == "universal":
        return universal_bounds(n)
    if sec.weights == "ebw":
        ebw = sec.ebw or EbwSection()
        if ebw.arm_totals != "sample":
            raise UncertifiedModeError(
                "two_stage.sensitivity: 'method' for ebw is proven only with ebw.arm_totals: "
                "sample (the equal-totals rescaling n/(2n_a) has no bound for tiny arms); set "
                "two_stage.ebw.arm_totals: sample, or sensitivity: universal"
            )
        k = 1 + ebw.moments * len(setup.fmap.names)
        m_g = math.sqrt(k)  # ‖g‖ with every |s_j| ≤ 1
        return ebw_bounds(n, m_g=m_g, kappa=ebw.min_arm_fraction, radius=ebw.radius,
                          ridge=ebw.ridge,
                          lambda_slack=dual.certificate_slack(n, 2 * k, ebw.radius, ebw.ridge))
    if sec.weights not in CERTIFIED_METHODS:
        raise UncertifiedModeError(
            f"two_stage.sensitivity: 'method' has no proven stability bound for weights: "
            f"{sec.weights} (the paper's (4.19) is false); set sensitivity: universal, or use a "
            "certified method (uniform, ipw-rct, ipw-known, ipw-logit, ebw with sample totals)"
        )
    if sec.weights == "uniform":
        return uniform_bounds(n)
    if sec.weights == "ipw-rct":
        assert sec.ipw_rct is not None
        return ipw_rct_bounds(n, sec.ipw_rct.p_treated)
    if sec.weights == "ipw-logit":
        cfg = sec.ipw_logit or IpwLogitSection()
        k = 1 + len(setup.fmap.names)
        m_w = math.sqrt(k)  # ‖(1, s)‖ with every |s_j| ≤ 1
        return ipw_logit_bounds(n, m_w=m_w, radius=cfg.radius, ridge=cfg.ridge,
                                lambda_slack=dual.certificate_slack(n, k, cfg.radius, cfg.ridge))
    assert setup.u_range is not None
    return ipw_known_bounds(n, *setup.u_range)


def stage1_dual(spec: TwoStageSpec, setup: TwoStageSetup, n: int) -> DualAccuracy | None:
    """The public constants of the ipw-logit / ebw stage-1 dual (its guaranteed fallback's step
    count among them), or None for the other weight methods."""
    sec = spec.two_stage
    if sec.weights == "ebw":
        ebw = sec.ebw or EbwSection()
        return DualAccuracy(n, 2 * (1 + ebw.moments * len(setup.fmap.names)), ebw.radius,
                            ebw.ridge)
    if sec.weights == "ipw-logit":
        cfg = sec.ipw_logit or IpwLogitSection()
        return DualAccuracy(n, 1 + len(setup.fmap.names), cfg.radius, cfg.ridge)
    return None


def mechanism(spec: TwoStageSpec, cal: Calibrated, dim: int) -> L2LaplaceMechanism | GaussianNoiseVector:
    """The noise vector b of Algorithm 1.

    Notes
    -----
    Neighbouring relation: replace one row (one individual); n is public.
    Sensitivity: for every θ in the ℓ₁ ball, the gradient map b_D(θ) = −[Σ w_i∇ℓ(θ; d_i) + nγθ]
    moves by at most Δ = ζ·W̄₁ˢ between neighbours, ζ = 2M_x(2M_y + M_∞λ₁) (Cor 6.1 with |xᵀθ| ≤
    M_∞λ₁, M_∞ ≥ ‖x‖_∞; the paper: M_∞ = M_x): the replaced
    record's old and new gradients are each ≤ ζ·weight and every other gradient is ≤ ζ·|Δw_i|.
    Guarantee: Gamma noise (density ∝ exp(−ε_b‖b‖/Δ), the ℓ₂-Laplace law) bounds the noise term of
    the privacy loss by ε_b; Gaussian noise with σ = (Δ/(2ε_b))(L̃ + sqrt(L̃² + 2ε_b)) bounds it by
    ε_b off an event of probability ≤ δ. The ridge γ ≥ λ_H·W̄₂aug/(ε_H n) bounds the Jacobian term
    by ε_H (Lemma 5.1, augmented form). Total: ε-DP (Gamma) or (ε, δ)-DP (Gaussian) for θ, under
    ``calibration: safe``. ``paper`` uses (3.8)/(3.9) verbatim and carries NO guarantee.
    """
    stage = OBJECTIVE_STAGE
    if spec.two_stage.noise == "gamma":
        return L2LaplaceMechanism(cal.noise_epsilon, cal.shift_bound, dim, stage=stage)
    return GaussianNoiseVector(cal.noise_epsilon, spec.privacy.delta, cal.shift_bound, cal.scale,
                               dim, stage=stage)
