"""The public accuracy of two-stage's stage-1 dual solve (ipw-logit, ebw): the gradient rounding
allowance, the solver slack η the stability bounds add, and the guaranteed fallback's constants.

f(λ) = (the dual's data term) + (ρ/2)‖λ‖² over the ball ‖λ‖ ≤ R is ρ-strongly convex. Its
Hessian's data part is ≤ max(1, dim/4) in operator norm (ipw-logit: (1/n)Σp(1 − p)xxᵀ with
p(1 − p) ≤ ¼ and ‖x‖² ≤ dim; ebw: the covariance of the rows b under the softmax, ≤ E‖b‖² ≤ 1),
so f is L-smooth with L = max(1, dim/4) + ρ, and ‖∇f(λ)‖ ≤ G = max(√dim, 3) + ρR on the ball
(ipw-logit: ‖(1/n)Σ(p − a)x‖ ≤ √dim; ebw: ‖Σp b‖ + ‖target‖ ≤ 1 + √2). All public.

The solve ends in one of two ways, each with ‖λ̃ − λ̂‖ ≤ η/2 (λ̂ the exact minimiser), so the
stability bounds, which add η, hold for whatever λ̃ is used and no exit depends on the data:

1. the certificate (``dual._certified``): a candidate whose rigorous ``certified_distance`` is
   ≤ η/2;
2. the guaranteed fallback (``dual.guaranteed_descent``), run when no candidate certifies:
   projected gradient descent λ ← P_R(λ − s·ĝ), s = 2/(L + ρ) rounded down, for a PUBLIC number
   N of steps (:attr:`DualAccuracy.steps`). Each exact step contracts the distance to λ̂ by
   q = 1 − gap (``numerics.descent_contraction_gap``; the projection onto the ball, which holds
   λ̂ = P_R(λ̂ − s∇f(λ̂)), is nonexpansive). With the computed gradient (error ≤ ε_g) and the
   rounding of the update and of the projection (≤ r, :attr:`DualAccuracy.update_allowance`):
   D_{k+1} ≤ q·D_k + s·ε_g + r, D_0 ≤ 2R, so D_N ≤ q^N·2R + (s·ε_g + r)/gap ≤ η/4 + η/4, because
   N makes q^N·2R ≤ η/4 and η ≥ 4·(s·ε_g + r)/gap (:attr:`DualAccuracy.floor`,
   :func:`certificate_slack`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpcausal.numerics import SAFETY, UNIT_ROUNDOFF, descent_contraction_gap, descent_steps

LOGIT_LAMBDA_SLACK = 1e-6
"""ipw-logit and ebw: the smallest solver slack η (``certificate_slack`` raises it above the public
rounding floors). The distance of the λ̃ used to the exact λ̂ is ≤ η/2; the stability bounds add
η to ‖λ̂(D) − λ̂(D′)‖ (calibration.py)."""


def gradient_rounding_allowance(n: int, dim: int, radius: float, ridge: float) -> float:
    """A public bound ε_g on ‖ĝ − ∇f(x)‖ for the float64 gradients of the ipw-logit and ebw duals
    at every ‖x‖ ≤ R.

    Model (standard floating-point model, u = 2⁻⁵³; library exp/expit/logsumexp accurate to a few
    ulps): each gradient component is a sum of ≤ n + 1 terms whose absolute values sum to ≤ 2
    (logit: |x_ij| ≤ 1, |p_i − a_i| ≤ 1; ebw: Σp_i|b_ij| ≤ 1 and |target_j| ≤ κ ≤ 1), and any
    summation order errs by ≤ γ_n·Σ|terms| ≤ 2(n+1)u·2; the logits z = ⟨row, λ⟩ err by ≤ γ_d·R·√d
    (rows have ‖·‖ ≤ √d), moving p_i by ≤ that (logit: σ′ ≤ ¼; ebw: relative, plus the
    logsumexp's own (2R + log n + 8)u); the ridge term ρλ_j by ≤ 2uρR. Everything is multiplied by
    4 for safety and by √dim for the norm. A function of public inputs only.

    Notes
    -----
    Engines (dpcausal/commands/two_stage/engine.py) sum the same terms per batch and add the batch
    sums on the client. That is just another summation tree over the same ≤ n + 1 terms, and γ_k·Σ|terms|
    (k = the tree's depth ≤ n) bounds EVERY tree, so the allowance covers any partitioning. The
    ebw engine pass writes p_i = e^{z_i − m_b}·e^{m_b − M}/S (m_b the batch max, M the overall max)
    instead of e^{z_i − L}. With |z_i| ≤ ‖λ‖ ≤ R at the feasible points the certificate evaluates,
    each exponential's argument errs by ≤ 2Ru, so p_i errs relatively by ≤ (4R + 5)u. The
    in-memory logsumexp's error is ≤ (2R + log n + 8)u, and the allowance's per-component
    4R + 2 log n + 16 covers both, before the ×4 safety factor. S is a sum of n positive terms in
    both paths (relative γ_n); the factor 2 in 4(n + 1) covers it.
    """
    u = UNIT_ROUNDOFF
    per_comp = (4.0 * (n + 1) + 2.0 * dim * radius * math.sqrt(dim) + 4.0 * radius
                + 2.0 * math.log(max(n, 2)) + 16.0 + 2.0 * ridge * radius)
    return 4.0 * math.sqrt(dim) * u * per_comp


@dataclass(frozen=True)
class DualAccuracy:
    """The public constants of the guaranteed fallback of one stage-1 dual (module docstring).

    Parameters
    ----------
    n, dim
        Rows (public) and the dimension of λ.
    radius, ridge
        The ball radius R and the ridge ρ > 0.
    """

    n: int
    dim: int
    radius: float
    ridge: float

    @property
    def smoothness(self) -> float:
        """L = max(1, dim/4) + ρ ≥ the largest eigenvalue of ∇²f on the ball."""
        return max(1.0, self.dim / 4.0) + self.ridge

    @property
    def grad_bound(self) -> float:
        """G = max(√dim, 3) + ρR ≥ ‖∇f(λ)‖ on the ball."""
        return max(math.sqrt(self.dim), 3.0) + self.ridge * self.radius

    @property
    def grad_allowance(self) -> float:
        """ε_g (:func:`gradient_rounding_allowance`)."""
        return gradient_rounding_allowance(self.n, self.dim, self.radius, self.ridge)

    @property
    def step(self) -> float:
        """s ≤ 2/(L + ρ) (rounded down)."""
        return 2.0 / (self.smoothness + self.ridge) * (1.0 - 4.0 * UNIT_ROUNDOFF)

    @property
    def gap(self) -> float:
        """1 − q, the contraction of one exact projected step (rounded down)."""
        return descent_contraction_gap(self.step, self.ridge, self.smoothness)

    @property
    def update_allowance(self) -> float:
        """r ≥ the rounding of one update λ − s·ĝ and of its projection ``dual._inside``: each
        coordinate's product and difference ≤ 2u of |λ_j| + |sĝ_j| (‖λ‖ ≤ R, ‖sĝ‖ ≤ s(G + ε_g)),
        the projection's norm (8u), scaling (3u) and inward margin (20u) ≤ 31u·R; (dim + 40)u
        covers both, times the safety factor."""
        move = self.step * (self.grad_bound + self.grad_allowance)
        return SAFETY * (self.dim + 40.0) * UNIT_ROUNDOFF * (self.radius + 2.0 * move)

    @property
    def floor(self) -> float:
        """(s·ε_g + r)/gap: the fallback's distance bound after infinitely many steps."""
        return (self.step * self.grad_allowance + self.update_allowance) / self.gap * (1.0 + 1e-9)

    @property
    def steps(self) -> int:
        """N with q^N·2R ≤ η/4: the fallback's public number of projected gradient steps."""
        eta = certificate_slack(self.n, self.dim, self.radius, self.ridge)
        return descent_steps(2.0 * self.radius, 0.25 * eta, self.gap)


def certificate_slack(n: int, dim: int, radius: float, ridge: float) -> float:
    """η: the public solver slack of ipw-logit/ebw (the bounds add η to ‖λ̂(D) − λ̂(D′)‖).

    η = max(LOGIT_LAMBDA_SLACK, 16·F, 4·floor) with the certificate's public rounding floor
    F = R·sqrt(80u) + 4ε_g/ρ: the value ``dual.certified_distance`` returns at a float point
    adjacent to the exact minimiser is ≤ F (the first term bounds sqrt(R² − r_lo²), the tangential
    ambiguity of a point certified inside the ball by a margin R − r_lo ≤ 40uR (``dual._inside``);
    the second the gradient rounding ε_g over ρ, counted twice), and the guaranteed fallback's
    floor (:attr:`DualAccuracy.floor`): the certificate ≤ η/2 has an 8× margin over F, and the
    fallback ends within η/4 + floor ≤ η/2 (docs/proofs/two_stage_weights.md §5d).
    """
    floor = radius * math.sqrt(80.0 * UNIT_ROUNDOFF) + 4.0 * gradient_rounding_allowance(
        n, dim, radius, ridge) / ridge
    fallback = DualAccuracy(n, dim, radius, ridge).floor
    return max(LOGIT_LAMBDA_SLACK, 16.0 * floor, 4.0 * fallback)
