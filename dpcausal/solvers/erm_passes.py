"""The per-piece statistics of :mod:`dpcausal.solvers.erm`'s passes (``backend.map_sum``).

A piece is a :data:`Part` of prepared rows (v, y, w): ‖v_i‖ ≤ 1, y_i = ±1, w_i ≥ 0. Every
statistic recomputes the margins y vᵀθ of its rows from scratch, so a gradient summed over all
pieces is the gradient at exactly the θ it names (the certificate of :func:`~dpcausal.solvers.erm.
solve_erm`), and each is a sum over rows, so it is the same (to rounding) however the rows are cut
into pieces.

* **gradient pass** (:func:`grad_hess`): Σ w ℓ'(y vᵀθ) y v and the Hessian Σ_quad w v vᵀ/(2h)
  (:func:`gradient_pass`: the gradient alone); every gradient is summed in blocks of
  ``SUM_CHUNK`` rows added exactly rounded, so its rounding error has a public bound;
* **line pass** (:func:`step_pass`): along φ(t) = G(θ − t·step), at K sorted points t, φ'(t) and
  φ''(t), Σ|w u| and the breakpoints of φ' between neighbouring points (:func:`line_derivative`),
  plus the gradient and Hessian at one or two candidate points, so that an accepted candidate
  costs no further pass;
* **value pass** (:func:`dpcausal.solvers.erm.value_grad`, the L-BFGS-B fallback only): G's
  data sum and its gradient;
* :func:`stride_rows`: the rows whose global index is a multiple of k (the warm start's subsample).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpcausal.numerics import SUM_CHUNK, exact_total

FloatArray = npt.NDArray[np.float64]


Part = tuple[FloatArray, FloatArray, FloatArray]
"""One prepared batch: rows v (‖v_i‖ ≤ 1), labels y = ±1, weights w ≥ 0."""


BLOCK = 16_384


def huber_dloss(z: FloatArray, h: float) -> FloatArray:
    """ℓ'(z) = −clip((1 + h − z)/(2h), 0, 1) of the Huber hinge (each step in place in one new
    array: the same values as the expression, without its three temporaries)."""
    out = np.subtract(1.0 + h, z)
    out /= 2.0 * h
    np.clip(out, 0.0, 1.0, out=out)
    return np.negative(out, out=out)


def _hessian(v: FloatArray, w: FloatArray, z: FloatArray, h: float) -> FloatArray:
    """Σ_{|1 − z| ≤ h} w v vᵀ/(2h) over the rows whose margin z is in the quadratic piece."""
    dist = np.subtract(1.0, z)
    active = np.abs(dist, out=dist) <= h
    va = v[active]
    va *= np.sqrt(w[active] * (0.5 / h))[:, None]  # in place: one copy of the active rows
    return va.T @ va


def _gradients(v: FloatArray, y: FloatArray, w: FloatArray, z: FloatArray, h: float
               ) -> FloatArray:
    """Σ w ℓ'(z) y v for each row of the margins ``z`` (k × n): a k × d array, one pass over v,
    summed in blocks of ≤ ``SUM_CHUNK`` rows whose partial sums are added exactly rounded, so it
    errs by ≤ γ_{SUM_CHUNK+1}·Σ|terms| whatever the piece's size (the bound
    :attr:`dpcausal.solvers.erm_accuracy.ERMAccuracy.grad_allowance` uses; one BLAS sum over all
    rows would err by γ_n·Σ|terms|, which overtakes a tolerance of 1e-6·W at n ≈ 3·10⁴)."""
    coef = huber_dloss(z, h)
    coef *= w * y  # (w y)·ℓ'(z), as w * y * ℓ'(z) computes it
    n = y.size
    if n <= SUM_CHUNK:
        return np.asarray(coef @ v, dtype=np.float64)
    return np.asarray(exact_total([coef[:, lo:lo + SUM_CHUNK] @ v[lo:lo + SUM_CHUNK]
                                   for lo in range(0, n, SUM_CHUNK)]), dtype=np.float64)


def _margins(v: FloatArray, y: FloatArray, points: list[FloatArray]) -> FloatArray:
    """y vᵀp for each point p (a k × n array), computed from scratch in one pass over v (the
    product by y in place: the same values as ``y * (P.T @ v.T)``)."""
    z = np.column_stack(points).T @ v.T
    z *= y
    return np.asarray(z, dtype=np.float64)


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
        out[0] -= wum @ huber_dloss(zt, h)
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
    z = _margins(v, y, [theta])
    return _gradients(v, y, w, z, h)[0], _hessian(v, w, z[0], h)


def gradient_pass(part: Part, start: int, *, theta: FloatArray, h: float) -> FloatArray:
    """Σ_batch w ℓ'(y vᵀθ) y v alone, blocked (the certificate's and the fallback's pass)."""
    v, y, w = part
    return _gradients(v, y, w, _margins(v, y, [theta]), h)[0]


def hessian(part: Part, start: int, *, theta: FloatArray, h: float) -> FloatArray:
    """Σ_{|1−y vᵀθ| ≤ h} w v vᵀ/(2h) alone (the Hessian at a point whose gradient is known)."""
    v, y, w = part
    return _hessian(v, w, _margins(v, y, [theta])[0], h)


def line_derivative(part: Part, start: int, *, theta: FloatArray, step: FloatArray, h: float,
                    ts: FloatArray, margins: tuple[FloatArray, FloatArray] | None = None
                    ) -> FloatArray:
    """φ' and φ'' data sums at each t of ``ts`` and Σ|w u| (see :func:`_line`), with z = y vᵀθ
    and u = y vᵀstep (``margins``: the two, when the caller computed them for this piece)."""
    v, y, w = part
    z, u = margins if margins is not None else _margins(v, y, [theta, step])
    return _line(w, z, u, h, ts)


def step_pass(part: Part, start: int, *, theta: FloatArray, step: FloatArray, h: float,
              ts: FloatArray, at: FloatArray, hessians: bool = True
              ) -> tuple[FloatArray, FloatArray | None, FloatArray]:
    """One line pass: :func:`line_derivative` along θ − t·step and the gradients at the
    candidates, the rows of ``at`` (margins computed from scratch), used when a candidate is
    accepted; with ``hessians`` also their Hessians (so that an accepted candidate costs no
    further pass: what an engine wants; in memory a pass is a call and the Hessian is computed
    only at the point accepted)."""
    v, y, w = part
    z = _margins(v, y, [theta, step, *at])
    line = line_derivative(part, start, theta=theta, step=step, h=h, ts=ts, margins=(z[0], z[1]))
    grads = _gradients(v, y, w, z[2:], h)
    hess = np.stack([_hessian(v, w, zc, h) for zc in z[2:]]) if hessians else None
    return grads, hess, line


def stride_rows(part: Part, start: int, *, k: int) -> Part:
    """The rows whose global index is a multiple of k (a public, partition-free subsample)."""
    v, y, w = part
    sel = np.arange((-start) % k, y.size, k)  # local i with (start + i) % k == 0
    return v[sel], y[sel], w[sel]
