"""DPSC's ridge penalty λ: the public rules and the shrinkage they cause (issue #17).

λ acts on the donors mapped into [−1, 1] by the public bounds, so every rule here is unit-free:
rescaling the outcome and its bounds together leaves the mapped panel, hence λ, unchanged.

``total`` (default) picks λ from a public grid relative to T0 to minimise a public proxy of the
total error of the counterfactual, in mapped units: the plan's bound on the privacy noise's RMS
per post period (spec §5.5/§5.7, it falls as λ grows) plus the shrinkage of a donor direction at
the bounds' magnitude, λ/(2T0 + λ) (it grows with λ). A direction of X_pre with squared singular
value σ² is shrunk by the factor (λ/2)/(σ² + λ/2); one donor at the bounds' magnitude has
σ² = T0, so λ/(2T0 + λ) is the least shrinkage any single donor can suffer — donors inside the
bounds are shrunk more. With no noise (ε → ∞) the rule takes the smallest λ of the grid (nearly
least squares); at a small ε it takes a large one (the noise dominates). ``T0`` is the paper's
choice, kept for reproduction: it can shrink the effect enough to flip its sign (issue #17).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from dpcausal.commands.synth_control import dpsc
from dpcausal.learners.rounding import cholesky_completes, gamma

GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
"""The ``total`` rule's candidates, as multiples of T0."""


def is_safe(lam: float, n: int, t0: int) -> bool:
    """Whether a float64 Cholesky solve of the ridge (X_preX_preᵀ + (λ/2)I, entries of X in
    [−1, 1], norm ≤ nT0) is guaranteed to complete on any data (issue #13)."""
    p = min(n, t0)
    slack = gamma(max(n, t0) + 1) * n * t0  # rounding of the computed Gram matrix
    return cholesky_completes(p, n * t0 + lam / 2.0 + slack, lam / 2.0 - slack)


def shrinkage(lam: float, t0: int) -> float:
    """λ/(2T0 + λ): the shrinkage factor of one donor direction at the bounds' magnitude."""
    return lam / (2.0 * t0 + lam)


@dataclass(frozen=True, slots=True)
class PenaltyChoice:
    """The λ of a plan and why."""

    lam: float
    rule: str
    noise_rms: float | None = None
    """The plan's bound on the noise RMS per post period at this λ (mapped units; ``total``)."""


def noise_rms(sensitivity_mode: Literal["tight", "paper"], step2: dpsc.Step2Kind, n: int,
              t0: int, h: int, lam: float, eps1: float, eps2: float) -> float:
    """The public bound on the RMS privacy noise per post period (mapped units) at λ."""
    sens, _ = dpsc.coefficient_sensitivity(sensitivity_mode, n, t0, lam)
    coef = dpsc.coefficient_mechanism(eps1, sens, n)
    post = dpsc.post_mechanism(step2, eps2, n, h)
    return math.sqrt(dpsc.public_error_bound(n, t0, h, lam, dpsc.coefficient_noise_variance(coef),
                                             dpsc.post_noise_variance(post)))


def choose(rule: float | str, sensitivity_mode: Literal["tight", "paper"],
           step2: dpsc.Step2Kind, n: int, t0: int, h: int, eps1: float,
           eps2: float) -> PenaltyChoice:
    """λ from the spec's rule (a number, ``T0`` or ``total``), public inputs only."""
    if rule == "T0":
        return PenaltyChoice(float(t0), "T0 (the paper's choice; can shrink the effect a lot)")
    if rule != "total":
        return PenaltyChoice(float(rule), "spec")
    best: PenaltyChoice | None = None
    best_total = math.inf
    for factor in GRID:
        lam = factor * t0
        if not is_safe(lam, n, t0):
            continue
        rms = noise_rms(sensitivity_mode, step2, n, t0, h, lam, eps1, eps2)
        total = rms + shrinkage(lam, t0)
        if total < best_total:
            best_total = total
            best = PenaltyChoice(lam, f"total: {factor:g}·T0 minimises noise RMS bound + "
                                      "shrinkage λ/(2T0 + λ) over the public grid", rms)
    if best is None:  # no grid point is safe: the largest one, which check_lambda will judge
        return PenaltyChoice(GRID[-1] * t0, "total: the grid's largest λ")
    return best


def shrinkage_warning(choice: PenaltyChoice, t0: int) -> str:
    """What the dry run says about the shrinkage λ causes (public inputs only)."""
    lam = choice.lam
    one = shrinkage(lam, t0)
    text = (f"λ = {lam:.4g} shrinks a donor direction with mapped pre-period energy σ² by the "
            f"factor λ/(2σ² + λ): {one:.0%} for one donor at the bounds' magnitude (σ² = T0), "
            f"{lam / (t0 / 2.0 + lam):.0%} for one at half of it")
    if choice.rule.startswith("total") and one > 0.5:
        return (text + "; the rule chose it because at this ε the privacy noise would cost more "
                "than the shrinkage: DPSC_out cannot give a useful counterfactual here (see the "
                "predicted half-width; method: capped can)")
    if one > 0.2:
        return text + ("; a fit shrunk this much can understate the effect or flip its sign "
                       "(lambda: total, the default, weighs this against the noise)")
    return text
