"""Second stage of DP-CATE: pseudo-outcomes and weighted Gaussian-kernel ridge regression.

Everything here is deterministic and non-private (no noise): the fits are the *inputs* of the
mechanisms in :mod:`dpcausal.commands.cate.plan`. Kernel: k0(x, x′) = exp(−‖x − x′‖²/(2h²)) (unit
diagonal) on box-scaled covariates; the paper's normalised kernel K = c_K·k0 with
c_K = (√(2π)h)^{-q} gives the same fit with λ = c_K·λ0 (spec §3.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.krr_accuracy import KrrAccuracy
from dpcausal.mechanisms.gaussian_process import gaussian_kernel
from dpcausal.numerics import objective_scale

FloatArray = npt.NDArray[np.float64]
Learner = Literal["r", "dr"]


def pseudo_outcomes(learner: Learner, a: FloatArray, y: FloatArray, pi: FloatArray,
                    mu0: FloatArray, mu1: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Weights ρ and pseudo-outcomes φ (spec §0).

    R:  ρ = (a − π)²,  φ = (y − μ_a)/(a − π) + μ1 − μ0.
    DR: ρ = 1,         φ = (a − π)(y − μ_a)/(π(1 − π)) + μ1 − μ0.
    π must already be clipped to [κ, 1 − κ] (so a − π ≠ 0).
    """
    mu_a = np.where(a > 0.5, mu1, mu0)
    resid = a - pi
    if learner == "r":
        return resid**2, (y - mu_a) / resid + mu1 - mu0
    return np.ones_like(a), resid * (y - mu_a) / (pi * (1.0 - pi)) + mu1 - mu0


def huber_value(r: FloatArray, c: float | None) -> FloatArray:
    """ℓ_c(r) = r² for |r| ≤ c, 2c|r| − c² beyond (c = None: squared loss). The square is taken
    of min(|r|, c) (equal to r² inside, bit for bit), so a residual far outside c never squares
    to an overflow in the branch ``np.where`` discards."""
    if c is None:
        return r * r
    ar = np.abs(r)
    inner = np.minimum(ar, c)
    return np.where(ar <= c, inner * inner, 2.0 * c * ar - c * c)


def huber_derivative(r: FloatArray, c: float | None) -> FloatArray:
    """ℓ_c′(r) = 2r for |r| ≤ c, 2c·sign(r) beyond; |ℓ_c′| ≤ 2c."""
    if c is None:
        return 2.0 * r
    return 2.0 * np.clip(r, -c, c)


@dataclass(frozen=True)
class KrrFit:
    """ĝ_D(x) = Σ_j α_j k0(x, X_j), with the training points (box-scaled) and the bandwidth."""

    alpha: FloatArray
    points: FloatArray
    bandwidth: float
    grad_norm: float
    """‖v̂‖₁ at a certified iterate (a bound on ‖∇J‖_ℋ up to ε_g); nan after the full fallback."""
    iterations: int

    def predict(self, s: FloatArray, *, chunk: int = 2048) -> FloatArray:
        """ĝ_D at the box-scaled rows ``s``."""
        out = np.empty(s.shape[0])
        for i in range(0, s.shape[0], chunk):
            out[i:i + chunk] = gaussian_kernel(s[i:i + chunk], self.points, self.bandwidth) @ self.alpha
        return out


def _objective(alpha: FloatArray, kmat: FloatArray, rho: FloatArray, phi: FloatArray,
               lam0: float, c: float | None, w: float = 1.0) -> tuple[float, FloatArray]:
    """(w²·J(α), f̂ = fl(K̂α)): ``w`` a power of two (exact scaling, so comparisons of the value
    are those of J) chosen from the public L_w so that the squares neither overflow nor underflow
    at extreme outcome scales (:func:`objective_scale`); f̂ itself is not scaled."""
    f = kmat @ alpha
    n = alpha.shape[0]
    cw = None if c is None else c * w
    return (float(rho @ huber_value((f - phi) * w, cw)) / n
            + lam0 * float((alpha * w) @ (f * w))), f


def gradient_coefficients(alpha: FloatArray, f: FloatArray, rho: FloatArray, phi: FloatArray,
                          lam0: float, c: float | None) -> FloatArray:
    """v with ∇J(g) = Σ_j v_j k0(·, X_j) for g = Σα_j k0(·, X_j) and f̂ = K̂α:
    v = ρℓ′(f − φ)/n + 2λ0α, computed as :attr:`KrrAccuracy.grad_allowance` bounds."""
    n = alpha.shape[0]
    return rho * huber_derivative(f - phi, c) / n + (2.0 * lam0) * alpha


