"""The public accuracy of cate's random-feature second stage (:func:`dpcausal.commands.cate.rff.
solve_rff`): the gradient rounding allowance, the tolerance τ the sensitivity adds, and the
guaranteed fallback's constants — functions of PUBLIC inputs only (n, 2m, λ0, L_w, the public
feature map), whatever the data and whichever way the solve ended.

J(w) = (1/n)Σ ρ_i ℓ_c(wᵀζ_i − φ_i) + λ0‖w‖² over the EXACT features ζ_i (‖ζ_i‖ = 1) is
μ = 2λ0-strongly convex and L-smooth with L = 2·max ρ + 2λ0 ≤ 2(1 + 8u) + 2λ0 (ℓ_c'' ≤ 2, ρ ≤ 1:
(1 − κ)² for R, 1 for DR). ‖∇J(0)‖ = ‖(1/n)Σ ρ_i ℓ_c′(−φ_i)ζ_i‖ ≤ L_w (``setup._lipschitz``: the
Huber bound 2c·sup ρ everywhere; the squared-loss bound at every |g| ≤ M_g, g = 0 included), so
the minimiser has ‖w*‖ ≤ ‖∇J(0)‖/μ ≤ R = L_w/(2λ0).

A solve ends in one of two ways, each within d* = 0.99·τ/(2λ0) of w* (:attr:`RffAccuracy.target`):

1. **the certificate** (:meth:`RffAccuracy.accepts`): ‖w̃‖ ≤ T = R(1 + 1/n)(1 + 1e-9) and the
   gradient ĝ summed by ``rff.exact_gradient`` has ‖ĝ‖ ≤ 0.99τ − ε_g (``stop_tol``), so ‖∇J(w̃)‖ ≤ 0.99τ and
   ‖w̃ − w*‖ ≤ d* by strong convexity;
2. **the guaranteed fallback** (``rff.guaranteed_descent``): projected gradient descent
   w ← P_R(w − s·ĝ), s = 2/(L + μ), for the public N = :attr:`RffAccuracy.steps` (Nesterov Thm
   2.1.12/2.1.15, ``numerics.descent_contraction_gap``): D_{k+1} ≤ q·D_k + s·ε_g + r, D_0 ≤ 2R, so
   D_N ≤ q^N·2R + floor ≤ d*/2 + d*/2, because N makes q^N·2R ≤ d*/2 and τ ≥ 4A with
   A ≥ 2λ0·floor·1.03 gives floor ≤ d*/2.

Two neighbours' solves are then within 2d* < τ/λ0 of their minimisers, so Δ = L_w/(λ0 n) + τ/λ0
(:attr:`dpcausal.commands.cate.setup.CateSetup.rkhs_sensitivity`) holds for either path.

Outcome scale. Every bound here is proportional to L_w, and every 2-norm the certificate and the
fallback's projection take is computed as ‖s·x‖/s with the public power of two s = 2^−e,
L_w = m·2^e (:attr:`RidgeSolveTerms.scale`): exactly ``np.linalg.norm(x)`` where its squares
stay in float64's normal range, and still within its relative rounding bound where they would
not (unscaled, a gradient ≳ 1.3e154 overflowed to ∞, refusing every iterate, and one ≲ 1e-154
underflowed towards 0, accepting iterates far from w*: a false certificate at outcome scales
≲ 1e-158). The line search scales its objective by s² the same way (``rff._scaled_objective``);
it never enters the certificate. The rounding model of ε_g and r still assumes the gradient's
terms are normal floats (outcome scales above ~1e-290).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.numerics import (
    SAFETY,
    SUM_TERMS,
    UNIT_ROUNDOFF,
    bound_scale_problem,
    descent_contraction_gap,
    descent_steps,
    gamma,
    objective_scale,
    scaled_norm,
)

FloatArray = npt.NDArray[np.float64]
SOLVER_REL_TOL = 1e-6
"""The smallest tolerance, 1e-6·L_w/n on ‖∇J‖ (raised to 4A when rounding needs it)."""
MAX_FALLBACK_STEPS = 100_000
"""The plan refuses a ridge so small that the fallback would need more projected-gradient passes."""
MAX_RELATIVE_SLACK = 1.0
"""The plan refuses when the solver slack τ/λ0 would exceed the sensitivity's L_w/(λ0 n) itself."""


