"""The weighted Huber-hinge ERM of :mod:`dpcausal.solvers.erm`, solved over an engine's passes.

Every pass is one ``engine.map_sum`` of small per-batch statistics:

* **gradient pass** (:func:`grad_hess`): Σ w ℓ'(y vᵀθ) y v and the Hessian Σ_quad w v vᵀ/(2h) at θ
  (a d-vector and a d×d matrix per batch), margins computed from scratch;
* **line pass** (:func:`step_pass`): along φ(t) = G(θ − t·step), at K sorted points t
  (:func:`line_derivative`): φ'(t) and φ''(t), Σ|w u| (the scale of φ' in the rounding
  tolerance) and, for each interval between neighbouring points, the number of breakpoints of
  φ' in it with the mean and spread of their positions (3 × K numbers); plus the gradient and
  Hessian at one or two candidate points θ − t_c·step, so that an accepted candidate costs no
  further pass;
* **value pass** (:func:`value_grad`, fallback only): G's data sum and its gradient at θ.

Newton's method (:func:`newton`) takes the Newton direction from a gradient pass and finds the step
length by an **exact line search over passes** (:func:`line_search`) to the precision of
:func:`dpcausal.solvers.erm._newton_line_search`: φ' is increasing and piecewise linear, so it
is bracketed, never interpolated. The first line pass evaluates t = 0, the grid ``T_GRID`` and the
full step t = 1 with the gradient and Hessian at θ − step: if φ'(1) ≤ tol the full step is taken
(one pass per iteration, as before). Otherwise the sign change of φ' gives the bracket [lo, hi]
between neighbouring points, and the next pass evaluates inside it the candidates — the secant
when no breakpoint lies inside (φ' is linear there: exact), the Newton point from the root's side
when all breakpoints sit at one position (two linear pieces, the tied rows of binary covariates:
exact), else the root of the cubic matching φ' and φ'' at both ends (fourth order where φ' is
smooth) and the Newton point from the nearer end (exact when no breakpoint lies between it and
the root) — together with the other estimates, geometric clusters around them and a uniform grid
(the bracket shrinks ≥ 8× per pass whatever happens), and the gradient and Hessian at the
candidates. The search ends at a point with |φ'(t)| ≤ tol = max(1e-10·|φ'(0)|, 1e-13·(Σ|w u| +
γ(|θ·step| + ‖step‖²))) (erm's rule; if it is not a candidate a gradient pass follows), or at a
bracket below 1e-14 relative (the end with the smaller |φ'|), or after ``MAX_LINE_PASSES``.
Typically one pass (full step) or two to four.

When Newton from the start (the warm start on a fixed subsample for large n, else θ = 0) does not
reach the tolerance, the chain of :func:`dpcausal.solvers.erm.solve_weighted_erm` follows: Newton
from θ = 0, then L-BFGS-B from θ = 0 (one value pass per function evaluation, erm's options)
followed by the same Newton polish. :class:`SolverError` only when all of them fail.

The certificate is unchanged: the stopping test ‖∇G(θ)‖ ≤ τ always uses a gradient computed from
scratch over every row at exactly the returned θ (a gradient pass at θ, or a line pass whose
candidate is θ, with the margins y vᵀθ recomputed), so the returned θ is within τ/γ of the exact
minimiser, as in memory. The line search, the fallbacks and the start only shape the path. The
number of passes depends on the data and is never published (as before).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import optimize

from dpcausal.engine.base import Engine
from dpcausal.errors import SolverError
from dpcausal.solvers.erm import (
    WARM_START_MIN_ROWS,
    WARM_START_ROWS,
    ERMSolution,
    HuberHinge,
    solve_weighted_erm,
)

FloatArray = npt.NDArray[np.float64]
Part = tuple[FloatArray, FloatArray, FloatArray]
"""One prepared batch: rows v (‖v_i‖ ≤ 1), labels y = ±1, weights w ≥ 0."""

T_GRID = np.unique(np.concatenate([np.outer(10.0 ** np.arange(-6, -2), [1.0, 2.0, 5.0]).ravel(),
                                   [0.01, 0.025], np.linspace(0.05, 1.0, 20)]))
FIRST_POINTS = np.concatenate([[0.0], T_GRID])
"""The first line pass's points (the last is the full step t = 1)."""
CLUSTER = 10.0 ** -np.array([1, 2, 3, 4, 6, 8, 10, 12], dtype=np.float64)
"""Offsets (× bracket width) around the candidate in later line passes."""
SIDE_CLUSTER = 10.0 ** -np.array([3, 6, 9], dtype=np.float64)
"""Offsets (× bracket width) around the other candidates."""
UNIFORM = 7
"""Interior points of the uniform grid over the bracket in later line passes (shrinks it ≥ 8×)."""
MAX_LINE_PASSES = 16
BLOCK = 16_384


