"""owl's unit-free penalty λ and the public rule that picks it (``lambda: total``, the default).

**Unit-free λ.** The weights wᵢ = B′ᵢ/π carry the outcome's units, so the paper's sum-form
penalty γ of Σ wᵢℓ(Aᵢθᵀvᵢ) + (γ/2)‖θ‖² does too: γ = 75 is strong on an outcome in [−8, 8] and
vanishing on one in dollars. owl therefore takes λ in the averaged, weight-normalised objective

    (1/n) Σ (wᵢ/W) ℓ(Aᵢθᵀvᵢ) + (λ/2)‖θ‖²,   i.e.   γ = λ·n·W,

W = (U − L + η)/π_min the public weight bound. Its minimiser is the same θ̂, its sensitivity is
Δ = (2W + 2τ)/γ = (2 + 2·10⁻⁶)/(nλ) (τ = 10⁻⁶·W the solver's slack), and wᵢ/W does not change
when the outcome and its bounds (and η, a share of the range by default) are rescaled: $ ↔ k$
leaves θ̂, the noise, hence the release's law, unchanged.

**The default rule.** λ is the smallest penalty whose predicted noise is at most half the
hinge's unit margin:

    λ = clip(h(1)/κ, 10⁻⁸, 10²),   κ = ½,

h(λ) = h(1)/λ the plan's (1 − α) noise half-width of the margin v(x)·θ of a row with ‖v(x)‖ = 1
(score units, exactly what the dry run prints). So the dry run's margin half-width is κ by
construction; ``accuracy.max_halfwidth`` below ½ (for the margin) becomes κ: the smallest λ that
meets the user's limit, more shrinkage for less noise. Every larger λ only shrinks the fit more (the
noise falls like 1/λ, the shrinkage grows), every smaller one lets the noise exceed κ on rows the
hinge fits at margin 1. As nε → ∞, λ → 0: the non-private weighted-hinge (OWL) fit. At small nε
λ is large and the fit tends to the weighted mean-difference rule θ ∝ g = (1/n) Σ (wᵢ/W) Aᵢ± vᵢ,
the least noisy rule there is (once λ exceeds about ‖g‖ every margin is below the hinge). n, ε,
the dimension and α are all it reads; it costs no ε. κ is calibrated, not derived: on the
paper's owl simulation (configs/owl.yaml's data) and the NSW-shaped dollar trial of
benchmarks/defaults_dgp.py it lands near where a λ sweep's value peaks at ε = 1 … 20
(benchmarks/RESULTS.md, "Defaults").

**Shrinkage warning.** The dry run states λ/(λ + I), I = 1/200 a public proxy for ‖g‖, and warns
when it exceeds ½ (the fit then leans towards the mean-difference rule).

**Known limit.** ‖g‖ depends on the data (the effect's size relative to the outcome's bounds):
where it is far below I the rule shrinks towards the mean-difference rule at moderate nε, where
it is far above, it keeps more noise than needed. A public file (``owl.tune``) can choose γ
instead; a private estimate of ‖g‖ (sensitivity 2/n) is the natural ``lambda: auto``, not built.
At the ends (nε small: every λ is noise-dominated; nε → ∞: λ → 0) the rule is right whatever the
data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpcausal.commands.owl.privacy import mechanism
from dpcausal.commands.owl.rule import rule_noise
from dpcausal.commands.owl.setup import OwlSetup

KAPPA = 0.5
"""κ: the largest predicted margin noise the default λ allows (module docstring)."""
LAMBDA_RANGE = (1e-8, 1e2)
"""The default λ is clipped to this range."""
CURVATURE = 0.005
"""I: the public proxy for ‖g‖, where the fit turns into the mean-difference rule (module doc)."""
SHRINK_WARN = 0.5
"""Above this shrinkage share the dry run warns."""


def gamma_of(lam: float, n: int, setup: OwlSetup) -> float:
    """γ = λ·n·W: the sum-form penalty the solver and Δ = 2W/γ use."""
    return lam * n * setup.weight_bound


def shrinkage(lam: float) -> float:
    """λ/(λ + I): the share of a margin the penalty takes away (public proxy)."""
    return lam / (lam + CURVATURE)


def margin_halfwidth(setup: OwlSetup, lam: float, *, n: int, epsilon: float,
                     alpha: float) -> float:
    """h(λ): the plan's (1 − α) margin half-width (a row with ‖v(x)‖ = 1) at λ."""
    event = mechanism(setup, gamma_of(lam, n, setup), epsilon, n).event()
    return rule_noise(event, alpha).margin_halfwidth_max(setup.fmap.dim)


@dataclass(frozen=True)
class LambdaChoice:
    """The λ the rule chose and the public quantities it chose it by."""

    lam: float
    margin_halfwidth: float
    shrinkage: float

    def to_dict(self) -> dict[str, Any]:
        """The plan's record."""
        return {"lambda": self.lam, "predicted_margin_halfwidth": self.margin_halfwidth,
                "shrinkage_proxy": self.shrinkage, "rule": RULE}


RULE = ("λ = clip(h(1)/κ, 1e-8, 1e2), κ = 1/2: the smallest λ whose (1 − α) margin half-width "
        "h(λ) = h(1)/λ (a row with ‖v‖ = 1) is at most κ")


def choose_lambda(setup: OwlSetup, *, n: int, epsilon: float, alpha: float,
                  kappa: float = KAPPA) -> LambdaChoice:
    """The default rule (module docstring); ``kappa``: the margin half-width to meet (the plan
    passes ``accuracy.max_halfwidth`` when it is below ½ and refers to the margin)."""
    h1 = margin_halfwidth(setup, 1.0, n=n, epsilon=epsilon, alpha=alpha)  # h(λ) = h(1)/λ
    lam = min(max(h1 / kappa, LAMBDA_RANGE[0]), LAMBDA_RANGE[1])
    return LambdaChoice(lam, h1 / lam, shrinkage(lam))


def shrinkage_warning(lam: float) -> str | None:
    """The dry run's warning when λ takes more than half of a margin (None otherwise)."""
    s = shrinkage(lam)
    if s <= SHRINK_WARN:
        return None
    return (f"shrinkage: λ = {lam:.3g} can take about {100 * s:.0f}% of a margin of the "
            "unpenalised weighted-hinge fit (public proxy): the released rule leans towards the "
            "weighted mean-difference rule (treat all or none when the features are all "
            "positive); more ε or rows let the rule pick a smaller λ")
