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
"""ipw-logit and ebw: the smallest solver slack η (``certificate_slack`` raises it above the public
rounding floor). The certified distance of the computed λ̃ to the exact λ̂ must be ≤ η/2; the
stability bounds add η to ‖λ̂(D) − λ̂(D′)‖ (two_stage_calib)."""


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


def _ball_newton(fun, x0: FloatArray, radius: float, *, what: str,
                 strict: bool = True) -> FloatArray:
    """Minimise a smooth strongly convex f over the ℓ₂ ball ‖x‖ ≤ radius exactly.

    ``fun(x, mu)`` returns (value, gradient, Hessian) of f(x) + (mu/2)‖x‖². If the unconstrained
    minimiser lies outside the ball, the KKT condition ∇f(x) + μx = 0 with ‖x‖ = radius is solved by
    bisection on μ ≥ 0 (‖x(μ)‖ decreases in μ), each inner problem by damped Newton.
    With ``strict=False`` (the weights need no accuracy: the bound in use is the universal cap,
    valid for ANY weights) non-convergence never raises: the start point x0 (λ = 0: uniform-like
    weights) is used instead, and any result is made finite and feasible, so no data-dependent
    refusal exists on that path (never observed; a utility fallback only).
    """
    if not strict:
        try:
            x = _ball_newton(fun, x0, radius, what=what, strict=True)
        except (SolverError, np.linalg.LinAlgError, FloatingPointError):
            x = x0
        if not np.all(np.isfinite(x)):
            x = x0
        norm = float(np.linalg.norm(x))
        return x * (radius / norm) if norm > radius else x

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
            f"stage-1 {what} solve did not converge; no release was made. Try a larger ridge, "
            "or report this as a bug"
        )

    try:
        x = solve(0.0, x0)
    except SolverError:  # ill-conditioned at μ = 0 (e.g. curvature ≈ ridge): go to μ > 0
        x = x0
    else:
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


UNIT_ROUNDOFF = 2.0**-53
"""u of IEEE float64 (round to nearest)."""


