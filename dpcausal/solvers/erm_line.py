"""The exact line search of :mod:`dpcausal.solvers.erm`'s Newton method, over a backend's passes.

Along φ(t) = G(θ − t·step), φ' is increasing and piecewise linear, so its root in [0, 1] is
bracketed, never interpolated. When Newton's previous step was a full one, the full step is first
tried alone: one pass computes the gradient and Hessian at θ − step and Σ|w u| (the scale of the
tolerance), and if φ'(1) = −∇G(θ − step)·step ≤ tol it is taken (one pass per Newton iteration,
with no line statistics); if not, the grid pass below follows without a candidate. Otherwise the
first line pass evaluates t = 0, the grid ``T_GRID`` and the full step t = 1 with the gradient and
Hessian at θ − step: if φ'(1) ≤ tol the full step is taken. Otherwise the sign change of φ' gives
the bracket [lo, hi] between neighbouring points, and the next pass evaluates inside it the
candidates — the secant when no breakpoint lies inside (φ' is linear there: exact), the Newton
point from the root's side when all breakpoints sit at one position (two linear pieces, the tied
rows of binary covariates: exact), else the root of the cubic matching φ' and φ'' at both ends
(fourth order where φ' is smooth) and the Newton point from the nearer end — together with the
other estimates, geometric clusters around them and a uniform grid (the bracket shrinks ≥ 8× per
pass whatever happens), and the gradient and Hessian at the candidates. The search ends at a point
with |φ'(t)| ≤ tol = max(1e-10·|φ'(0)|, 1e-13·(Σ|w u| + γ(|θ·step| + ‖step‖²))) (the rounding
level of φ'; if it is not a candidate a gradient pass follows), or at a bracket below 1e-14
relative (the end with the smaller |φ'|), or after ``MAX_LINE_PASSES``. Typically one pass (full
step) or two to four.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.solvers.backend import Backend
from dpcausal.solvers.erm_passes import full_step_pass, step_pass

FloatArray = npt.NDArray[np.float64]


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


@dataclass(frozen=True, slots=True)
class _Bracket:
    """[lo, hi] with φ'(lo) < 0 < φ'(hi), the curvatures there and the breakpoints inside (their
    count NaN when not known: after the full step tried alone)."""

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


def line_search(backend: Backend, theta: FloatArray, step: FloatArray, *, d0: float, curv0: float,
                gamma: float, h: float, full_step_first: bool = False
                ) -> tuple[float, FloatArray | None, FloatArray | None]:
    """argmin_t G(θ − t·step) for t ∈ [0, 1], to float precision of φ', over line passes; returns
    (t, data gradient, data Hessian) at θ − t·step (computed there from scratch), the last two
    None when that point was not one of a pass's candidates.

    ``d0`` = φ'(0) = −∇G(θ)·step < 0 and ``curv0`` = φ''(0) come from the gradient pass at θ.
    With ``full_step_first`` (Newton's last step was a full one) the first pass tries the full
    step alone (:func:`~dpcausal.solvers.erm_passes.full_step_pass`: the gradient and Hessian at
    θ − step, φ'(1) = −∇G(θ − step)·step, no line statistics); only when it is rejected do the
    line passes follow, from the grid.
    """
    th_s = float(theta @ step)
    ss = float(step @ step)
    lo, lo_val, hi, hi_val = 0.0, d0, 1.0, np.inf
    ts, cands = FIRST_POINTS, [1.0]
    tol = np.inf

    def rounding_level(swu: float) -> float:  # the rounding level of φ' (erm's rule)
        return max(1e-10 * abs(d0), 1e-13 * (swu + gamma * (abs(th_s) + ss)))

    if full_step_first:
        full = theta - step
        g_full, h_full, swu = backend.map_sum(functools.partial(
            full_step_pass, step=step, at=full, h=h))
        tol = rounding_level(float(swu))
        d1 = -float((g_full + gamma * full) @ step)
        if d1 <= tol:  # φ'(1) ≤ tol: the full step
            return 1.0, g_full, h_full
        # t = 1 rejected: [0, 1] is a bracket with φ' and φ'' at both ends; the next pass
        # evaluates its candidates with the grid (which finds a root far below 1)
        br = _Bracket(0.0, d0, curv0, 1.0, d1, float(step @ h_full @ step) + gamma * ss,
                      math.nan, 0.0, math.nan)
        nxt = _next_points(br) if np.isfinite(d1) and br.hi_curv > 0.0 else None
        cands, ts = ([], FIRST_POINTS) if nxt is None else (nxt[0], np.union1d(FIRST_POINTS,
                                                                               nxt[1]))
    for first in [True] + [False] * (MAX_LINE_PASSES - 1):
        at = np.array([theta - c * step for c in cands]).reshape(len(cands), theta.size)
        g_at, h_at, line = backend.map_sum(functools.partial(
            step_pass, theta=theta, step=step, h=h, ts=ts, at=at))
        vals = line[0] - gamma * (th_s - ts * ss)
        curvs = line[1] + gamma * ss
        if first:
            tol = min(tol, rounding_level(float(line[2, 0])))
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