def _newton(kmat: FloatArray, rho: FloatArray, phi: FloatArray, lam0: float, c: float | None,
            accuracy: KrrAccuracy, max_iter: int) -> tuple[FloatArray, FloatArray, int] | None:
    """Active-set Newton; (α, v̂, iterations) at the first iterate the certificate accepts, or None
    (no certificate within ``max_iter`` steps, or a system not numerically positive definite)."""
    from scipy import linalg  # lazy: planning never solves

    n = kmat.shape[0]
    nl = n * lam0
    sqrt_rho = np.sqrt(rho)
    alpha = np.zeros(n)
    w = objective_scale(accuracy.lipschitz_w)
    val, f = _objective(alpha, kmat, rho, phi, lam0, c, w)
    for it in range(1, max_iter + 1):
        r = f - phi
        inside = np.ones(n, dtype=bool) if c is None else np.abs(r) <= c
        new = np.empty(n)
        out_idx = np.flatnonzero(~inside)
        in_idx = np.flatnonzero(inside)
        if out_idx.size:
            assert c is not None
            new[out_idx] = -rho[out_idx] * c * np.sign(r[out_idx]) / nl
        if in_idx.size:
            rhs = phi[in_idx].copy()
            if out_idx.size:
                rhs -= kmat[np.ix_(in_idx, out_idx)] @ new[out_idx]
            d = sqrt_rho[in_idx]
            sys_mat = kmat[np.ix_(in_idx, in_idx)]
            sys_mat *= d[:, None]
            sys_mat *= d[None, :]
            sys_mat[np.diag_indices_from(sys_mat)] += nl
            try:
                beta = linalg.cho_solve(linalg.cho_factor(sys_mat, lower=True, check_finite=False,
                                                          overwrite_a=True), d * rhs,
                                        check_finite=False)
            except (linalg.LinAlgError, ValueError):
                return None
            del sys_mat
            new[in_idx] = d * beta
        if not bool(np.all(np.isfinite(new))):
            return None
        step = new - alpha
        t = 1.0
        while True:
            cand = alpha + t * step
            cval, cf = _objective(cand, kmat, rho, phi, lam0, c, w)
            if cval <= val + 1e-12 * abs(val) or t < 1e-8:
                break
            t *= 0.5
        alpha, val, f = cand, cval, cf
        v = gradient_coefficients(alpha, f, rho, phi, lam0, c)
        if accuracy.accepts(alpha, f, v):
            return alpha, v, it
    return None


def guaranteed_descent(kmat: FloatArray, rho: FloatArray, phi: FloatArray, lam0: float,
                       c: float | None, accuracy: KrrAccuracy) -> tuple[FloatArray, float, int]:
    """The fallback: gradient descent in ℋ from g = 0, α ← α − s·v̂, for the public
    ``accuracy.steps`` steps (fewer when an iterate meets the certificate); the result is within
    ``accuracy.target`` of g* by the contraction bound (krr_accuracy's docstring), with no check.
    Returns (α, ‖v̂‖₁ or nan, steps taken)."""
    alpha = np.zeros(kmat.shape[0])
    for it in range(accuracy.steps):
        f = kmat @ alpha
        v = gradient_coefficients(alpha, f, rho, phi, lam0, c)
        if accuracy.accepts(alpha, f, v):
            return alpha, float(np.sum(np.abs(v))), it
        alpha = alpha - accuracy.step * v
    return alpha, math.nan, accuracy.steps


def fit_krr(s: FloatArray, rho: FloatArray, phi: FloatArray, *, bandwidth: float, lam0: float,
            huber_c: float | None, accuracy: KrrAccuracy, max_iter: int = 100,
            kmat: FloatArray | None = None) -> KrrFit:
    """Minimise J(g) = (1/n)Σ ρ_i ℓ_c(g(X_i) − φ_i) + λ0‖g‖²_ℋ over the RKHS of k0 to within
    ``accuracy.target`` of the exact minimiser g*, whatever the data: never raises on the data.

    Active-set Newton (exact for the piecewise-quadratic Huber loss): given the set S of rows with
    |residual| ≤ c, stationarity α = −ρℓ′(Kα − φ)/(2nλ0) is the linear system
    (nλ0 I + W_S K_SS) α_S = W_S(φ_S − K_SO α_O), α_O = −ρ_O c sign(r_O)/(nλ0), solved in the
    symmetric form with W_S^{1/2} by Cholesky; steps are damped so that J decreases.
    ``huber_c=None`` is the squared loss (one solve: α = (WK + nλ0 I)⁻¹Wφ). An iterate is returned
    when :meth:`KrrAccuracy.accepts` it (‖α‖₁ ≤ A₁ and ‖v̂‖₁ ≤ 0.99τ − ε_g, so ‖∇J‖_ℋ ≤ 0.99τ and
    ‖ĝ − g*‖_ℋ ≤ d* by 2λ0-strong convexity). When none does within ``max_iter`` steps, or a
    system is not numerically positive definite, :func:`guaranteed_descent` runs from g = 0 for the
    public number of steps. Either way Δ = L_w/(λ0 n) + τ/λ0 holds (docs/proofs/cate.md §4);
    neither the exit, a message nor the sensitivity depends on which way the solve ended.

    Notes
    -----
    Neighbouring relation: replace one row of the second half (n public), nuisances fixed.
    Sensitivity: the exact minimisers of neighbours are within L_w/(λ0 n) in ℋ (Bousquet–Elisseeff;
    ``privacy.function_mechanism``), and each solve is within d* = 0.99τ/(2λ0) of its own, a
    public bound (solver error and float64 rounding, :mod:`~dpcausal.commands.cate.krr_accuracy`),
    so the returned functions are within L_w/(λ0 n) + τ/λ0.
    """
    kmat = gaussian_kernel(s, s, bandwidth) if kmat is None else kmat
    newton = _newton(kmat, rho, phi, lam0, huber_c, accuracy, max_iter)
    if newton is not None:
        alpha, v, it = newton
        return KrrFit(alpha, s, bandwidth, float(np.sum(np.abs(v))), it)
    alpha, vnorm, steps = guaranteed_descent(kmat, rho, phi, lam0, huber_c, accuracy)
    return KrrFit(alpha, s, bandwidth, vnorm, max_iter + steps)


