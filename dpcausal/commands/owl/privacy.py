"""owl's privacy mechanism: the output perturbation of θ̂ (Algorithm 1, lines 4–7)."""

from __future__ import annotations

import math

from dpcausal.commands.owl.setup import OwlSetup
from dpcausal.errors import SpecError
from dpcausal.mechanisms import L2LaplaceMechanism


def mechanism(setup: OwlSetup, gamma: float, epsilon: float) -> L2LaplaceMechanism:
    """The output perturbation of θ̂ (Algorithm 1, lines 4–7).

    Notes
    -----
    Neighbouring relation: replace one row (one individual) of the training file; n is public.
    Sensitivity: with every ‖v_i‖ ≤ 1, 0 ≤ w_i ≤ W, |ℓ'| ≤ 1, the sum-form objective G is
    γ-strongly convex and replacing one row changes ∇G by at most 2W anywhere, so the exact
    minimisers differ by ≤ 2W/γ (Chaudhuri et al. 2011, Lemma 7; the paper's Corollary 1 with C = 0:
    propensities are design-known, not estimated on the data). The solver stops within τ/γ of the
    exact minimiser on each dataset, so the released pre-noise vectors differ by ≤ (2W + 2τ)/γ.
    Guarantee: pure ε-DP by the ℓ2-Laplace mechanism. Covers θ* and anything computed from θ*
    and public inputs (the rule, recommendations for *other* rows).
    """
    sensitivity = setup.sensitivity(gamma)
    if not math.isfinite(sensitivity):
        raise SpecError(
            f"owl.gamma: γ = {gamma:g} with the weight bound W = {setup.weight_bound:g} gives an "
            "infinite sensitivity 2W/γ; use a larger owl.gamma or narrower bounds.outcome"
        )
    return L2LaplaceMechanism(epsilon, sensitivity, setup.fmap.dim, stage="owl.theta")
