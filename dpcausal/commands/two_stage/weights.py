"""Stage 1 of ``two-stage``: balancing weights, solved exactly, never released (DP-2ERM §4).

Every function returns w ∈ nΔⁿ (w ≥ 0, Σw = n). Non-convergence raises SolverError only where the
caller does not need it (mmd; ipw-logit and ebw fall back without raising: ``dual.solve_dual``).
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

from dpcausal.commands.two_stage.dual import GRAD_TOL, solve_dual
from dpcausal.errors import SolverError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


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


def logit_sums(feats: FloatArray, af: FloatArray, lam: FloatArray
               ) -> tuple[float, FloatArray, FloatArray]:
    """Σ(log(1 + e^z) − a·z), Σ(p − a)x and Σ p(1 − p)x xᵀ at z = xᵀλ over the rows ``feats``
    (sums, so an engine adds them over batches)."""
    from scipy import special  # lazy (issue 24): ipw-known, uniform and ipw-rct never need it

    z = feats @ lam
    p = special.expit(z)
    return (float(np.sum(np.logaddexp(0.0, z) - af * z)), feats.T @ (p - af),
            (feats.T * (p * (1 - p))) @ feats)


def logit_objective(sums, n: int, d: int, ridge: float):
    """The ipw-logit dual as ``fun(λ, μ) -> (value, gradient, Hessian)`` of
    mean(log(1 + e^z) − a·z) + ((ρ + μ)/2)‖λ‖², from ``sums(λ)`` = :func:`logit_sums` over all n
    rows (in memory, or added over an engine's batches)."""

    def fun(lam: FloatArray, mu: float):
        loss, g, h = sums(lam)
        val = loss / n + 0.5 * (ridge + mu) * float(lam @ lam)
        grad = g / n + (ridge + mu) * lam
        hess = h / n + (ridge + mu) * np.eye(d)
        return val, grad, hess

    return fun


def ipw_logit_weights(a: BoolArray, feats: FloatArray, *, radius: float, ridge: float,
                      certify: bool = True) -> FloatArray:
    """Ridge logistic propensity in the ℓ₂ ball (4.10), then arm-specific IPW.

    ``feats`` are the public-scaled covariates with an intercept column. With ``certify`` the
    computed λ̃ lies within η/2 of the exact minimiser, η = ``certificate_slack``: certified, or
    by the guaranteed fallback's proof (``dual.solve_dual``; never a SolverError).
    two_stage.compute_weights certifies only when the bound in use is
    method-specific (not clipped to the universal caps).
    """
    n, d = feats.shape
    af = a.astype(np.float64)
    fun = logit_objective(lambda lam: logit_sums(feats, af, lam), n, d, ridge)
    lam = solve_dual(fun, d, radius, ridge, n=n, certify=certify, what="ipw-logit")
    return ipw_from_scores(a, feats @ lam)


def ebw_rows(a: BoolArray, moments: FloatArray, kappa: float, m_g: float,
             counts: tuple[int, int] | None = None) -> FloatArray:
    """Rows b_i = (n/n_a)·s·(g(x_i) in the arm's block), s = κ/M_g, clipped to unit norm (§3.4).

    ``counts`` = (n₀, n₁) of the whole table when ``a``/``moments`` are one batch of it (engine);
    by default they are counted from ``a``."""
    k = moments.shape[1]
    if counts is None:
        n1 = int(a.sum())
        n0 = len(a) - n1
    else:
        n0, n1 = counts
    n = n0 + n1
    s = kappa / m_g
    rows = np.zeros((len(a), 2 * k))
    if n0:
        rows[~a, :k] = (n / n0) * s * moments[~a]
    if n1:
        rows[a, k:] = (n / n1) * s * moments[a]
    norms = np.linalg.norm(rows, axis=1)
    over = norms > 1.0
    rows[over] /= norms[over, None]
    return rows


def ebw_arm_rows(moments_arm: FloatArray, n: int, n_arm: int, kappa: float,
                 m_g: float) -> FloatArray:
    """The nonzero block of :func:`ebw_rows` for the rows of one arm: (n/n_a)·s·g(x_i), clipped
    to unit norm (the other block of these rows is 0). The engine path (dpcausal/engine/
    two_stage.py) works per block: z_i, Σp b and the block-diagonal Σp b bᵀ at a quarter of the
    dense cost. Equal to ebw_rows' block up to the rounding of the row norm (summed over k, not 2k
    columns)."""
    rows = (n / n_arm) * (kappa / m_g) * moments_arm
    norms = np.linalg.norm(rows, axis=1)
    over = norms > 1.0
    rows[over] /= norms[over, None]
    return rows


def ebw_target(moment_mean: FloatArray, kappa: float, m_g: float) -> FloatArray:
    """The dual's target (s·ḡ, s·ḡ), s = κ/M_g, ḡ the sample mean of the moments."""
    half = (kappa / m_g) * moment_mean
    return np.concatenate([half, half])


def ebw_sums(rows: FloatArray, lam: FloatArray) -> tuple[float, FloatArray, FloatArray]:
    """(L, Σp b, Σp b bᵀ) with L = log Σ exp⟨λ, b_i⟩ and p = softmax(z), over the rows ``rows``."""
    from scipy import special  # lazy, as in logit_sums

    z = rows @ lam
    lse = special.logsumexp(z)
    p = np.exp(z - lse)
    return float(lse), rows.T @ p, (rows.T * p) @ rows


def ebw_objective(sums, n: int, d: int, target: FloatArray, ridge: float):
    """The ebw dual as ``fun(λ, μ) -> (value, gradient, Hessian)`` of
    log((1/n)Σ exp⟨λ, b_i⟩) − ⟨λ, target⟩ + ((ρ + μ)/2)‖λ‖², from ``sums(λ)`` = :func:`ebw_sums`
    over all n rows (in memory, or combined over an engine's batches)."""

    def fun(lam: FloatArray, mu: float):
        lse, mean_b, second = sums(lam)
        val = (lse - math.log(n)) - float(lam @ target) + 0.5 * (ridge + mu) * float(lam @ lam)
        grad = mean_b - target + (ridge + mu) * lam
        cov = second - np.outer(mean_b, mean_b)
        hess = cov + (ridge + mu) * np.eye(d)
        return val, grad, hess

    return fun


def ebw_weights(a: BoolArray, moments: FloatArray, *, kappa: float, m_g: float, radius: float,
                ridge: float, arm_totals: str, certify: bool = True) -> FloatArray:
    """Entropy balancing (spec §1.4 W5) with the convex dual in the ℓ₂ ball:

    min_{‖λ‖₂ ≤ R} log Σ_i q_i exp⟨λ, b_i⟩ − ⟨λ₀ + λ₁, s·ḡ⟩ + (λ_EBW/2)‖λ‖²,  q uniform,
    w_i = n·q_i exp⟨λ*, b_i⟩ / C(λ*) (Prop 4.8). ``moments`` = g(x) with g₀ ≡ 1 first.
    ``arm_totals: equal`` then rescales each non-empty arm to total n/(number of non-empty arms).
    """
    n, k = moments.shape
    rows = ebw_rows(a, moments, kappa, m_g)
    target = ebw_target(moments.mean(axis=0), kappa, m_g)
    d = 2 * k
    fun = ebw_objective(lambda lam: ebw_sums(rows, lam), n, d, target, ridge)
    lam = solve_dual(fun, d, radius, ridge, n=n, certify=certify, what="ebw")
    from scipy import special  # lazy, as in logit_sums

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