def _dloss(z: FloatArray, h: float) -> FloatArray:
    """ℓ'(z) = −clip((1 + h − z)/(2h), 0, 1) of the Huber hinge."""
    return -np.clip(((1.0 + h) - z) / (2.0 * h), 0.0, 1.0)


def _grad_hess(v: FloatArray, y: FloatArray, w: FloatArray, z: FloatArray, h: float
               ) -> tuple[FloatArray, FloatArray]:
    grad = v.T @ (w * _dloss(z, h) * y)
    active = np.abs(1.0 - z) <= h
    va = v[active]
    return grad, va.T @ (va * (w[active] * (0.5 / h))[:, None])


def _line(w: FloatArray, z: FloatArray, u: FloatArray, h: float, ts: FloatArray) -> FloatArray:
    """The line statistics at the sorted points ``ts`` (a 6 × K array):

    row 0, 1: φ'_data(t) = −Σ w ℓ'(z − t u) u and φ''_data(t) = Σ_{|1 − z + t u| ≤ h} w u²/(2h);
    row 2: Σ|w u| in column 0 (the scale of φ' for the rounding tolerance);
    rows 3, 4, 5: for each interval [ts[k], ts[k+1]): the number of breakpoints of φ' in it (where
    a row's margin crosses 1 ± h), and Σ and Σ² of their offsets from ts[k] (a zero spread means
    one breakpoint location, where φ' is two linear pieces).

    A row whose margin z − t u stays in one piece of ℓ for every t in [ts[0], ts[-1]] (the
    margin is monotone in t, so checking both ends suffices) contributes a + b·t, summed once;
    only the rows that change piece are evaluated point by point (as erm's line search)."""
    k_pts = ts.size
    out = np.zeros((6, k_pts))
    t_min, t_max = float(ts[0]), float(ts[-1])
    inv2h = 0.5 / h
    a = b = swu = 0.0
    for lo in range(0, z.size, BLOCK):
        zb, ub = z[lo:lo + BLOCK], u[lo:lo + BLOCK]
        wub = w[lo:lo + BLOCK] * ub
        swu += float(np.abs(wub).sum())
        z0, z1 = zb - t_min * ub, zb - t_max * ub
        lin = (z0 < 1.0 - h) & (z1 < 1.0 - h)
        quad = (np.abs(1.0 - z0) <= h) & (np.abs(1.0 - z1) <= h)
        moving = ~(lin | quad | ((z0 > 1.0 + h) & (z1 > 1.0 + h)))
        a += float(wub[lin].sum()) + inv2h * float(wub[quad] @ ((1.0 + h) - zb[quad]))
        b += inv2h * float(wub[quad] @ ub[quad])
        if not moving.any():
            continue
        zm, um, wum = zb[moving], ub[moving], wub[moving]
        zt = zm[:, None] - um[:, None] * ts[None, :]
        out[0] -= wum @ _dloss(zt, h)
        np.subtract(1.0, zt, out=zt)
        np.abs(zt, out=zt)
        out[1] += inv2h * ((wum * um) @ (zt <= h))
        if k_pts > 1:
            bps = np.concatenate([(zm - (1.0 + h)) / um, (zm - (1.0 - h)) / um])
            bps = bps[(bps > t_min) & (bps < t_max)]
            idx = np.clip(np.searchsorted(ts, bps, side="right") - 1, 0, k_pts - 2)
            off = bps - ts[idx]
            out[3, :-1] += np.bincount(idx, minlength=k_pts - 1)
            out[4, :-1] += np.bincount(idx, weights=off, minlength=k_pts - 1)
            out[5, :-1] += np.bincount(idx, weights=off * off, minlength=k_pts - 1)
    out[0] += a + b * ts
    out[1] += b
    out[2, 0] = swu
    return out


def grad_hess(part: Part, start: int, *, theta: FloatArray, h: float
              ) -> tuple[FloatArray, FloatArray]:
    """Σ_batch w ℓ'(y vᵀθ) y v and Σ_{|1−y vᵀθ| ≤ h} w v vᵀ/(2h)."""
    v, y, w = part
    return _grad_hess(v, y, w, y * (v @ theta), h)


def line_derivative(part: Part, start: int, *, theta: FloatArray, step: FloatArray, h: float,
                    ts: FloatArray) -> FloatArray:
    """φ' and φ'' data sums at each t of ``ts`` and Σ|w u| (see :func:`_line`), with z = y vᵀθ
    and u = y vᵀstep."""
    v, y, w = part
    return _line(w, y * (v @ theta), y * (v @ step), h, ts)


