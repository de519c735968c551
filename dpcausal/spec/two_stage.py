"""The spec of ``dpcausal two-stage``: DP-2ERM (Lee & Chen), balancing weights + objective perturbation.

Stage 1 computes covariate-balancing weights without noise; stage 2 fits the ITR weighted regression
with objective perturbation calibrated to how much all n weights can move when one row is replaced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from dpcausal.spec.base import BinaryArms, CommonSpec, PositiveFinite, StrictModel

Fraction = Annotated[float, Field(gt=0.0, lt=1.0)]

WeightMethod = Literal["uniform", "ipw-rct", "ipw-known", "ipw-logit", "ebw", "mmd"]
CERTIFIED_METHODS: tuple[str, ...] = ("uniform", "ipw-rct", "ipw-known", "ipw-logit")
"""Methods with a proven method-specific stability bound (exact enumerated sups for the first three;
the ratio bound of docs/proofs/two_stage_weights.md §5 for ipw-logit)."""


class IpwRctSection(StrictModel):
    """Inverse propensity weights of a randomised trial: P(treated) is a public design constant."""

    p_treated: Fraction


class IpwKnownSection(StrictModel):
    """Inverse propensity weights from a PUBLIC logistic model: logit P(treated|x) = c₀ + Σ c_j x_j.

    The coefficients are on the raw covariate scale (covariates clipped to their public bounds);
    covariates not listed have coefficient 0. They must not be fitted on the sensitive data.
    """

    intercept: float = 0.0
    coefficients: dict[str, float]


class IpwLogitSection(StrictModel):
    """IPW from a ridge logistic regression fitted on the data (Eqs. 4.10–4.11).

    ``sensitivity: method`` uses our proven ratio bound (the paper's (4.12′) is false)."""

    radius: PositiveFinite = 1.0
    """R: the coefficient vector is kept in the ℓ₂ ball of radius R."""
    ridge: PositiveFinite = 1.0
    """λ_IPW > 0."""


class EbwSection(StrictModel):
    """Entropy-balancing weights (§4.2.3, corrected convex dual, ℓ₂ ball).

    ``sensitivity: method`` uses our proven ratio bound and needs ``arm_totals: sample``; the
    paper's (4.27′) is false and is never used."""

    radius: PositiveFinite = 1.0
    """R: the dual vector is kept in the ℓ₂ ball of radius R."""
    ridge: PositiveFinite = 1.0
    """λ_EBW > 0; the balance tolerance is ≈ λ_EBW·R (in the scaled units of the moments)."""
    moments: Literal[1, 2] = 1
    """1: balance means; 2: means and squares."""
    min_arm_fraction: Annotated[float, Field(gt=0.0, le=0.5)] = 0.1
    """κ: public scale of the moment rows (rows of a smaller arm are clipped to unit norm)."""
    arm_totals: Literal["equal", "sample"] = "equal"
    """``equal`` rescales each arm to n/2 (unbiased ITR contrast; universal bound only);
    ``sample`` keeps n_a (the paper's EBW; biased contrast when n₀ ≠ n₁; proven bound)."""


class MmdSection(StrictModel):
    """Three-way MMD weights (Eq. 4.15, RBF kernel, box 0 ≤ w ≤ R): ``sensitivity: universal`` only."""

    bandwidth: PositiveFinite
    """h of k(x, x′) = exp(−‖s − s′‖²/(2h²)) on the scaled covariates; public (no median heuristic)."""
    alpha: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    ridge: PositiveFinite = 1.0
    """λ_MMD in the (4.15) scaling (the strong-convexity constant of the weight problem)."""
    box: PositiveFinite | None = None
    """R_MMD; default max(5, ⌈1/min_arm_fraction⌉ + 1)."""
    min_arm_fraction: Annotated[float, Field(gt=0.0, le=0.5)] = 0.1


class TwoStageSection(BinaryArms):
    """The ``two_stage`` section."""

    section: ClassVar[str] = "two_stage"
    weights: WeightMethod
    sensitivity: Literal["method", "universal"] = "method"
    """``method``: the exact stability sups of a certified weight method; ``universal``: the caps
    W₁ˢ ≤ 2n, W₂ ≤ √2·n·√(n+1), valid for any weights in nΔⁿ."""
    calibration: Literal["safe", "paper"] = "safe"
    """``safe`` (corrected W₁ˢ, augmented W₂, corrected Gaussian σ); ``paper`` reproduces the
    paper's (3.8)/(3.9), which leak (privacy loss up to ≈1.13ε): needs ``allow_uncertified``."""
    allow_uncertified: bool = False
    noise: Literal["gamma", "gaussian"] = "gamma"
    """``gamma``: ε-DP (δ = 0); ``gaussian``: (ε, δ)-DP (privacy.delta > 0)."""
    eps_split: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.5
    """Share of ε spent on the noise term; the rest covers the Jacobian (γ) term."""
    l1_radius: PositiveFinite | None = None
    """λ₁: θ is constrained to ‖θ‖₁ ≤ λ₁ (required: ζ = 2M_x²λ₁ + 4M_xM_y)."""
    gamma: PositiveFinite | None = None
    """Ridge γ of stage 2; default γ_required; an error if smaller than γ_required."""
    intercept: bool = True
    scaling: Literal["maxabs", "minmax"] = "maxabs"
    outcome_direction: Literal["higher", "lower"] = "higher"
    ipw_rct: IpwRctSection | None = None
    ipw_known: IpwKnownSection | None = None
    ipw_logit: IpwLogitSection | None = None
    ebw: EbwSection | None = None
    mmd: MmdSection | None = None
    apply_to: Path | None = None
    """A file of new covariate rows (not the training data) to write recommendations for."""

    @model_validator(mode="after")
    def _consistent(self) -> TwoStageSection:
        sections = {"ipw-rct": "ipw_rct", "ipw-known": "ipw_known", "ipw-logit": "ipw_logit",
                    "ebw": "ebw", "mmd": "mmd"}
        for method, name in sections.items():
            if getattr(self, name) is not None and self.weights != method:
                raise ValueError(f"two_stage.{name} is only used with weights: {method}")
        if self.weights == "mmd" and self.mmd is None:
            raise ValueError("weights: mmd needs a two_stage.mmd section with a public bandwidth")
        return self



class TwoStageSpec(CommonSpec):
    """Full spec of ``dpcausal two-stage``."""

    two_stage: TwoStageSection