def feature_error(omega: FloatArray) -> float:
    """e_z ≥ ‖ẑ − ζ‖ for every box-scaled row s ∈ [0, 1]^q (ẑ the computed ``transform``): each
    projection sᵀΩ_j errs by ≤ γ_q·‖Ω_j‖₁·(1 + 4u) (any summation order), cos/sin are
    1-Lipschitz and accurate to a few ulps, the division by √m adds two roundings: per entry
    ≤ (γ_q·max_j ‖Ω_j‖₁ + 4u)/√m, over 2m entries √2 times that; times the safety factor."""
    q = max(int(omega.shape[0]), 1)
    l1 = float(np.max(np.sum(np.abs(omega), axis=0))) if omega.size else 0.0
    return SAFETY * math.sqrt(2.0) * (gamma(q) * l1 * (1.0 + 4.0 * UNIT_ROUNDOFF)
                                      + 4.0 * UNIT_ROUNDOFF)


class RidgeSolveTerms:
    """The terms both second-stage certificates share (:class:`RffAccuracy`,
    :class:`dpcausal.commands.cate.krr_accuracy.KrrAccuracy`): J is μ = 2λ0-strongly convex and
    L-smooth with L = 2(1 + 8u) + 2λ0 ≥ the largest eigenvalue of ∇²J, so gradient steps of
    s = 2/(L + μ) contract by q; each subclass supplies its rounding allowances ε_g
    (:attr:`grad_allowance`) and r (:attr:`update_allowance`), from which the tolerance τ, the
    target d* and the certificate's stop test follow the same way (module Notes)."""

    n: int
    lam0: float
    lipschitz_w: float

    @property
    def grad_allowance(self) -> float:
        """ε_g: a public bound on the computed gradient's error (each certificate's own)."""
        raise NotImplementedError

    @property
    def update_allowance(self) -> float:
        """r: a public bound on the rounding of one fallback update (each certificate's own)."""
        raise NotImplementedError

    def scale_problem(self) -> str | None:
        """Why L_w is beyond a certified float64 solve (below 2^-1000 or not finite: no power of
        two :attr:`scale` to keep the certificate's squares in range), or None."""
        problem = bound_scale_problem(self.lipschitz_w, "the second stage's Lipschitz bound L_w")
        return None if problem is None else f"bounds.outcome: {problem}"

    @property
    def scale(self) -> float:
        """The public power of two 2^−e, L_w = m·2^e (:func:`~dpcausal.numerics.objective_scale`),
        by which a solver scales whatever it squares: line-search objectives and norms."""
        return objective_scale(self.lipschitz_w)

    @property
    def radius(self) -> float:
        """R = L_w/(2λ0) ≥ the minimiser's norm (rounded up)."""
        return self.lipschitz_w / (2.0 * self.lam0) * (1.0 + 4.0 * UNIT_ROUNDOFF)

    @property
    def strong(self) -> float:
        """μ = 2λ0."""
        return 2.0 * self.lam0

    @property
    def smoothness(self) -> float:
        """L = 2(1 + 8u) + 2λ0."""
        return 2.0 * (1.0 + 8.0 * UNIT_ROUNDOFF) + 2.0 * self.lam0

    @property
    def step(self) -> float:
        """s ≤ 2/(L + μ) (rounded down)."""
        return 2.0 / (self.smoothness + self.strong) * (1.0 - 4.0 * UNIT_ROUNDOFF)

    @property
    def gap(self) -> float:
        """1 − q, the contraction of one exact (projected) step (rounded down)."""
        return descent_contraction_gap(self.step, self.strong, self.smoothness)

    @property
    def floor(self) -> float:
        """(s·ε_g + r)/gap: the fallback's distance bound after infinitely many steps."""
        return (self.step * self.grad_allowance + self.update_allowance) / self.gap * (1.0 + 1e-9)

    @property
    def allowance(self) -> float:
        """A = 1.03·max(ε_g, 2λ0·floor)."""
        return 1.03 * max(self.grad_allowance, self.strong * self.floor)

    @property
    def tol(self) -> float:
        """τ = max(1e-6·L_w/n, 4A): the tolerance on ‖∇J‖ the sensitivity adds as τ/λ0."""
        return max(SOLVER_REL_TOL * self.lipschitz_w / self.n, 4.0 * self.allowance)

    @property
    def target(self) -> float:
        """d* = 0.99·τ/(2λ0): both ways a solve ends are within d* of the minimiser."""
        return 0.99 * self.tol / self.strong

    @property
    def stop_tol(self) -> float:
        """The certificate's bound on the computed gradient's norm: 0.99τ − ε_g (≥ 2.9A > 0)."""
        return 0.99 * self.tol - self.grad_allowance


