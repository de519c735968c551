"""The certified dual solve of stage 1 (ipw-logit and ebw): Newton in the ℓ₂ ball, the certificate
that bounds the computed λ's distance to the exact minimiser, and its public rounding allowances."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dpcausal.errors import SolverError

FloatArray = npt.NDArray[np.float64]
GRAD_TOL = 1e-10
"""Stationarity tolerance of the smooth stage-1 solves (relative to the problem's scale)."""
LOGIT_LAMBDA_SLACK = 1e-6
"""ipw-logit and ebw: the smallest solver slack η (``certificate_slack`` raises it above the public
rounding floor). The certified distance of the computed λ̃ to the exact λ̂ must be ≤ η/2; the
stability bounds add η to ‖λ̂(D) − λ̂(D′)‖ (calibration.py)."""


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


def solve_dual(fun, d: int, radius: float, ridge: float, *, n: int, certify: bool,
               what: str) -> FloatArray:
    """The stage-1 dual λ of ipw-logit or ebw: ``_ball_newton`` from 0, then (with ``certify``)
    ``_certified``. Shared by the in-memory path and the engine path
    (dpcausal/commands/two_stage/engine.py), which differ only in how ``fun`` sums over the rows."""
    lam = _ball_newton(fun, np.zeros(d), radius, what=what, strict=certify)
    if certify:  # needed only by the method-specific bound (universal holds for any weights)
        lam = _certified(fun, lam, radius, ridge, n=n, what=what)
    return lam


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
