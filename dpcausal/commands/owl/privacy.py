"""owl's privacy mechanism: the output perturbation of θ̂ (Algorithm 1, lines 4–7)."""

from __future__ import annotations

import math

from dpcausal.commands.owl.setup import OwlSetup
from dpcausal.errors import SpecError
from dpcausal.mechanisms import L2LaplaceMechanism


def mechanism(setup: OwlSetup, gamma: float, epsilon: float, n: int) -> L2LaplaceMechanism:
    """The output perturbation of θ̂ (Algorithm 1, lines 4–7).

    Notes
    -----
    Neighbouring relation: replace one row (one individual) of the training file; n is public.
    Sensitivity: with every ‖v_i‖ ≤ 1, 0 ≤ w_i ≤ W, |ℓ'| ≤ 1, the sum-form objective G is
    γ-strongly convex and replacing one row changes ∇G by at most 2W anywhere, so the exact
    minimisers differ by ≤ 2W/γ (Chaudhuri et al. 2011, Lemma 7; the paper's Corollary 1 with C = 0:
    propensities are design-known, not estimated on the data; the computed weights may exceed W
    by 6u·W, hence + 12u·W/γ). Whatever the solver returns is within the public distance
    D = (τ + A)/γ of the exact minimiser on each dataset (a certificate, or a fallback with a
    proven bound: :class:`dpcausal.solvers.erm_accuracy.ERMAccuracy`), so the released
    pre-noise vectors differ by ≤ (2W + 2(τ + A))/γ; no exit depends on which way it ended.
    Guarantee: pure ε-DP by the ℓ2-Laplace mechanism. Covers θ* and anything computed from θ*
    and public inputs (the rule, recommendations for *other* rows).
    """
    if not math.isfinite(2.0 * setup.weight_bound / gamma):
        raise SpecError(
            f"owl.gamma: γ = {gamma:g} with the weight bound W = {setup.weight_bound:g} gives an "
            "infinite sensitivity 2W/γ; use a larger owl.gamma or narrower bounds.outcome"
        )
    problem = setup.accuracy(gamma, n).problem()
    if problem is not None:
        raise SpecError(f"owl.gamma: {problem}")
    sensitivity = setup.sensitivity(gamma, n)
    return L2LaplaceMechanism(epsilon, sensitivity, setup.fmap.dim, stage="owl.theta")