def gradient_rounding_allowance(n: int, dim: int, radius: float, ridge: float) -> float:
    """A public bound ε_g on ‖ĝ − ∇f(x)‖ for the float64 gradients of the ipw-logit and ebw duals.

    Model (standard floating-point model, u = 2⁻⁵³; library exp/expit/logsumexp accurate to a few
    ulps): each gradient component is a sum of ≤ n + 1 terms whose absolute values sum to ≤ 2
    (logit: |x_ij| ≤ 1, |p_i − a_i| ≤ 1; ebw: Σp_i|b_ij| ≤ 1 and |target_j| ≤ κ ≤ 1), and any
    summation order errs by ≤ γ_n·Σ|terms| ≤ 2(n+1)u·2; the logits z = ⟨row, λ⟩ err by ≤ γ_d·R·√d
    (rows have ‖·‖ ≤ √d), moving p_i by ≤ that (logit: σ′ ≤ ¼; ebw: relative, plus the
    logsumexp's own (2R + log n + 8)u); the ridge term ρλ_j by ≤ 2uρR. Everything is multiplied by
    4 for safety and by √dim for the norm. A function of public inputs only.

    Notes
    -----
    Engines (dpcausal/engine/two_stage.py) sum the same terms per batch and add the batch sums on
    the client. That is just another summation tree over the same ≤ n + 1 terms, and γ_k·Σ|terms|
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


def certificate_slack(n: int, dim: int, radius: float, ridge: float) -> float:
    """η: the public solver slack of ipw-logit/ebw (the bounds add η to ‖λ̂(D) − λ̂(D′)‖).

    η = max(LOGIT_LAMBDA_SLACK, 16·F) with the certificate's public rounding floor
    F = R·sqrt(80u) + 4ε_g/ρ: the value ``certified_distance`` returns at a float point adjacent to
    the exact minimiser is ≤ F (the first term bounds sqrt(R² − r_lo²), the tangential ambiguity of
    a point certified inside the ball by a margin R − r_lo ≤ 40uR (``_inside``); the second the
    gradient rounding ε_g over ρ, counted twice). ``_certified`` needs ≤ η/2 ≥ 8F, so the
    certificate fails only if the solver (with its Newton polish) stops more than ~8× the rounding
    floor away from the exact minimiser (docs/proofs §5d).
    """
    floor = radius * math.sqrt(80.0 * UNIT_ROUNDOFF) + 4.0 * gradient_rounding_allowance(
        n, dim, radius, ridge) / ridge
    return max(LOGIT_LAMBDA_SLACK, 16.0 * floor)


def _norm_bounds(x: FloatArray) -> tuple[float, float, float]:
    """(r̂, r_lo, r_hi) with r_lo ≤ ‖x‖ ≤ r_hi.

    Each square x_j² is rounded once (relative u), ``math.fsum`` rounds the sum once (u), the
    square root once (u): r̂ = ‖x‖(1 + θ), |θ| ≤ 3u; 8u is used.
    """
    r2 = math.fsum(float(v) * float(v) for v in x)
    r = math.sqrt(r2)
    eps = 8.0 * UNIT_ROUNDOFF
    return r, r * (1.0 - eps), r * (1.0 + eps)


def certified_distance(grad: FloatArray, x: FloatArray, radius: float, rho: float, *,
                       grad_err: float = 0.0) -> float:
    """An upper bound on ‖x − x*‖ for x* = argmin of a ρ-strongly convex f over ‖x‖ ≤ radius.

    ``grad`` = ĝ, the computed ∇f(x), with ‖ĝ − ∇f(x)‖ ≤ ``grad_err`` = ε. Returns ∞ unless x is
    provably feasible (‖x‖ ≤ r_hi ≤ R). With v = x* − x and g = ∇f(x), strong convexity and the
    optimality of x* (⟨∇f(x*), x − x*⟩ ≥ 0, x feasible) give

        ρ‖v‖² ≤ −⟨g, v⟩ ≤ −⟨ĝ, v⟩ + ε‖v‖,       ‖x + v‖ ≤ R.                       (*)

    Three consequences, each an upper bound on ‖v‖; the minimum is returned (then inflated by
    a relative 64u for the rounding of this function's own scalar arithmetic):

    A. −⟨ĝ, v⟩ ≤ ‖ĝ‖‖v‖: ‖v‖ ≤ (‖ĝ‖ + ε)/ρ (valid for every feasible x, inside or on the sphere).
    B. Radial split ĝ = −α·x/r + t (r = ‖x‖, α = −⟨ĝ, x⟩/r ≥ 0 computed, t := ĝ + αx/r exact, so
       −⟨ĝ, v⟩ = α⟨x, v⟩/r − ⟨t, v⟩). ‖x + v‖² ≤ R² gives 2⟨x, v⟩ ≤ R² − r² − ‖v‖², hence
       κ‖v‖² ≤ c + s‖v‖ with κ = ρ + α/(2r_hi), c = α(R² − r_lo²)/(2r_lo), s = ‖t‖ + ε, so
       ‖v‖ ≤ (s + sqrt(s² + 4κc))/(2κ). Linear in the gradient error: at a float point next to an
       on-sphere minimiser, ‖v‖ ≲ (‖t‖ + ε)/ρ + sqrt(R² − r_lo²).
    C. The Frank–Wolfe gap, computed WITHOUT cancellation: ρ‖v‖² ≤ ⟨g, x⟩ + R‖g‖ ≤ gap(ĝ) + ε(r+R),
       where for x ≠ 0, ĝ ≠ 0, with unit vectors e = ĝ/‖ĝ‖, f = x/‖x‖ and cos = ⟨e, f⟩:
       ⟨ĝ, x⟩ = ‖ĝ‖‖x‖cos and ‖e + f‖² = 2 + 2cos, so
       ⟨ĝ, x⟩ + R‖ĝ‖ = ‖ĝ‖(R − ‖x‖) + ‖ĝ‖‖x‖(1 + cos) = ‖ĝ‖(R − ‖x‖) + ½‖ĝ‖‖x‖·‖e + f‖²,
       a sum of two nonnegative terms (no subtraction of nearly equal numbers; R − ‖x‖ is bounded
       by R − r_lo). The old form ⟨ĝ, x⟩ + R‖ĝ‖ lost ~1e-17 absolute, which sqrt(·/ρ) blew up
       to ~5e-7 at ρ = 1e-4 and made feasibility of the certificate data-dependent.
    Every computed scalar that enters with a positive sign is inflated for its own rounding
    (‖ĝ‖ by (2d + 8)u relative, ‖x‖ by 8u (``_norm_bounds``), ‖e + f‖ by 2(2d + 8)u absolute),
    so the result is a rigorous bound under the standard floating-point model.
    """
    u = UNIT_ROUNDOFF
    d = len(x)
    rel = (2.0 * d + 8.0) * u
    eps = float(grad_err)
    gnorm = float(np.linalg.norm(grad)) * (1.0 + rel)
    r, r_lo, r_hi = _norm_bounds(x)
    if r_hi > radius:
        return math.inf
    best = (gnorm + eps) / rho  # A
    if r > 0.0 and gnorm > 0.0:
        alpha = -float(grad @ x) / r
        if alpha > 0.0:  # B
            t = grad + (alpha / r) * x
            # t̂ errs from the exact t = ĝ + αx/‖x‖ by ≤ α(|1/r − 1/‖x‖|‖x‖ + 2u) + rounding
            s = float(np.linalg.norm(t)) * (1.0 + rel) + alpha * 2.0 * rel + gnorm * rel + eps
            kappa = rho + alpha / (2.0 * r_hi)
            c = alpha * (radius * radius - r_lo * r_lo) / (2.0 * r_lo) if r_lo > 0 else math.inf
            c = c * (1.0 + rel) + abs(c) * rel if math.isfinite(c) else c
            disc = s * s + 4.0 * kappa * c
            best = min(best, (s + math.sqrt(max(0.0, disc))) / (2.0 * kappa))
        e_plus_f = float(np.linalg.norm(grad / float(np.linalg.norm(grad)) + x / r)) + 2.0 * rel
        gap = gnorm * max(0.0, radius - r_lo) + 0.5 * gnorm * r_hi * e_plus_f * e_plus_f
        gap = gap * (1.0 + rel) + eps * (r_hi + radius)  # C
        best = min(best, math.sqrt(gap / rho))
    elif r == 0.0:
        best = min(best, math.sqrt((radius * gnorm + eps * radius) / rho))
    return best * (1.0 + 64.0 * u)


def logit_sums(feats: FloatArray, af: FloatArray, lam: FloatArray
               ) -> tuple[float, FloatArray, FloatArray]:
    """Σ(log(1 + e^z) − a·z), Σ(p − a)x and Σ p(1 − p)x xᵀ at z = xᵀλ over the rows ``feats``
    (sums, so an engine adds them over batches)."""
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


def solve_dual(fun, d: int, radius: float, ridge: float, *, n: int, certify: bool,
               what: str) -> FloatArray:
    """The stage-1 dual λ of ipw-logit or ebw: ``_ball_newton`` from 0, then (with ``certify``)
    ``_certified``. Shared by the in-memory path and the engine path (dpcausal/engine/two_stage.py),
    which differ only in how ``fun`` sums over the rows."""
    lam = _ball_newton(fun, np.zeros(d), radius, what=what, strict=certify)
    if certify:  # needed only by the method-specific bound (universal holds for any weights)
        lam = _certified(fun, lam, radius, ridge, n=n, what=what)
    return lam


def ipw_logit_weights(a: BoolArray, feats: FloatArray, *, radius: float, ridge: float,
                      certify: bool = True) -> FloatArray:
    """Ridge logistic propensity in the ℓ₂ ball (4.10), then arm-specific IPW.

    ``feats`` are the public-scaled covariates with an intercept column. With ``certify`` the
    computed λ̃ is certified to lie within η/2 of the exact minimiser, η = ``certificate_slack``
    (else SolverError). two_stage.compute_weights certifies only when the bound in use is
    method-specific (not clipped to the universal caps).
    """
    n, d = feats.shape
    af = a.astype(np.float64)
    fun = logit_objective(lambda lam: logit_sums(feats, af, lam), n, d, ridge)
    lam = solve_dual(fun, d, radius, ridge, n=n, certify=certify, what="ipw-logit")
    return ipw_from_scores(a, feats @ lam)


def _inside(x: FloatArray, radius: float) -> FloatArray:
    """x scaled so that it is provably in the ball (‖·‖ ≤ r_hi ≤ R), as close to the sphere as the
    rounding allows (R − ‖x‖ ≤ 32uR) when x is at or outside it."""
    r, _, r_hi = _norm_bounds(x)
    if r_hi <= radius or r == 0.0:
        return x
    return x * (radius / r * (1.0 - 20.0 * UNIT_ROUNDOFF))


def _kkt_polish(fun, x: FloatArray, radius: float, steps: int = 4) -> list[FloatArray]:
    """Newton steps on the sphere-KKT system ∇f(x) + μx = 0, ‖x‖² = R² (candidates, not trusted)."""
    out: list[FloatArray] = []
    r = float(np.linalg.norm(x))
    if r == 0.0:
        return out
    _, g, _ = fun(x, 0.0)
    mu = max(0.0, -float(g @ x) / (r * r))
    d = len(x)
    for _ in range(steps):
        _, g, h = fun(x, 0.0)
        jac = np.zeros((d + 1, d + 1))
        jac[:d, :d] = h + mu * np.eye(d)
        jac[:d, d] = x
        jac[d, :d] = x
        rhs = np.concatenate([g + mu * x, [0.5 * (float(x @ x) - radius * radius)]])
        try:
            step = np.linalg.solve(jac, rhs)
        except np.linalg.LinAlgError:
            break
        x = x - step[:d]
        mu = max(0.0, mu - float(step[d]))
        out.append(x.copy())
    return out


def _interior_polish(fun, x: FloatArray, steps: int = 3) -> list[FloatArray]:
    """Plain Newton steps of the unconstrained problem (candidates, not trusted)."""
    out: list[FloatArray] = []
    for _ in range(steps):
        _, g, h = fun(x, 0.0)
        try:
            x = x - np.linalg.solve(h, g)
        except np.linalg.LinAlgError:
            break
        out.append(x.copy())
    return out


def _certified(fun, lam: FloatArray, radius: float, rho: float, *, n: int,
               what: str) -> FloatArray:
    """A feasible point certified within η/2 of the exact ball minimiser, η = certificate_slack.

    Candidates: the solver's point, its projection on the sphere, and a few Newton polishes
    (interior and sphere-KKT), each made provably feasible; the one with the smallest rigorous
    ``certified_distance`` (gradient rounding allowance ε_g) is returned. Only if none reaches η/2
    is SolverError raised: that needs the solver to stop > 8× the public rounding floor away from
    the minimiser (see certificate_slack); it is not reachable through float cancellation.
    """
    d = len(lam)
    eta = certificate_slack(n, d, radius, rho)
    eps_g = gradient_rounding_allowance(n, d, radius, rho)
    norm = float(np.linalg.norm(lam))
    raw = [lam]
    if norm > 0:
        raw.append(lam * (radius / norm))
    best_x, best_c = lam, math.inf
    for start in list(raw):
        raw.extend(_interior_polish(fun, start))
        if norm > 0.5 * radius:
            raw.extend(_kkt_polish(fun, start, radius))
    for c in raw:
        if not np.all(np.isfinite(c)):
            continue
        c = _inside(c, radius)
        cert = certified_distance(fun(c, 0.0)[1], c, radius, rho, grad_err=eps_g)
        if cert < best_c:
            best_x, best_c = c, cert
        if best_c <= 0.0625 * eta:
            break
    if best_c > 0.5 * eta:
        raise SolverError(
            f"the stage-1 {what} solve could not certify its accuracy (needed for the stability "
            "bound); no release was made. Try a larger ridge, or report this as a bug"
        )
    return best_x


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
