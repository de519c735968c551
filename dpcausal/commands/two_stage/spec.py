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
    """P(treated) in (0, 1) fixed by the trial's design (never estimated on the data): treated
    rows get weight ∝ 1/p, control rows ∝ 1/(1 − p). A p near 0 or 1 makes one arm's weights
    large and the stability bound (the noise) larger."""


class IpwKnownSection(StrictModel):
    """Inverse propensity weights from a PUBLIC logistic model: logit P(treated|x) = c₀ + Σ c_j x_j.

    The coefficients are on the raw covariate scale (covariates clipped to their public bounds);
    covariates not listed have coefficient 0. They must not be fitted on the sensitive data.
    """

    intercept: float = 0.0
    """c₀ of the public logistic model logit P(treated | x) = c₀ + Σ c_j x_j (default 0)."""
    coefficients: dict[str, float]
    """{covariate: c_j} on the raw covariate scale (covariates clipped to their bounds first);
    unlisted covariates have 0. From the design or a prior study, never fitted on this file.
    Larger coefficients allow more extreme propensities, hence larger weights and more noise."""


class IpwLogitSection(StrictModel):
    """IPW from a ridge logistic regression fitted on the data (Eqs. 4.10–4.11).

    ``sensitivity: method`` uses our proven ratio bound (the paper's (4.12′) is false)."""

    radius: PositiveFinite = 1.0
    """R > 0 (default 1): the logistic coefficient vector is kept in the ℓ₂ ball of radius R,
    which bounds the propensities away from 0 and 1; a smaller R means smaller weights and
    less noise (e.g. 0.3), and a cruder propensity model."""
    ridge: PositiveFinite = 1.0
    """λ_IPW > 0 (default 1) of the ridge logistic fit (Eq. 4.10): a larger λ makes the fit, so
    the weights, more stable under one replaced row (less noise) and the propensity flatter."""


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
    """α in [0, 1] (default 0.5) of the three-way objective α·MMD²(P_w0, P) + α·MMD²(P_w1, P) +
    (1 − α)·MMD²(P_w0, P_w1): α weighs each arm's match to the whole sample against the arms'
    match to each other. Changes the weights, not the (universal) sensitivity."""
    ridge: PositiveFinite = 1.0
    """λ_MMD in the (4.15) scaling (the strong-convexity constant of the weight problem)."""
    box: PositiveFinite | None = None
    """R_MMD; default max(5, ⌈1/min_arm_fraction⌉ + 1)."""
    min_arm_fraction: Annotated[float, Field(gt=0.0, le=0.5)] = 0.1
    """Public guess κ in (0, 0.5] (default 0.1) of the smaller arm's share of rows; used only for
    the default box R_MMD. If an arm is smaller than n/R_MMD the weight program is infeasible
    and the run is refused."""


