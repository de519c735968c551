"""A reference for the tests: the exact line search of the former in-memory ERM solver, which
worked on the n-vectors of margins directly (dpcausal's solver now runs every pass through a
backend, :mod:`dpcausal.solvers.erm_line`). Test helper only: nothing in dpcausal imports it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def _dloss(z: FloatArray, h: float) -> FloatArray:
    """ℓ'(z) of the Huber hinge, −clip((1 + h − z)/(2h), 0, 1): the same values as
    :meth:`HuberHinge.derivative`, in one pass with no ``np.where`` temporaries."""
    out = (1.0 + h) - z
    out /= 2.0 * h
    np.clip(out, 0.0, 1.0, out=out)
    np.negative(out, out=out)
    return out


def _newton_line_search(z: FloatArray, u: FloatArray, w: FloatArray, h: float, gamma: float,
                        theta: FloatArray, step: FloatArray, d0: float) -> float:
    """argmin_t G(θ − t·step) for t ∈ [0, 1], to float precision of the derivative.

    φ(t) = G(θ − t·step) is convex and piecewise quadratic; with z = y·(vθ) and u = y·(v·step),
    φ'(t) = −Σ w_i ℓ'(z_i − t u_i) u_i − γ(θ − t·step)·step is increasing and piecewise linear,
    and φ''(t) = Σ_{|1 − z_i + t u_i| ≤ h} w_i u_i²/(2h) + γ‖step‖². A Newton iteration on φ',
    safeguarded by a bracket, finds the root. Rows whose margin stays in one piece of ℓ for every
    t ∈ [0, 1] (the pieces are intervals and z_i − t u_i is monotone, so checking both ends
    suffices) contribute a fixed a + b·t, summed once; each evaluation then only visits the rows
    that change piece. Working on φ' rather than on values of G avoids the cancellation that makes
    value-based (Armijo) tests fail near the optimum when G is a sum of many terms.
    ``d0`` = φ'(0) = −∇G(θ)·step < 0.
    """
    inv2h = 1.0 / (2.0 * h)
    th_s = float(theta @ step)
    ss = float(step @ step)
    z1 = z - u
    lin0, lin1 = z < 1.0 - h, z1 < 1.0 - h
    zero0, zero1 = z > 1.0 + h, z1 > 1.0 + h
    lin = lin0 & lin1
    quad = ~(lin0 | zero0) & ~(lin1 | zero1)
    moving = np.flatnonzero(~(lin | quad | (zero0 & zero1)))
    wu = w * u
    a = float(wu[lin].sum()) + inv2h * float(wu[quad] @ ((1.0 + h) - z[quad]))
    b = inv2h * float(wu[quad] @ u[quad])
    zm, um, wm = z[moving], u[moving], w[moving]
    # rounding level of φ': below it the sign of φ' carries no information
    tol = max(1e-10 * abs(d0), 1e-13 * (float(np.abs(wu).sum()) + gamma * (abs(th_s) + ss)))

    def dphi(t: float) -> tuple[float, float]:
        zt = zm - t * um
        val = a + b * t - float((wm * _dloss(zt, h)) @ um) - gamma * (th_s - t * ss)
        q = np.abs(1.0 - zt) <= h
        curv = b + inv2h * float(wm[q] @ (um[q] * um[q])) + gamma * ss
        return val, curv

    hi_val, hi_curv = dphi(1.0)
    if hi_val <= tol:
        return 1.0
    lo, hi = 0.0, 1.0
    lo_val = d0
    # the secant uses Illinois-damped end values, so a fixed end cannot stall it
    lo_sec, hi_sec, side = lo_val, hi_val, 0
    t, val, curv = 1.0, hi_val, hi_curv
    for _ in range(200):
        cand = t - val / curv  # Newton on φ' (exact once the quadratic pieces stop changing)
        if not lo < cand < hi:
            cand = hi - hi_sec * (hi - lo) / (hi_sec - lo_sec)  # regula falsi in the bracket
            if not lo < cand < hi:
                cand = 0.5 * (lo + hi)
        if cand == t:
            break
        t = cand
        val, curv = dphi(t)
        if abs(val) <= tol:
            return t
        if val < 0.0:
            lo, lo_val, lo_sec = t, val, val
            if side == -1:
                hi_sec *= 0.5
            side = -1
        else:
            hi, hi_val, hi_sec = t, val, val
            if side == 1:
                lo_sec *= 0.5
            side = 1
        if hi - lo <= 1e-14 * max(1.0, hi):
            break
    return lo if abs(lo_val) < abs(hi_val) else hi
