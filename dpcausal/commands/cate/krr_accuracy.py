"""The public accuracy of cate's exact-kernel second stage (:func:`dpcausal.commands.cate.krr.
fit_krr`): the certificate, the tolerance τ the sensitivity adds, and the guaranteed fallback's
constants — functions of PUBLIC inputs only (n, q, h, λ0, L_w, the loss, float64's u), whatever the
data and whichever way the solve ended.

J(g) = (1/n)Σ ρ_i ℓ(g(s_i) − φ_i) + λ0‖g‖²_ℋ over the RKHS ℋ of the EXACT kernel k0 (the computed
Gram K̂ is within e_K of K entrywise, :attr:`KrrAccuracy.kernel_error`). With
g = Σ_j α_j k0(·, s_j): ∇J(g) = Σ_j v_j k0(·, s_j), v = ρℓ′(Kα − φ)/n + 2λ0α, and since
‖k0(s, ·)‖_ℋ = 1, ‖Σ_j e_j k0(·, s_j)‖_ℋ ≤ ‖e‖₁ for every coefficient vector e. J is μ = 2λ0-strongly
convex and L-smooth in ℋ with L = 2·sup ρ + 2λ0 ≤ 2(1 + 8u) + 2λ0 (ℓ′ is 2-Lipschitz,
(1/n)Σ‖k0(s_i, ·)‖² = 1), and ‖∇J(0)‖ ≤ max ρ|ℓ′(−φ)| ≤ L_w (``setup._lipschitz``: the Huber bound
2c·sup ρ everywhere, the squared-loss bound at g = 0), so ‖g*‖_ℋ ≤ R = L_w/(2λ0). Stationarity
v = 0 gives α*_j = −ρ_jℓ′_j/(2nλ0), so |α*_j| ≤ C/(2nλ0) with C ≥ ρ|ℓ′| (Huber: L_w; squared:
L_w + 2T at every point with |g(s)| ≤ T = 2R, :attr:`g_bound`).

A solve ends in one of two ways, each within d* = 0.99·τ/(2λ0) of g* in ℋ (:attr:`target`):

1. **the certificate** (:meth:`KrrAccuracy.accepts`): ‖α̃‖₁ ≤ A₁, for the squared loss
   max|f̂| + ε_f ≤ T, and ‖v̂‖₁ ≤ 0.99τ − ε_g (``stop_tol``). Then ‖∇J(g̃)‖_ℋ ≤ ‖v‖₁ ≤ 0.99τ and
   ‖g̃ − g*‖_ℋ ≤ d*. (The ℋ-norm √(vᵀKv) itself is NOT certifiable: its rounding is
   ~√(nu)·‖v‖₁, far above τ; the ℓ1 bound needs no cancellation.)
2. **the guaranteed fallback** (``krr.guaranteed_descent``): gradient descent in ℋ from g = 0,
   α ← α − s·v̂, s = 2/(L + μ), for the public N = :attr:`steps`, with no projection. By Nesterov
   Thm 2.1.12/2.1.15 (``numerics.descent_contraction_gap``, valid in any Hilbert space) an exact
   step contracts the distance to g* by q, so D_{k+1} ≤ q·D_k + s·ε_g + r with D_0 = ‖g*‖ ≤ R;
   by induction D_k ≤ max(R, floor) = R, hence |g_k(s)| ≤ ‖g_k‖ ≤ 2R = T (what C needs for
   the squared loss), and D_N ≤ q^N·R + floor ≤ d*/2 + d*/2, because N makes q^N·R ≤ d*/2 and
   τ ≥ 4A with A ≥ 2λ0·floor·1.03 gives floor ≤ d*/2. The iterates stay in the public box
   |α_j| ≤ b = A₁/n (what ε_f needs): the exact update is α_j(1 − 2sλ0) − sρ_jℓ′_j/n, so
   |α_j| ≤ b ⇒ |·| ≤ b − sCη/n for b = C(1 + η)/(2λ0 n), and :attr:`box_margin` η is the least
   (doubling from 1/n) for which that margin covers the gradient error and the update's
   rounding (:meth:`KrrAccuracy._box_holds`; none: the plan refuses).

Two neighbours' solves are then within 2d* < τ/λ0 of their minimisers, so Δ = L_w/(λ0 n) + τ/λ0
(:attr:`dpcausal.commands.cate.setup.CateSetup.rkhs_sensitivity`) holds for either path.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.rff_accuracy import (
    MAX_FALLBACK_STEPS,
    MAX_RELATIVE_SLACK,
    RidgeSolveTerms,
)
from dpcausal.numerics import (
    SAFETY,
    UNIT_ROUNDOFF,
    descent_steps,
    gamma,
)

FloatArray = npt.NDArray[np.float64]
MAX_FALLBACK_WORK = 2e13
"""The plan refuses a fallback of more than this many kernel multiply-adds (steps × n², ~1 h)."""


def kernel_error(q: int, bandwidth: float) -> float:
    """e_K ≥ |k̂0(s, s′) − k0(s, s′)| for s, s′ ∈ [0, 1]^q as ``gaussian_kernel`` computes it:
    ‖s‖² + ‖s′‖² − 2sᵀs′ errs by ≤ 4q·γ_{q+2} (each term ≤ q(1 + 8u)), the clamp at 0 only moves
    it towards the true value ≥ 0, the scaling by −1/(2h²) adds 4u relatively, and exp(−x) is
    1-Lipschitz on x ≥ 0 with x·e^{−x} ≤ 1/e (the relative term) and a few ulps of its own."""
    u = UNIT_ROUNDOFF
    return SAFETY * (2.0 * q * gamma(q + 2) * (1.0 + 8.0 * u) / (bandwidth * bandwidth)
                     * (1.0 + 4.0 * u) + 4.0 * u)


@dataclass(frozen=True)
class KrrAccuracy(RidgeSolveTerms):
    """The public certificate and fallback of one exact-kernel second-stage solve.

    Parameters
    ----------
    n, q
        Rows of the second half and covariates (public).
    bandwidth, lam0, lipschitz_w
        h, the ridge λ0 > 0 and L_w.
    squared
        The squared loss (else Huber).
    """

    n: int
    q: int
    bandwidth: float
    lam0: float
    lipschitz_w: float
    squared: bool

    @property
    def g_bound(self) -> float:
        """T = 2R(1 + 1e-9) ≥ |g(s)| at every squared-loss point whose gradient is used: a fallback
        iterate has D_k ≤ max(D_0, floor) ≤ R (induction on D_{k+1} ≤ qD_k + (1 − q)floor, and
        floor ≤ R/(4n) once τ ≤ L_w/n, :meth:`problem`), so |g(s)| ≤ ‖g‖_ℋ ≤ ‖g*‖ + R ≤ 2R; a
        certified point is tested (max|f̂| + ε_f ≤ T)."""
        return 2.0 * self.radius * (1.0 + 1e-9)

    @property
    def coefficient_bound(self) -> float:
        """C ≥ ρ_i|ℓ′(g(s_i) − φ_i)| (ρ ≤ sup ρ·(1 + 4u) as computed): L_w (Huber, everywhere);
        L_w + 2T where |g(s_i)| ≤ T (squared: ρ|2r| ≤ 2|g(s)| + ρ|2φ| and ρ|2φ| ≤ L_w)."""
        base = self.lipschitz_w + (2.0 * self.g_bound if self.squared else 0.0)
        return base * (1.0 + 8.0 * UNIT_ROUNDOFF)

    @property
    def kernel_error(self) -> float:
        """e_K (:func:`kernel_error`)."""
        return kernel_error(self.q, self.bandwidth)

    @functools.cached_property
    def box_margin(self) -> float:
        """η: the fallback's iterates keep |α_j| ≤ b = C(1 + η)/(2λ0 n) (see the module
        docstring); the least η = 2^k/n that :meth:`_box_holds`, or inf."""
        eta = 1.0 / self.n
        while eta <= 1.0:
            if self._box_holds(eta):
                return eta
            eta *= 2.0
        return math.inf

    def _l1(self, eta: float) -> float:
        return self.coefficient_bound * (1.0 + eta) / (2.0 * self.lam0)

    def _f_error(self, a1: float) -> float:
        return SAFETY * (self.kernel_error + gamma(self.n) * (1.0 + self.kernel_error)) * a1

    def _grad_error(self, a1: float) -> float:
        """ε_g for ‖α‖₁ ≤ a1: per entry j, ρ|ℓ̂′ − ℓ′| ≤ 2ε_f + 2u·ρ(c or |r|) + one product's
        rounding (the clip is 1-Lipschitz and clip∘fl differs from clip by ≤ uc; ρ|2r| ≤ C + 2ε_f),
        then /n, 2λ0α_j and the sum: ≤ [(2ε_f + 3u(C + 2ε_f))(1 + 3u)]/n + 3u(C/n + 2λ0|α_j|);
        summed over j (the ℓ1 norm bounds the ℋ norm)."""
        u, c, ef = UNIT_ROUNDOFF, self.coefficient_bound, self._f_error(a1)
        return SAFETY * ((2.0 * ef + 3.0 * u * (c + 2.0 * ef)) * (1.0 + 3.0 * u)
                         + 3.0 * u * (c + 2.0 * self.lam0 * a1))

    def _box_holds(self, eta: float) -> bool:
        """Whether |α_j| ≤ b implies |α′_j| ≤ b after a computed update (a 4u margin spare)."""
        u, n, s, c = UNIT_ROUNDOFF, self.n, self.step, self.coefficient_bound
        b = self._l1(eta) / n
        ev = self._grad_error(n * b) / n  # per-entry error of v̂ (the ℓ1 bound over n)
        exact = (1.0 - 2.0 * s * self.lam0) * b + s * c / n
        new = (exact + s * ev + u * s * (c / n + 2.0 * self.lam0 * b + ev)
               + u * (1.0 + u) * (exact + 2.0 * s * ev)) * (1.0 + 4.0 * u)
        return new <= b

    @property
    def alpha_l1(self) -> float:
        """A₁ = C(1 + η)/(2λ0) ≥ ‖α‖₁ at every point whose gradient is used (fallback: the box;
        certificate: checked)."""
        return self._l1(self.box_margin)

    @property
    def f_error(self) -> float:
        """ε_f ≥ |f̂_i − (Kα)_i| for f̂ = fl(K̂α), ‖α‖₁ ≤ A₁: e_K·A₁ for the kernel, γ_n·(1 + e_K)·A₁
        for the n-term sum (any order)."""
        return self._f_error(self.alpha_l1)

    @property
    def grad_allowance(self) -> float:
        """ε_g ≥ ‖v̂ − v‖₁ ≥ ‖∇̂J − ∇J‖_ℋ at every point with ‖α‖₁ ≤ A₁ (and |g| ≤ T, squared)."""
        return self._grad_error(self.alpha_l1)

    @property
    def update_allowance(self) -> float:
        """r ≥ the ℋ-norm (≤ ℓ1) of the rounding of one update α − s·v̂: each entry's product and
        difference, ≤ u(A₁ + 2s‖v̂‖₁)(1 + u) with ‖v̂‖₁ ≤ C + 2λ0A₁ + ε_g."""
        u, a1 = UNIT_ROUNDOFF, self.alpha_l1
        v1 = self.coefficient_bound + 2.0 * self.lam0 * a1 + self.grad_allowance
        return SAFETY * u * (a1 + 2.0 * self.step * v1) * (1.0 + u)

    @property
    def steps(self) -> int:
        """N with q^N·R ≤ d*/2: the fallback's public number of gradient steps from g = 0."""
        return descent_steps(self.radius, 0.5 * self.target, self.gap)

    def accepts(self, alpha: FloatArray, f: FloatArray, v: FloatArray) -> bool:
        """The certificate at α̃ given f̂ = fl(K̂α̃) and v̂ (sums inflated for their own rounding)."""
        rel = 1.0 + 2.0 * gamma(self.n)
        if not float(np.sum(np.abs(alpha))) * rel <= self.alpha_l1:
            return False
        if self.squared and not float(np.max(np.abs(f))) + self.f_error <= self.g_bound:
            return False
        return bool(float(np.sum(np.abs(v))) * rel <= self.stop_tol)

    def problem(self) -> str | None:
        """Why float64 cannot give this solve a useful guarantee in a sane time (checked by the
        plan, on public inputs only), or None."""
        if (scale := self.scale_problem()) is not None:
            return scale
        try:
            eta, slack, steps = self.box_margin, self.tol, self.steps
        except (ValueError, ZeroDivisionError, OverflowError):
            eta, slack, steps = math.inf, math.inf, MAX_FALLBACK_STEPS + 1
        if not (math.isfinite(eta) and slack <= MAX_RELATIVE_SLACK * self.lipschitz_w / self.n):
            return (f"cate.ridge: λ0 = {self.lam0:.3g} with {self.n} second-stage rows is beyond "
                    "a float64 exact-kernel solve with a guaranteed accuracy (its rounding "
                    "allowance would more than double the sensitivity); raise cate.ridge, use "
                    "fewer rows, or cate.features: rff")
        if steps > MAX_FALLBACK_STEPS or steps * float(self.n) ** 2 > MAX_FALLBACK_WORK:
            return (f"cate.ridge: λ0 = {self.lam0:.3g} is too small for the second stage's "
                    f"guaranteed fallback ({steps} gradient steps over an {self.n} × {self.n} "
                    "kernel); raise cate.ridge")
        return None