@dataclass(frozen=True)
class RffAccuracy(RidgeSolveTerms):
    """The public certificate and fallback of one random-feature second-stage solve.

    Parameters
    ----------
    n, dim
        Rows of the second half (public) and p = 2m.
    lam0, lipschitz_w
        The ridge λ0 > 0 and L_w.
    squared
        The squared loss (else Huber).
    feature_error
        e_z (:func:`feature_error`).
    """

    n: int
    dim: int
    lam0: float
    lipschitz_w: float
    squared: bool
    feature_error: float

    @property
    def w_bound(self) -> float:
        """T = R(1 + 1/n)(1 + 1e-9) ≥ ‖w‖ at every point whose gradient is computed: the
        fallback's points lie in the ball R, and a certified point is within d* ≤ R/n of w*
        (d* = 0.99τ/(2λ0) and the plan refuses τ > L_w/n, :meth:`problem`)."""
        return self.radius * (1.0 + 1.0 / self.n) * (1.0 + 1e-9)

    @property
    def coefficient_bound(self) -> float:
        """C ≥ ρ_i|ℓ_c′(r_i)| at every ‖w‖ ≤ T: L_w (Huber); L_w + 2T(1 + e_z)
        (squared: ρ|2r| ≤ 2|ζᵀw| + ρ|2φ| and ρ|2φ| ≤ L_w, the bound at g = 0)."""
        if not self.squared:
            return self.lipschitz_w
        return self.lipschitz_w + 2.0 * self.w_bound * (1.0 + self.feature_error)

    @property
    def grad_allowance(self) -> float:
        """ε_g ≥ ‖ĝ − ∇J(w)‖ for every ‖w‖ ≤ T, ĝ summed by ``rff.exact_gradient``.

        Per row, with W = T(1 + e_z) ≥ ‖ẑ‖‖w‖ and C (:attr:`coefficient_bound`): the margin
        ẑᵀw − φ errs from ζᵀw − φ by ≤ (γ_p + e_z)·W + u|r|; ℓ_c′ is 2-Lipschitz and the clip
        absorbs the relative term outside [−2c, 2c] (when the absolute error exceeds c/2 the
        clip's difference ≤ 2c is ≤ 4 times it), so ρ|ℓ̂′ − ℓ′| ≤ 10(γ_p + e_z)W + 3u·C, and the
        product ρ·ℓ′ two more roundings (2u·C); the vector ĉẑ errs from cζ by ≤ that + C·e_z.
        The row sum, in blocks of ≤ ``SUM_CHUNK`` added exactly rounded, errs by
        ≤ γ_{SUM_TERMS}·nC(1 + e_z); the division by n, the ridge term 2λ0w and the addition by
        ≤ u(C(1 + e_z) + 6λ0·T)."""
        u, ez, c = UNIT_ROUNDOFF, self.feature_error, self.coefficient_bound
        big_w = self.w_bound * (1.0 + ez)
        rows = 10.0 * (gamma(self.dim + 2) + ez) * big_w + 5.0 * u * c + c * ez
        sums = gamma(SUM_TERMS) * c * (1.0 + ez)
        tail = u * (c * (1.0 + ez) + 6.0 * self.lam0 * self.w_bound)
        return SAFETY * (rows + sums + tail)

    @property
    def update_allowance(self) -> float:
        """r ≥ the rounding of one update w − s·ĝ and its projection onto the ball R: ‖w‖ ≤ R(1 +
        (p + 6)u), ‖s·ĝ‖ ≤ s(L·2R + ε_g) ≤ 5R, each coordinate's product and difference ≤ 2u of
        ≤ 6R, the projection's norm and scaling ≤ (p + 6)u·R."""
        return SAFETY * (self.dim + 20.0) * UNIT_ROUNDOFF * self.radius

    @property
    def steps(self) -> int:
        """N with q^N·2R ≤ d*/2: the fallback's public number of projected gradient steps."""
        return descent_steps(2.0 * self.radius, 0.5 * self.target, self.gap)

    def accepts(self, w: FloatArray, grad: FloatArray) -> bool:
        """The certificate at w̃ given ĝ (norms inflated for their own rounding).

        Notes
        -----
        The norms are computed as ‖s·x‖/s with s = :attr:`scale` (:func:`~dpcausal.numerics.
        scaled_norm`). Multiplying by the power of two s is exact, so wherever ‖x‖'s squares
        neither overflow nor underflow this is the float ``np.linalg.norm(x)`` gives (the same
        decision, bit for bit); s·T and s·(0.99τ − ε_g) are of order 1/λ0 and 1e-6/n or more, so
        the scaled squares stay far inside float64's range at any outcome scale, and the norm's
        relative error stays ≤ (p + 2)u (p squares, p − 1 additions, the square root): half the
        inflation ``rel``. Before, at ‖x‖ ≳ 1.3e154 the squares overflowed, the norm was ∞ and the
        test refused every iterate (the fallback then ran; safe but slow). Nothing but the
        rounding of the norm depends on s, and s depends on the public L_w only."""
        rel = 1.0 + 2.0 * (self.dim + 2) * UNIT_ROUNDOFF
        return bool(scaled_norm(w, self.scale) * rel <= self.w_bound
                    and scaled_norm(grad, self.scale) * rel <= self.stop_tol)

    def problem(self) -> str | None:
        """Why float64 cannot give this solve a useful guarantee in a sane time (checked by the
        plan, on public inputs only), or None."""
        if (scale := self.scale_problem()) is not None:
            return scale
        try:
            slack, steps = self.tol, self.steps
        except (ValueError, ZeroDivisionError, OverflowError):
            slack, steps = math.inf, MAX_FALLBACK_STEPS + 1
        if not slack <= MAX_RELATIVE_SLACK * self.lipschitz_w / self.n:
            return (f"cate.ridge: λ0 = {self.lam0:.3g} with {self.n} second-stage rows and "
                    f"{self.dim} random features is beyond a float64 solve with a guaranteed "
                    "accuracy (its rounding allowance would more than double the sensitivity); "
                    "raise cate.ridge, lower cate.rff_dim, or use fewer rows")
        if steps > MAX_FALLBACK_STEPS:
            return (f"cate.ridge: λ0 = {self.lam0:.3g} is too small for the second stage's "
                    f"guaranteed fallback ({steps} projected-gradient passes over {self.n} rows, "
                    f"more than {MAX_FALLBACK_STEPS}); raise cate.ridge")
        return None