class TwoStageSection(BinaryArms):
    """The ``two_stage`` section."""

    section: ClassVar[str] = "two_stage"
    command: ClassVar[str] = "two-stage"
    multi_arm_why: ClassVar[str] = ("the paper's weights and rule are for a binary A, spec "
                                    "two_stage §1")
    weights: WeightMethod
    """Stage-1 balancing weights (computed without noise, never released): uniform, ipw-rct,
    ipw-known (exact stability sups), ipw-logit, ebw (proven ratio bounds) or mmd (only with
    sensitivity: universal). The stage-2 noise is calibrated to how far all n weights can move
    when one row is replaced."""
    sensitivity: Literal["method", "universal"] = "method"
    """``method``: the exact stability sups of a certified weight method; ``universal``: the caps
    W₁ˢ ≤ 2n, W₂ ≤ √2·n·√(n+1), valid for any weights in nΔⁿ."""
    calibration: Literal["safe", "paper"] = "safe"
    """``safe`` (corrected W₁ˢ, augmented W₂, corrected Gaussian σ); ``paper`` reproduces the
    paper's (3.8)/(3.9), which leak (privacy loss up to ≈1.13ε): needs ``allow_uncertified``."""
    allow_uncertified: bool = False
    """Allow calibration: paper, which has no valid guarantee (default false: refused with exit
    3). Its receipt says dp_guarantee: false and it is still charged to the ledger."""
    noise: Literal["gamma", "gaussian"] = "gamma"
    """``gamma``: ε-DP (δ = 0); ``gaussian``: (ε, δ)-DP (privacy.delta > 0)."""
    eps_split: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.5
    """Share in (0, 1) of ε spent on the noise term (default 0.5); the rest covers the Jacobian
    term, which sets γ_required: a larger share means less noise but a larger γ (more
    shrinkage)."""
    l1_scale: Annotated[float, Field(gt=0.0, le=100.0)] | Literal["total"] = "total"
    """Unit-free size of the ℓ₁ ball θ lives in: λ₁ = r·2M_y/M_∞, the ball whose largest score on
    the covariate box is r times the target bound 2M_y (ζ = 4M_xM_y(1 + r)), so rescaling the
    outcome leaves the rule's law unchanged. ``total`` (default): the public rule of
    dpcausal/commands/two_stage/penalty.py, r = clip(0.05/ν₀, 0.05, 1) from the plan's predicted
    relative noise ν₀ (a smaller ball denoises at small nε; r → 1 as nε → ∞). Give at most one of
    l1_scale and l1_radius."""
    l1_radius: PositiveFinite | None = None
    """The old form, in explicit units: λ₁ > 0 in **score units (2 × outcome units)**: θ is
    constrained to ‖θ‖₁ ≤ λ₁, ζ = 2M_x(2M_y + M_∞λ₁), M_∞ = (1 − 8u)/√d (d = dim θ). The same
    number is a different ball on a dollar and on a thousand-dollar outcome; prefer l1_scale."""
    outcome_center: float | Literal["private", "midpoint"] = "private"
    """Centre c of the outcome; the stage-2 target is t = 2(y − c)ã. In the population c does not
    change the IPW target, but in a sample the term −2c·Σwãx/n adds variance that grows with
    |c − mean outcome| (and makes the rule depend on where the public bounds sit).
    ``private`` (default): c = the Laplace mean of the outcome clipped to bounds.outcome
    (sensitivity (U − L)/n, its own event at ``center_share`` of ε, clamped to [L, U]), and y − c
    is winsorised at ±(U − L)/2, so M_y = (U − L)/2 and stage 2's calibration holds for every c
    (docs/proofs/two_stage.md §11). ``midpoint``: c = (L + U)/2 (public, no ε; the old default).
    A number: a public guess of the mean in the outcome's units, strictly inside bounds.outcome
    (a prior study; no ε), with M_y = max(U − c, c − L)."""
    center_share: Fraction = 0.05
    """Share of privacy.epsilon spent on the private outcome centre (``outcome_center: private``
    only; default 0.05): the centre's Laplace scale is (U − L)/(n·share·ε), stage 2 gets the rest."""
    gamma: PositiveFinite | None = None
    """Ridge γ > 0 of stage 2; default γ_required (the smallest the calibration allows); a
    smaller value is refused. A larger γ shrinks the rule more without reducing the noise."""
    intercept: bool = True
    """Append a constant feature (default true); it adds one dimension to θ and to the noise."""
    scaling: Literal["maxabs", "minmax"] = "maxabs"
    """How clipped covariates are scaled: maxabs (default) divides by max(|lo|, |hi|), minmax
    maps [lo, hi] to [0, 1]; either way each mapped row has norm ≤ 1 (M_x = 1)."""
    outcome_direction: Literal["higher", "lower"] = "higher"
    """higher (default): larger outcomes are better; lower: smaller are better (the outcome and
    its bounds are negated before fitting)."""
    ipw_rct: IpwRctSection | None = None
    """Settings of weights: ipw-rct (required with it, only used with it)."""
    ipw_known: IpwKnownSection | None = None
    """Settings of weights: ipw-known (required with it, only used with it)."""
    ipw_logit: IpwLogitSection | None = None
    """Settings of weights: ipw-logit (default {radius: 1, ridge: 1}; only used with it)."""
    ebw: EbwSection | None = None
    """Settings of weights: ebw (default {radius: 1, ridge: 1, ...}; only used with it)."""
    mmd: MmdSection | None = None
    """Settings of weights: mmd (required with it, for its public bandwidth)."""
    apply_to: Path | None = None
    """A file of new covariate rows (not the training data) to write recommendations for."""
    plot: bool = True
    """Write rule.png (default true): the released coefficients with their noise-bound intervals
    and, with apply_to, the scored rows' margins with their band (drawn from released numbers
    only, no extra ε)."""

    @model_validator(mode="after")
    def _consistent(self) -> TwoStageSection:
        sections = {"ipw-rct": "ipw_rct", "ipw-known": "ipw_known", "ipw-logit": "ipw_logit",
                    "ebw": "ebw", "mmd": "mmd"}
        for method, name in sections.items():
            if getattr(self, name) is not None and self.weights != method:
                raise ValueError(f"two_stage.{name} is only used with weights: {method}")
        if self.l1_radius is not None and "l1_scale" in self.model_fields_set:
            raise ValueError("give at most one of two_stage.l1_scale (unit-free, preferred) and "
                             "two_stage.l1_radius (score units)")
        if "center_share" in self.model_fields_set and self.outcome_center != "private":
            raise ValueError("two_stage.center_share is only used with outcome_center: private")
        if self.weights == "mmd" and self.mmd is None:
            raise ValueError("weights: mmd needs a two_stage.mmd section with a public bandwidth")
        return self


class TwoStageSpec(CommonSpec):
    """Full spec of ``dpcausal two-stage``."""

    two_stage: TwoStageSection
    """The two-stage method's own settings: the arms, the stage-1 weights, the stage-2
    calibration and noise."""