def rkhs_distance(fit_a: KrrFit, fit_b: KrrFit) -> float:
    """‖ĝ_a − ĝ_b‖_ℋ for two fits with the same bandwidth (stacked representer form).

    ĝ_a − ĝ_b = Σ_i α_a,i k0(·, s_a,i) − Σ_j α_b,j k0(·, s_b,j); a point at the same position of
    both fits (neighbouring data sets share all rows but one) enters once with α_a,i − α_b,i,
    so the Gram is about (n + 1)², not (2n)² (the same quadratic form, up to rounding).
    """
    pts_a, pts_b = fit_a.points, fit_b.points
    if pts_a.shape == pts_b.shape:
        same = np.all(pts_a == pts_b, axis=1)
        differ = np.flatnonzero(~same)
        pts = np.vstack([pts_a, pts_b[differ]])
        v = np.concatenate([np.where(same, fit_a.alpha - fit_b.alpha, fit_a.alpha),
                            -fit_b.alpha[differ]])
    else:
        pts = np.vstack([pts_a, pts_b])
        v = np.concatenate([fit_a.alpha, -fit_b.alpha])
    kmat = gaussian_kernel(pts, pts, fit_a.bandwidth)
    return math.sqrt(max(float(v @ (kmat @ v)), 0.0))


@dataclass(frozen=True)
class InfluenceVectors:
    """h(x_q; x) of the squared-loss weighted KRR (spec §2.2): [k0(x_q, x) − k_X(x_q)ᵀ M k_X(x)]/λ0.

    M = W^{1/2}(W^{1/2} K W^{1/2} + nλ0 I)⁻¹W^{1/2}; ``b`` = k0(Xq, X) M (d × n).
    """

    queries: FloatArray
    points: FloatArray
    bandwidth: float
    lam0: float
    b: FloatArray

    @classmethod
    def build(cls, queries: FloatArray, points: FloatArray, rho: FloatArray, *, bandwidth: float,
              lam0: float) -> InfluenceVectors:
        """Factor once (O(n³)); each candidate x then costs O(nd)."""
        n = points.shape[0]
        kmat = gaussian_kernel(points, points, bandwidth)
        d = np.sqrt(rho)
        sys_mat = kmat * d[:, None] * d[None, :]
        sys_mat[np.diag_indices_from(sys_mat)] += n * lam0
        from scipy import linalg  # lazy: planning never solves

        factor = linalg.cho_factor(sys_mat, lower=True, check_finite=False, overwrite_a=True)
        kqx = gaussian_kernel(queries, points, bandwidth)
        b = linalg.cho_solve(factor, (kqx * d[None, :]).T, check_finite=False).T * d[None, :]
        return cls(queries, points, bandwidth, lam0, b)

    def norms(self, cand: FloatArray, *, chunk: int = 1024) -> FloatArray:
        """‖h_D(x)‖₂ over the d queries, for every candidate row x (box-scaled)."""
        out = np.empty(cand.shape[0])
        for i in range(0, cand.shape[0], chunk):
            c = cand[i:i + chunk]
            h = (gaussian_kernel(self.queries, c, self.bandwidth)
                 - self.b @ gaussian_kernel(self.points, c, self.bandwidth)) / self.lam0
            out[i:i + chunk] = np.linalg.norm(h, axis=0)
        return out


def residual_bound(learner: Learner, pi: FloatArray, mu0: FloatArray, mu1: FloatArray,
                   g: FloatArray, y_bounds: tuple[float, float]) -> FloatArray:
    """s(x) = max over a ∈ {0,1}, y ∈ {y_lo, y_hi} of |ρ(φ − g)| (R) or |φ − g| (DR) (spec §2.4)."""
    best = np.zeros_like(pi)
    for a in (0.0, 1.0):
        mu_a = mu1 if a else mu0
        for yv in y_bounds:
            if learner == "r":
                val = (a - pi) * (yv - mu_a) + (a - pi) ** 2 * (mu1 - mu0 - g)
            else:
                val = (a - pi) * (yv - mu_a) / (pi * (1.0 - pi)) + mu1 - mu0 - g
            best = np.maximum(best, np.abs(val))
    return best
