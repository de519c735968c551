"""Default penalties of the DP nuisance learners, chosen for total error from public inputs only.

A penalty λ trades the output perturbation's noise (its sensitivity falls like 1/(mλ)) against the
shrinkage of the fit (a coefficient whose direction has curvature I keeps I/(I + λ) of its value).
A fixed constant is wrong at one end or the other: λ = 0.05 shrank the NHEFS propensity to almost
flat even at ε = 10⁹ (issue #17), while a tiny λ drowns a small data set in noise. So the default
λ minimises a public proxy of the prediction error at a typical covariate value,

    MSE(λ) = (σ(λ)·r̄)² + (B·λ/(λ + I))²,

over a log grid of λ the float64 solves can guarantee (the learners' ``problem()``), where
σ(λ) is the Gaussian mechanism's noise sd at the learner's sensitivity and (ε, δ), and the proxies
are computed as if the covariates filled their public box uniformly: r̄² = E‖x̃‖², I = the
curvature along one covariate (c·Var(x̃_j); c = 1/4 for the logistic loss at p = ½, ½ for one
arm's share of the ridge loss) and B = the size of one covariate's effect across its bound (one
logit for the propensity; a quarter of the outcome range for the outcome models). Everything is
relative to the public bounds, m, q, ε and δ, so rescaling the outcome (kg ↔ g) leaves λ, and the
release's law, unchanged; at ε → ∞ the noise vanishes and λ goes to the smallest guaranteed
value. Data that fill only part of their box have less curvature than the proxy, so the
shrinkage the dry run reports is a best case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.dp_logistic import DPLogistic
from dpcausal.learners.dp_multinomial import DPMultinomial
from dpcausal.learners.dp_ridge import DPRidgeArms
from dpcausal.mechanisms import analytic_gaussian_sigma

GRID = 10.0 ** np.arange(-6.0, 0.01, 0.125)
"""The candidate penalties, 10⁻⁶ to 1 in steps of 10^⅛."""
PROPENSITY_EFFECT = 1.0
"""B of the propensity: one covariate moves the logit by 1 across its public bound."""
OUTCOME_EFFECT = 0.25
"""B of the outcome models, as a share of the outcome range."""


@dataclass(frozen=True)
class PenaltyChoice:
    """A chosen λ with the public proxies it was chosen by (for the plan and the dry run)."""

    l2: float
    noise_sd: float
    """σ(λ)·r̄: the proxy sd of the prediction noise (logit, or outcome units)."""
    kept: float
    """I/(I + λ): the share of a covariate's effect the fit keeps under the uniform-box proxy."""
    rule: str

    def to_dict(self) -> dict[str, float | str | None]:
        """The plan's record of the choice (no proxies, None, for a penalty the spec gives)."""
        return {"l2": self.l2,
                "predicted_noise_sd": self.noise_sd if math.isfinite(self.noise_sd) else None,
                "kept_share_of_effect": self.kept if math.isfinite(self.kept) else None,
                "rule": self.rule}


def _box_moments(box: BoxFeatures) -> tuple[float, float]:
    """(E‖x̃‖², Var x̃_j) with s uniform on [0, 1]^q."""
    q = box.dim - 1
    sc2 = box.scale**2
    mean_sq = sc2 * (1.0 + (q / 12.0 if box.centered else q / 3.0))
    return mean_sq, sc2 / 12.0


def given_penalty(l2: float) -> PenaltyChoice:
    """A penalty the spec gives (no proxies: the dry run reports no kept share for it)."""
    return PenaltyChoice(l2, math.nan, math.nan, "given in the spec")


def choose_penalty(noise_at: dict[float, float], curvature: float, effect: float, rule: str
                   ) -> PenaltyChoice:
    """The λ of ``noise_at`` (candidate λ → the proxy noise sd at λ) minimising (noise sd)² +
    (effect·λ/(λ + curvature))², with its proxies (module docstring). Computed in units of the
    (public, positive) effect — (noise sd/effect)² + (λ/(λ + curvature))², the same minimiser —
    so that no outcome unit underflows or overflows the squares (at outcome bounds of 1e-160 the
    squares of the noise sd were 0 for every λ and the rule picked the grid's first)."""
    best = min(noise_at, key=lambda lam: (noise_at[lam] / effect) ** 2
               + (lam / (lam + curvature)) ** 2)
    return PenaltyChoice(float(best), noise_at[best], curvature / (curvature + best), rule)


def propensity_penalty(box: BoxFeatures, epsilon: float, delta: float, m: int,
                       arms: int = 2) -> PenaltyChoice:
    """The default λ of :class:`DPLogistic` (or, for ``arms`` ≥ 3, of :class:`DPMultinomial`, over
    the penalties its solve can guarantee and at its sensitivity) on m rows at (ε, δ) (module
    docstring)."""
    mean_sq, var = _box_moments(box)
    noise: dict[float, float] = {}
    for lam in GRID:
        learner: DPLogistic | DPMultinomial = (
            DPLogistic(box, float(lam), epsilon, delta, m) if arms <= 2
            else DPMultinomial(box, float(lam), epsilon, delta, m, arms))
        if learner.problem() is None:
            sigma = analytic_gaussian_sigma(epsilon, delta, learner.sensitivity)
            noise[float(lam)] = sigma * math.sqrt(mean_sq)
    return choose_penalty(noise, 0.25 * var, PROPENSITY_EFFECT,
                   "argmin over λ of (noise sd of the logit)² + (1 logit × λ/(λ + I))², "
                   "covariates uniform on their box")


def outcome_penalty(box: BoxFeatures, y_bounds: tuple[float, float], epsilon: float,
                    delta: float, m: int) -> PenaltyChoice:
    """The default λ of :class:`DPRidgeArms` on m rows at (ε, δ) (module docstring)."""
    mean_sq, var = _box_moments(box)
    noise: dict[float, float] = {}
    for lam in GRID:
        learner = DPRidgeArms(box, float(lam), y_bounds, epsilon, delta, m)
        if learner.problem() is None:
            sigma = analytic_gaussian_sigma(epsilon, delta, learner.sensitivity)
            noise[float(lam)] = sigma * math.sqrt(mean_sq)
    effect = OUTCOME_EFFECT * (y_bounds[1] - y_bounds[0])
    return choose_penalty(noise, 0.5 * var, effect,
                   "argmin over λ of (noise sd of μ̂)² + (range/4 × λ/(λ + I))², covariates "
                   "uniform on their box")


def shrinkage_warnings(choices: dict[str, PenaltyChoice | None], details: dict[str, object],
                       tail: str = "") -> list[str]:
    """Record each chosen penalty and its kept share in ``details`` (the dry run prints them);
    return a warning (ending in ``tail``) for each that keeps less than half of a covariate's
    effect."""
    out = []
    for what, choice in choices.items():
        if choice is None or not math.isfinite(choice.kept):
            continue
        details[f"{what}_l2"] = choice.l2
        details[f"{what}_kept_share_of_effect"] = choice.kept
        if choice.kept < 0.5:
            out.append(
                f"the {what} model's penalty λ = {choice.l2:.3g} keeps only "
                f"{100 * choice.kept:.0f}% of a covariate's effect even if the covariates "
                "filled their bounds (less if they fill part of them): at this ε and n the "
                f"{what} model is mostly shrunk{tail}")
    return out
