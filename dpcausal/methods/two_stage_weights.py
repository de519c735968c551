"""Stage 1 of ``two-stage``: balancing weights, solved exactly, never released (DP-2ERM §4).

Every function returns w ∈ nΔⁿ (w ≥ 0, Σw = n). Non-convergence raises SolverError (no release).
Inputs are already clipped to the public bounds. Treatment ``a`` is boolean (True = treated).

* ``uniform``   — w ≡ 1.
* ``ipw-rct``   — u_i = 1/p_{a_i}, w = n·u/Σu (public design probability).
* ``ipw-known`` — u_i = 1 + exp(−ã_i·score_i), score from PUBLIC coefficients (arm-specific 1/π,
  spec §3.6 F3), w = n·u/Σu.
* ``ipw-logit`` — the same with the score of a ridge logistic fit in the ℓ₂ ball (4.10).
* ``ebw``       — entropy balancing by its corrected convex dual in the ℓ₂ ball (spec §1.4 W5).
* ``mmd``       — the three-way MMD program (4.15): box 0 ≤ w ≤ R, per-arm sums n, then halved.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import special

from dpcausal.errors import SolverError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
GRAD_TOL = 1e-10
"""Stationarity tolerance of the smooth stage-1 solves (relative to the problem's scale)."""
LOGIT_LAMBDA_SLACK = 1e-6
"""ipw-logit and ebw: the certified distance of the computed dual/coefficient vector λ̃ to the exact
λ̂ must be ≤ half of this; the stability bounds add it to ‖λ̂(D) − λ̂(D′)‖ (two_stage_calib)."""


def normalise(u: FloatArray) -> FloatArray:
    """w = n·u/Σu."""
    return len(u) * u / float(np.sum(u))


def uniform_weights(n: int) -> FloatArray:
    """w ≡ 1."""
    return np.ones(n)


def ipw_rct_weights(a: BoolArray, p_treated: float) -> FloatArray:
    """w_i ∝ 1/p_{a_i}, with exactly one weight value per arm."""
    n = len(a)
    u1, u0 = 1.0 / p_treated, 1.0 / (1.0 - p_treated)
    n1 = int(a.sum())
    total = n1 * u1 + (n - n1) * u0
    return np.where(a, n * u1 / total, n * u0 / total)


def ipw_from_scores(a: BoolArray, score: FloatArray) -> FloatArray:
    """u_i = 1/π(a_i|x_i) = 1 + exp(−ã_i·score_i) with logit π(treated|x) = score; w = n·u/Σu."""
    signed = np.where(a, score, -score)
    return normalise(1.0 + np.exp(-signed))


def _ball_newton(fun, x0: FloatArray, radius: float, *, what: str) -> FloatArray:
    """Minimise a smooth strongly convex f over the ℓ₂ ball ‖x‖ ≤ radius exactly.

    ``fun(x, mu)`` returns (value, gradient, Hessian) of f(x) + (mu/2)‖x‖². If the unconstrained
    minimiser lies outside the ball, the KKT condition ∇f(x) + μx = 0 with ‖x‖ = radius is solved by
    bisection on μ ≥ 0 (‖x(μ)‖ decreases in μ), each inner problem by damped Newton.
    """

    def solve(mu: float, start: FloatArray) -> FloatArray:
        x = start.copy()
        val, grad, hess = fun(x, mu)
        for _ in range(200):
            gnorm = float(np.linalg.norm(grad))
            if gnorm <= GRAD_TOL * max(1.0, float(np.abs(hess).max())):
                return x
            step = np.linalg.solve(hess, grad)
            t = 1.0
            while True:
                cand = x - t * step
                cval, cgrad, chess = fun(cand, mu)
                if (cval <= val - 1e-4 * t * float(grad @ step) or t < 1e-12
                        or float(np.linalg.norm(cgrad)) < 0.5 * gnorm):
                    break
                t *= 0.5
            if t < 1e-12 and cval >= val and float(np.linalg.norm(cgrad)) >= gnorm:
                break
            x, val, grad, hess = cand, cval, cgrad, chess
        gnorm = float(np.linalg.norm(grad))
        if gnorm <= 1e3 * GRAD_TOL * max(1.0, float(np.abs(hess).max())):
            return x
        raise SolverError(
            f"stage-1 {what} solve did not converge (gradient norm {gnorm:.3g}); no release was "
            "made. Try a larger ridge, or report this as a bug"
        )

    x = solve(0.0, x0)
    if float(np.linalg.norm(x)) <= radius:
        return x
    lo, hi = 0.0, 1.0
    while float(np.linalg.norm(solve(hi, x))) > radius:
        hi *= 4.0
        if hi > 1e12:
            raise SolverError(f"stage-1 {what}: the ℓ₂-ball KKT multiplier diverged; no release")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        xm = solve(mid, x)
        if float(np.linalg.norm(xm)) > radius:
            lo = mid
        else:
            hi = mid
            x = xm
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return solve(hi, x)


def certified_distance(grad: FloatArray, x: FloatArray, radius: float, rho: float) -> float:
    """An upper bound on ‖x − x*‖ for x* = argmin of a ρ-strongly convex f over ‖x‖ ≤ radius.

    ``grad`` = ∇f(x). If ‖x‖ + ‖∇f(x)‖/ρ ≤ radius, the unconstrained minimiser lies in the ball,
    so x* is it and ‖x − x*‖ ≤ ‖∇f(x)‖/ρ. Otherwise, for feasible x, strong convexity and the
    optimality of x* give ρ‖x − x*‖² ≤ ⟨∇f(x), x − x*⟩ ≤ ⟨∇f(x), x⟩ + radius·‖∇f(x)‖ (the
    Frank–Wolfe gap of the ball).
    """
    gnorm = float(np.linalg.norm(grad))
    xnorm = float(np.linalg.norm(x))
    if xnorm + gnorm / rho <= radius:
        return gnorm / rho
    if xnorm > radius * (1 + 1e-12):
        return math.inf
    return math.sqrt(max(0.0, float(grad @ x) + radius * gnorm) / rho)


def ipw_logit_weights(a: BoolArray, feats: FloatArray, *, radius: float, ridge: float,
                      certify: bool = True) -> FloatArray:
    """Ridge logistic propensity in the ℓ₂ ball (4.10), then arm-specific IPW.

    ``feats`` are the public-scaled covariates with an intercept column. The computed λ̃ is
    certified to lie within LOGIT_LAMBDA_SLACK/2 of the exact minimiser (else SolverError).
    """
    n, d = feats.shape
    af = a.astype(np.float64)

    def fun(lam: FloatArray, mu: float):
        z = feats @ lam
        val = float(np.mean(np.logaddexp(0.0, z) - af * z)) + 0.5 * (ridge + mu) * float(lam @ lam)
        p = special.expit(z)
        grad = feats.T @ (p - af) / n + (ridge + mu) * lam
        hess = (feats.T * (p * (1 - p))) @ feats / n + (ridge + mu) * np.eye(d)
        return val, grad, hess

    lam = _ball_newton(fun, np.zeros(d), radius, what="ipw-logit")
    if certify:
        lam = _certified(fun, lam, radius, ridge, what="ipw-logit")
    return ipw_from_scores(a, feats @ lam)


def _certified(fun, lam: FloatArray, radius: float, rho: float, *, what: str) -> FloatArray:
    """A feasible point certified within LOGIT_LAMBDA_SLACK/2 of the exact ball minimiser."""
    norm = float(np.linalg.norm(lam))
    candidates = [lam * min(1.0, radius / norm) if norm > 0 else lam]
    if norm > 0.5 * radius:  # on the sphere the Frank–Wolfe gap is quadratic in the residual
        candidates.append(lam * (radius / norm))
    certs = [certified_distance(fun(c, 0.0)[1], c, radius, rho) for c in candidates]
    if min(certs) > 0.5 * LOGIT_LAMBDA_SLACK:
        raise SolverError(
            f"the stage-1 {what} solve could not certify its accuracy (needed for the stability "
            "bound); no release was made. Try a larger ridge, or report this as a bug"
        )
    return candidates[int(np.argmin(certs))]


def ebw_rows(a: BoolArray, moments: FloatArray, kappa: float, m_g: float) -> FloatArray:
    """Rows b_i = (n/n_a)·s·(g(x_i) in the arm's block), s = κ/M_g, clipped to unit norm (§3.4)."""
    n, k = moments.shape
    n1 = int(a.sum())
    n0 = n - n1
    s = kappa / m_g
    rows = np.zeros((n, 2 * k))
    if n0:
        rows[~a, :k] = (n / n0) * s * moments[~a]
    if n1:
        rows[a, k:] = (n / n1) * s * moments[a]
    norms = np.linalg.norm(rows, axis=1)
    over = norms > 1.0
    rows[over] /= norms[over, None]
    return rows


def ebw_weights(a: BoolArray, moments: FloatArray, *, kappa: float, m_g: float, radius: float,
                ridge: float, arm_totals: str, certify: bool = True) -> FloatArray:
    """Entropy balancing (spec §1.4 W5) with the convex dual in the ℓ₂ ball:

    min_{‖λ‖₂ ≤ R} log Σ_i q_i exp⟨λ, b_i⟩ − ⟨λ₀ + λ₁, s·ḡ⟩ + (λ_EBW/2)‖λ‖²,  q uniform,
    w_i = n·q_i exp⟨λ*, b_i⟩ / C(λ*) (Prop 4.8). ``moments`` = g(x) with g₀ ≡ 1 first.
    ``arm_totals: equal`` then rescales each non-empty arm to total n/(number of non-empty arms).
    """
    n, k = moments.shape
    rows = ebw_rows(a, moments, kappa, m_g)
    target_half = (kappa / m_g) * moments.mean(axis=0)
    target = np.concatenate([target_half, target_half])
    d = 2 * k

    def fun(lam: FloatArray, mu: float):
        z = rows @ lam
        lse = float(special.logsumexp(z)) - math.log(n)
        p = np.exp(z - special.logsumexp(z))
        mean_b = rows.T @ p
        val = lse - float(lam @ target) + 0.5 * (ridge + mu) * float(lam @ lam)
        grad = mean_b - target + (ridge + mu) * lam
        cov = (rows.T * p) @ rows - np.outer(mean_b, mean_b)
        hess = cov + (ridge + mu) * np.eye(d)
        return val, grad, hess

    lam = _ball_newton(fun, np.zeros(d), radius, what="ebw")
    if certify:  # needed only by the method-specific bound (universal holds for any weights)
        lam = _certified(fun, lam, radius, ridge, what="ebw")
    z = rows @ lam
    w = n * np.exp(z - special.logsumexp(z))
    if arm_totals == "equal":
        arms = [m for m in (a, ~a) if m.any()]
        for m in arms:
            w[m] *= (n / len(arms)) / float(w[m].sum())
    return w


def rbf_kernel(x: FloatArray, z: FloatArray, bandwidth: float) -> FloatArray:
    """k(x, z) = exp(−‖x − z‖²/(2h²))."""
    sq = (x * x).sum(1)[:, None] + (z * z).sum(1)[None, :] - 2.0 * x @ z.T
    return np.exp(-np.maximum(sq, 0.0) / (2.0 * bandwidth**2))


def _project_capped_simplex(v: FloatArray, total: float, cap: float) -> FloatArray:
    """Euclidean projection onto {0 ≤ w ≤ cap, Σw = total} (bisection on the shift, to float)."""
    lo, hi = float(v.min()) - cap, float(v.max())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        s = float(np.clip(v - mid, 0.0, cap).sum())
        if s > total:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * max(1.0, abs(mid)):
            break
    w = np.clip(v - 0.5 * (lo + hi), 0.0, cap)
    return w * (total / float(w.sum())) if w.sum() > 0 else w


def mmd_weights(a: BoolArray, feats: FloatArray, *, bandwidth: float, alpha: float, ridge: float,
                box: float, max_iter: int = 20000) -> FloatArray:
    """Three-way MMD weights (4.15), solved by accelerated projected gradient to a KKT tolerance.

    minimise α·MMD²(P_w0, P) + α·MMD²(P_w1, P) + (1−α)·MMD²(P_w0, P_w1) + (λ/2)‖w‖²
    over 0 ≤ w ≤ R with each arm summing to n, P_wa = Σ (w_ai/n) δ_xi, P the sample; then w/2.
    The objective is λ-strongly convex (the kernel block is PSD for α ∈ [0, 1]).
    """
    n = len(a)
    idx1, idx0 = np.flatnonzero(a), np.flatnonzero(~a)
    if min(len(idx0), len(idx1)) * box < n:
        raise SolverError(
            f"the mmd weight program is infeasible: an arm is smaller than n/R_MMD = {n / box:.4g} "
            "rows, so no weights in [0, R_MMD] sum to n in it; no release was made. Raise "
            "two_stage.mmd.box (or use another weight method)"
        )
    order = np.concatenate([idx0, idx1])
    xs = feats[order]
    kern = rbf_kernel(xs, xs, bandwidth)
    n0 = len(idx0)
    c = 1.0 - alpha
    quad = kern.copy()
    quad[:n0, n0:] *= -c
    quad[n0:, :n0] *= -c
    quad /= n**2
    lin = -2.0 * alpha / n**2 * kern.sum(axis=1)
    lipschitz = 2.0 * float(np.linalg.eigvalsh(quad)[-1]) + ridge

    def grad(w: FloatArray) -> FloatArray:
        return 2.0 * quad @ w + lin + ridge * w

    def project(v: FloatArray) -> FloatArray:
        return np.concatenate([_project_capped_simplex(v[:n0], n, box),
                               _project_capped_simplex(v[n0:], n, box)])

    w = project(np.ones(n) * 1.0)
    y, t = w.copy(), 1.0
    step = 1.0 / lipschitz
    tol = GRAD_TOL * max(1.0, float(np.abs(lin).max()) + ridge * box)
    for _ in range(max_iter):
        w_new = project(y - step * grad(y))
        mapping = float(np.linalg.norm(w_new - y)) / step
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        y = w_new + ((t - 1.0) / t_new) * (w_new - w)
        w, t = w_new, t_new
        if mapping <= tol:
            check = float(np.linalg.norm(project(w - step * grad(w)) - w)) / step
            if check <= 10 * tol:
                out = np.empty(n)
                out[order] = 0.5 * w
                return out
    raise SolverError(
        "the mmd weight program did not reach its KKT tolerance; no release was made. Try a larger "
        "two_stage.mmd.ridge, or report this as a bug"
    )
