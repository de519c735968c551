"""The certified dual solve of stage 1 (ipw-logit and ebw): Newton in the ℓ₂ ball, the certificate
that bounds the computed λ's distance to the exact minimiser, and the guaranteed fallback when it
does not certify (public constants and proof: :mod:`dpcausal.commands.two_stage.dual_accuracy`)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dpcausal.commands.two_stage.dual_accuracy import (
    LOGIT_LAMBDA_SLACK as LOGIT_LAMBDA_SLACK,  # re-exported (the statistical tests)
)
from dpcausal.commands.two_stage.dual_accuracy import (
    DualAccuracy,
    certificate_slack,
    gradient_rounding_allowance,
)
from dpcausal.errors import SolverError
from dpcausal.numerics import UNIT_ROUNDOFF

FloatArray = npt.NDArray[np.float64]
GRAD_TOL = 1e-10
"""Stationarity tolerance of the smooth stage-1 solves (relative to the problem's scale)."""


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
    """The stage-1 dual λ of ipw-logit or ebw. Shared by the in-memory path and the engine path
    (dpcausal/commands/two_stage/engine.py), which differ only in how ``fun`` sums over the rows.

    Without ``certify`` (the bound in use holds for any weights): ``_ball_newton`` from 0, made
    finite and feasible. With ``certify`` (a method-specific bound adds η): ``_ball_newton``, then
    ``_certified``; when the Newton solve fails or no candidate certifies, ``guaranteed_descent``
    from the best point available, whose result is within η/2 of the exact minimiser by proof
    (:mod:`dpcausal.commands.two_stage.dual_accuracy`). Either way the result is within η/2 and
    nothing raises on the data: no exit, message or number depends on which way the solve ended.
    """
    if not certify:  # needed only by the method-specific bound (universal holds for any weights)
        return _ball_newton(fun, np.zeros(d), radius, what=what, strict=False)
    try:
        lam = _ball_newton(fun, np.zeros(d), radius, what=what, strict=True)
    except (SolverError, np.linalg.LinAlgError, FloatingPointError):
        lam = np.zeros(d)
    certified = _certified(fun, lam, radius, ridge, n=n)
    if certified is not None:
        return certified
    return guaranteed_descent(fun, lam, DualAccuracy(n, d, radius, ridge))


def guaranteed_descent(fun, start: FloatArray, acc: DualAccuracy) -> FloatArray:
    """The fallback: projected gradient descent λ ← P_R(λ − s·ĝ) from P_R(start) for the public
    ``acc.steps`` steps (fewer when a step's point certifies, which bounds its distance just as
    well); the result is within η/2 of the exact minimiser by the contraction bound
    (:mod:`dpcausal.commands.two_stage.dual_accuracy`), with no check that could fail."""
    eta = certificate_slack(acc.n, acc.dim, acc.radius, acc.ridge)
    eps_g = acc.grad_allowance
    lam = _inside(_finite(start), acc.radius)
    for _ in range(acc.steps):
        grad = fun(lam, 0.0)[1]
        if certified_distance(grad, lam, acc.radius, acc.ridge, grad_err=eps_g) <= 0.5 * eta:
            return lam
        lam = _inside(_finite(lam - acc.step * grad), acc.radius)
    return lam


def _finite(x: FloatArray) -> FloatArray:
    """x, or 0 when it is not finite (outside the rounding model: never on feasible points)."""
    x = np.asarray(x, dtype=np.float64)
    return x if bool(np.all(np.isfinite(x))) else np.zeros_like(x)


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


def _certified(fun, lam: FloatArray, radius: float, rho: float, *,
               n: int) -> FloatArray | None:
    """A feasible point certified within η/2 of the exact ball minimiser, η = certificate_slack,
    or None (then ``solve_dual`` runs the guaranteed fallback).

    Candidates: the solver's point, its projection on the sphere, and a few Newton polishes
    (interior and sphere-KKT), each made provably feasible; the one with the smallest rigorous
    ``certified_distance`` (gradient rounding allowance ε_g) is returned if it is ≤ η/2.
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
        try:
            raw.extend(_interior_polish(fun, start))
            if norm > 0.5 * radius:
                raw.extend(_kkt_polish(fun, start, radius))
        except FloatingPointError:  # candidates only: a failed polish proposes nothing
            pass
    for c in raw:
        if not np.all(np.isfinite(c)):
            continue
        c = _inside(c, radius)
        cert = certified_distance(fun(c, 0.0)[1], c, radius, rho, grad_err=eps_g)
        if cert < best_c:
            best_x, best_c = c, cert
        if best_c <= 0.0625 * eta:
            break
    return best_x if best_c <= 0.5 * eta else None