def step_pass(part: Part, start: int, *, theta: FloatArray, step: FloatArray, h: float,
              ts: FloatArray, at: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """One line pass: :func:`line_derivative` along θ − t·step and the gradients and Hessians at
    the candidates, the rows of ``at`` (as :func:`grad_hess`, margins computed from scratch),
    used when a candidate is accepted."""
    v, y, w = part
    line = line_derivative(part, start, theta=theta, step=step, h=h, ts=ts)
    pairs = [_grad_hess(v, y, w, y * (v @ point), h) for point in at]
    return np.stack([g for g, _ in pairs]), np.stack([m for _, m in pairs]), line


def value_grad(part: Part, start: int, *, theta: FloatArray, h: float
               ) -> tuple[float, FloatArray]:
    """Σ_batch w ℓ(y vᵀθ) and Σ_batch w ℓ'(y vᵀθ) y v (the L-BFGS-B fallback's pass)."""
    v, y, w = part
    z = y * (v @ theta)
    value = float(w @ HuberHinge(h).value(z))
    return value, v.T @ (w * _dloss(z, h) * y)


def stride_rows(part: Part, start: int, *, k: int) -> Part:
    """The rows whose global index is a multiple of k (a public, partition-free subsample)."""
    v, y, w = part
    sel = np.flatnonzero((np.arange(start, start + y.size) % k) == 0)
    return v[sel], y[sel], w[sel]


@dataclass(frozen=True, slots=True)
class _Bracket:
    """[lo, hi] with φ'(lo) < 0 < φ'(hi), the curvatures there and the breakpoints inside."""

    lo: float
    lo_val: float
    lo_curv: float
    hi: float
    hi_val: float
    hi_curv: float
    count: float
    mean: float
    spread: float


def _hermite_root(br: _Bracket) -> float:
    """A root in (lo, hi) of the cubic matching φ' and φ'' at both ends: fourth order where φ' is
    smooth (many small breakpoints), where the Newton points are second order. The cubic is
    negative at lo and positive at hi, so bisection on it always finds a root."""
    lo, hi = br.lo, br.hi
    scale = max(-br.lo_val, br.hi_val)
    p0, p1 = br.lo_val / scale, br.hi_val / scale
    m0, m1 = br.lo_curv * (hi - lo) / scale, br.hi_curv * (hi - lo) / scale
    c3, c2 = 2.0 * p0 - 2.0 * p1 + m0 + m1, -3.0 * p0 + 3.0 * p1 - 2.0 * m0 - m1
    s_lo, s_hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (s_lo + s_hi)
        if ((c3 * mid + c2) * mid + m0) * mid + p0 < 0.0:
            s_lo = mid
        else:
            s_hi = mid
    return lo + (hi - lo) * 0.5 * (s_lo + s_hi)


def _candidate(br: _Bracket) -> tuple[list[float], list[float]]:
    """The most likely roots in (lo, hi) (the next line pass's one or two candidates, which get a
    gradient and Hessian) and the other estimates.

    No breakpoint inside: φ' is linear, the secant is exact. All breakpoints at one location b:
    φ' is two linear pieces, the Newton point from the end on the root's side of b is exact.
    Otherwise the root of the cubic matching φ' and φ'' at both ends (fourth order where φ' is
    smooth); the Newton points and the secant are tried too."""
    lo, hi, width = br.lo, br.hi, br.hi - br.lo
    c_hi = hi - br.hi_val / br.hi_curv
    c_lo = lo - br.lo_val / br.lo_curv
    c_sec = hi - br.hi_val * width / (br.hi_val - br.lo_val)
    c_cub = _hermite_root(br)
    if br.count == 0:
        order = [c_sec, c_lo, c_hi, c_cub]
    elif br.spread <= (1e-9 * width) ** 2:
        at = br.lo + br.mean
        order = ([c_lo, c_hi] if br.lo_val + br.lo_curv * (at - lo) >= 0.0 else [c_hi, c_lo])
        order += [c_cub, c_sec]
    else:
        order = [c_cub, c_hi, c_lo, c_sec]
    inside = list(dict.fromkeys(c for c in order if lo < c < hi))
    if not inside:
        inside = [0.5 * (lo + hi)]
    n_cand = 1 if br.count == 0 else 2  # a linear φ' needs no second guess
    return inside[:n_cand], inside[n_cand:]


def _next_points(br: _Bracket) -> tuple[list[float], FloatArray] | None:
    """The next line pass's candidates and sorted points in [lo, hi] (both ends included, so that
    the bracket is always between neighbouring points); None when (lo, hi) has no representable
    interior point."""
    lo, hi, width = br.lo, br.hi, br.hi - br.lo
    cands, others = _candidate(br)
    if not lo < cands[0] < hi:
        return None
    pts = [np.array([lo, hi, *cands, *others]),
           lo + width * np.arange(1, UNIFORM + 1) / (UNIFORM + 1),
           cands[0] - CLUSTER * width, cands[0] + CLUSTER * width]
    for c in cands[1:] + others:
        pts += [c - SIDE_CLUSTER * width, c + SIDE_CLUSTER * width]
    allp = np.concatenate(pts)
    return cands, np.unique(allp[(allp >= lo) & (allp <= hi)])


def line_search(engine: Engine, theta: FloatArray, step: FloatArray, *, d0: float, curv0: float,
                gamma: float, h: float) -> tuple[float, FloatArray | None, FloatArray | None]:
    """argmin_t G(θ − t·step) for t ∈ [0, 1], to float precision of φ' (as erm's
    ``_newton_line_search``), over line passes; returns (t, data gradient, data Hessian) at
    θ − t·step (computed there from scratch), the last two None when that point was not one of
    a pass's candidates.

    ``d0`` = φ'(0) = −∇G(θ)·step < 0 and ``curv0`` = φ''(0) come from the gradient pass at θ.
    """
    th_s = float(theta @ step)
    ss = float(step @ step)
    lo, lo_val, hi, hi_val = 0.0, d0, 1.0, np.inf
    ts, cands = FIRST_POINTS, [1.0]
    tol = np.inf
    for _ in range(MAX_LINE_PASSES):
        at = np.stack([theta - c * step for c in cands])
        g_at, h_at, line = engine.map_sum(functools.partial(
            step_pass, theta=theta, step=step, h=h, ts=ts, at=at))
        vals = line[0] - gamma * (th_s - ts * ss)
        curvs = line[1] + gamma * ss
        if not np.isfinite(tol):  # the rounding level of φ' (erm's rule)
            tol = max(1e-10 * abs(d0),
                      1e-13 * (float(line[2, 0]) + gamma * (abs(th_s) + ss)))
            vals[0], curvs[0] = d0, curv0  # t = 0: the gradient pass's exact values
        c_vals = vals[np.searchsorted(ts, cands)]
        if cands == [1.0] and c_vals[0] <= tol:  # the full step (φ' ≤ 0 on all of [0, 1])
            return 1.0, g_at[0], h_at[0]
        if np.any(np.abs(c_vals) <= tol):
            k = int(np.argmin(np.abs(c_vals)))
            return cands[k], g_at[k], h_at[k]
        near = np.flatnonzero(np.abs(vals) <= tol)
        if near.size:
            return float(ts[near[np.argmin(np.abs(vals[near]))]]), None, None
        pos = np.flatnonzero(vals > 0.0)
        j = int(pos[0]) if pos.size else ts.size - 1
        if j == 0 or vals[j] <= 0.0:  # no sign change (rounding): the better end
            break
        lo, lo_val, hi, hi_val = float(ts[j - 1]), float(vals[j - 1]), float(ts[j]), float(vals[j])
        count = float(line[3, j - 1])
        mean = float(line[4, j - 1]) / count if count else 0.0
        spread = float(line[5, j - 1]) / count - mean * mean if count else 0.0
        br = _Bracket(lo, lo_val, float(curvs[j - 1]), hi, hi_val, float(curvs[j]),
                      count, mean, spread)
        nxt = _next_points(br) if hi - lo > 1e-14 * max(1.0, hi) else None
        if nxt is None:
            break
        cands, ts = nxt
    t = lo if abs(lo_val) < abs(hi_val) else hi
    return t, None, None


def warm_start(engine: Engine, *, d: int, gamma: float, loss: HuberHinge,
               grad_tol: float) -> FloatArray:
    """The in-memory solver's warm start on the same rows (every k-th global row, weights × n/m)."""
    n = engine.n_rows
    if n < WARM_START_MIN_ROWS:
        return np.zeros(d)
    k = n // WARM_START_ROWS
    parts = engine.map_list(functools.partial(stride_rows, k=k))
    vs = np.concatenate([p[0] for p in parts])
    ys = np.concatenate([p[1] for p in parts])
    ws = np.concatenate([p[2] for p in parts])
    scale = n / ys.size
    try:
        theta = solve_weighted_erm(vs, ys, ws * scale, gamma=gamma, loss=loss,
                                   grad_tol=grad_tol * scale).theta
    except SolverError:
        return np.zeros(d)
    return theta if bool(np.all(np.isfinite(theta))) else np.zeros(d)


def newton(engine: Engine, theta: FloatArray, *, gamma: float, h: float, grad_tol: float,
           max_newton: int) -> tuple[FloatArray, float, int]:
    """Newton with the exact line search from ``theta``; (θ, ‖∇G(θ)‖, iterations).

    One pass per iteration when the full step is taken (its gradient and Hessian come with the
    line pass), two when a later line pass's candidate is accepted, one more when another point
    is."""
    d = theta.size
    g_data, h_data = engine.map_sum(functools.partial(grad_hess, theta=theta, h=h))
    for it in range(max_newton + 1):
        grad = g_data + gamma * theta
        gnorm = float(np.linalg.norm(grad))
        if gnorm <= grad_tol or it == max_newton or not np.isfinite(gnorm):
            return theta, gnorm, it
        hess = h_data + gamma * np.eye(d)
        step = np.linalg.solve(hess, grad)
        d0 = -float(grad @ step)
        if not d0 < 0.0:
            return theta, gnorm, it
        curv0 = float(step @ hess @ step)
        t, g_new, h_new = line_search(engine, theta, step, d0=d0, curv0=curv0, gamma=gamma, h=h)
        if t * float(np.linalg.norm(step)) <= 1e-15 * (1.0 + float(np.linalg.norm(theta))):
            return theta, gnorm, it
        theta = theta - t * step
        if g_new is None or h_new is None:
            g_new, h_new = engine.map_sum(functools.partial(grad_hess, theta=theta, h=h))
        g_data, h_data = g_new, h_new
    raise AssertionError("unreachable")  # pragma: no cover


def lbfgs_start(engine: Engine, *, d: int, gamma: float, h: float, grad_tol: float
                ) -> FloatArray:
    """erm's L-BFGS-B fallback start (same options), one value pass per function evaluation."""

    def fun(x: FloatArray) -> tuple[float, FloatArray]:
        x = np.asarray(x, dtype=np.float64)
        value, grad = engine.map_sum(functools.partial(value_grad, theta=x, h=h))
        return float(value) + 0.5 * gamma * float(x @ x), grad + gamma * x

    res = optimize.minimize(
        fun, np.zeros(d), jac=True, method="L-BFGS-B",
        options={"maxiter": 200, "gtol": grad_tol / np.sqrt(d), "ftol": 1e-15},
    )
    x = np.asarray(res.x, dtype=np.float64)
    return x if bool(np.all(np.isfinite(x))) else np.zeros(d)


def solve_erm_engine(engine: Engine, *, d: int, gamma: float, loss: HuberHinge, grad_tol: float,
                     max_newton: int = 100) -> ERMSolution:
    """Minimise G(θ) = Σ w ℓ(y vᵀθ) + (γ/2)‖θ‖² over the engine's rows to ‖∇G‖ ≤ ``grad_tol``.

    Newton from the warm start (θ = 0 for small n), then Newton from θ = 0, then L-BFGS-B
    followed by the Newton polish (the chain of :func:`solve_weighted_erm`).

    Raises
    ------
    SolverError
        When the tolerance is not reached (never returns an inexact solution silently).
    """
    if gamma <= 0:
        raise ValueError("gamma must be > 0")
    h = loss.h
    start = warm_start(engine, d=d, gamma=gamma, loss=loss, grad_tol=grad_tol)
    theta, gnorm, its = newton(engine, start, gamma=gamma, h=h, grad_tol=grad_tol,
                               max_newton=max_newton)
    if not gnorm <= grad_tol and np.any(start != 0.0):  # NaN too, as erm
        theta, gnorm, more = newton(engine, np.zeros(d), gamma=gamma, h=h,
                                    grad_tol=grad_tol, max_newton=max_newton)
        its += more
    if not gnorm <= grad_tol:
        x0 = lbfgs_start(engine, d=d, gamma=gamma, h=h, grad_tol=grad_tol)
        theta, gnorm, more = newton(engine, x0, gamma=gamma, h=h, grad_tol=grad_tol,
                                    max_newton=max_newton)
        its += more
    if gnorm <= grad_tol:
        return ERMSolution(theta, gnorm, its)
    raise SolverError(
        f"the weighted ERM solve did not reach its stated gradient tolerance {grad_tol:.3g} on "
        "the engine, so its sensitivity bound would not hold; try a larger gamma, or report this "
        "as a bug"
    )


__all__: list[Any] = ["solve_erm_engine"]
