"""The per-piece statistics of :mod:`dpcausal.solvers.erm`'s passes (``backend.map_sum``).

A piece is a :data:`Part` of prepared rows (v, y, w): ‖v_i‖ ≤ 1, y_i = ±1, w_i ≥ 0. Every pass
is one sweep over the piece's rows in blocks of ``FUSED_ROWS`` (:func:`sweep`): a block of v is
read from memory once, and while it is in the core's cache the margins y vᵀp of its rows are
computed from scratch at every point p the pass needs (one small product), then from them the
gradient, Hessian and line sums of the block. Each statistic is a sum over rows, so it is the
same (to rounding) however the rows are cut into pieces, and a gradient summed over all pieces
is the gradient at exactly the θ it names (the certificate of
:func:`~dpcausal.solvers.erm.solve_erm`).

* **gradient pass** (:func:`grad_hess`): Σ w ℓ'(y vᵀθ) y v and the Hessian Σ_quad w v vᵀ/(2h)
  (:func:`gradient_pass`: the gradient alone, the certificate's pass);
* **line pass** (:func:`step_pass`): along φ(t) = G(θ − t·step), at K sorted points t, φ'(t) and
  φ''(t), Σ|w u| and the breakpoints of φ' between neighbouring points (:func:`_line_block`),
  plus the gradient and Hessian at one or two candidate points, so that an accepted candidate
  costs no further pass;
* **value pass** (:func:`dpcausal.solvers.erm.value_grad`, the L-BFGS-B fallback only): G's
  data sum and its gradient;
* :func:`stride_rows`: the rows whose global index is a multiple of k (the warm start's subsample).

The certificate's rounding bound (:attr:`dpcausal.solvers.erm_accuracy.ERMAccuracy.
grad_allowance`) holds for every gradient a sweep returns, whatever else the sweep computes: the
margins at the gradient's point are computed from scratch (each a dot product of d terms, error
≤ γ_d·‖θ‖ in any order), the coefficients w·y·ℓ'(z) as the allowance counts them, each block's sum
covers ≤ ``FUSED_ROWS`` ≤ ``SUM_CHUNK`` rows (one BLAS product, error ≤ γ_{SUM_CHUNK+1}·Σ|terms|
in any order), and the blocks' partial sums are added exactly rounded (``exact_total``: one more
rounding). The Hessians and the line sums only shape the solver's path (their summation order is
free).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpcausal.numerics import SUM_CHUNK, exact_total

FloatArray = npt.NDArray[np.float64]


Part = tuple[FloatArray, FloatArray, FloatArray]
"""One prepared batch: rows v (‖v_i‖ ≤ 1), labels y = ±1, weights w ≥ 0."""


FUSED_ROWS = 2048
"""Rows per block of a sweep (≤ ``SUM_CHUNK``): 2048 × 21 float64 is 344 KB, which stays in a
core's cache while the block's statistics are computed (measured on 10⁶ × 21: 2048 rows beat
1024, 1536 and 4096)."""
assert FUSED_ROWS <= SUM_CHUNK  # the certificate's rounding bound needs blocks ≤ SUM_CHUNK


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
    active = np.flatnonzero(np.abs(dist, out=dist) <= h)
    va = v.take(active, axis=0)  # one copy of the active rows (faster than a boolean mask)
    va *= np.sqrt(w.take(active) * (0.5 / h))[:, None]
    return va.T @ va


def _line_block(out: FloatArray, sums: FloatArray, w: FloatArray, z: FloatArray, u: FloatArray,
                h: float, ts: FloatArray) -> None:
    """Add one block's line statistics at the sorted points ``ts`` to ``out`` (6 × K) and
    ``sums`` (a, b, Σ|w u|); :func:`_line_total` completes them:

    row 0, 1: φ'_data(t) = −Σ w ℓ'(z − t u) u and φ''_data(t) = Σ_{|1 − z + t u| ≤ h} w u²/(2h);
    row 2: Σ|w u| in column 0 (the scale of φ' for the rounding tolerance);
    rows 3, 4, 5: for each interval [ts[k], ts[k+1]): the number of breakpoints of φ' in it (where
    a row's margin crosses 1 ± h), and Σ and Σ² of their offsets from ts[k] (a zero spread means
    one breakpoint location, where φ' is two linear pieces).

    A row whose margin z − t u stays in one piece of ℓ for every t in [ts[0], ts[-1]] (the
    margin is monotone in t, so checking both ends suffices) contributes a + b·t, summed once;
    only the rows that change piece are evaluated point by point (as erm's line search)."""
    k_pts = ts.size
    t_min, t_max = float(ts[0]), float(ts[-1])
    inv2h = 0.5 / h
    wu = w * u
    sums[2] += float(np.abs(wu).sum())
    z0, z1 = z - t_min * u, z - t_max * u
    lin = (z0 < 1.0 - h) & (z1 < 1.0 - h)
    quad = (np.abs(1.0 - z0) <= h) & (np.abs(1.0 - z1) <= h)
    moving = ~(lin | quad | ((z0 > 1.0 + h) & (z1 > 1.0 + h)))
    sums[0] += float(wu[lin].sum()) + inv2h * float(wu[quad] @ ((1.0 + h) - z[quad]))
    sums[1] += inv2h * float(wu[quad] @ u[quad])
    if not moving.any():
        return
    zm, um, wum = z[moving], u[moving], wu[moving]
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


def _line_total(out: FloatArray, sums: FloatArray, ts: FloatArray) -> FloatArray:
    """The line statistics of :func:`_line_block` once every block is in."""
    out[0] += sums[0] + sums[1] * ts
    out[1] += sums[1]
    out[2, 0] = sums[2]
    return out


def sweep(part: Part, at: FloatArray, *, h: float, hessians: bool,
          step: FloatArray | None = None, line: tuple[FloatArray, FloatArray] | None = None
          ) -> tuple[FloatArray, FloatArray, FloatArray, float]:
    """One pass over a piece: (the gradients Σ w ℓ'(y vᵀp) y v at each row p of ``at`` (k × d);
    with ``hessians`` their Hessians Σ_{|1−y vᵀp| ≤ h} w v vᵀ/(2h) (k × d × d, else 0 × d × d);
    with ``line`` = (θ, ts) the line statistics of :func:`_line_block` along θ − t·step (6 × K,
    else 6 × 0); with ``step`` Σ|w u|, u = y vᵀstep, the scale of φ' for the line search's
    rounding tolerance (else 0)).

    Block by block of ``FUSED_ROWS`` rows, the margins at every point are one product of the
    block with the points (each from scratch, never z(θ) − t·u); each gradient's block sums are
    added exactly rounded, so it obeys the certificate's rounding bound (the module docstring)."""
    v, y, w = part
    n, d = v.shape
    k = at.shape[0]
    extra = [] if step is None else [step] if line is None else [step, line[0]]
    pts = np.ascontiguousarray(np.vstack([*extra, at]).T)  # d × (points): v·pts is one product
    first = len(extra)  # the columns of pts where the gradient points start
    ts = np.empty(0) if line is None else line[1]
    starts = range(0, max(n, 1), FUSED_ROWS)
    parts = np.empty((len(starts), k, d))
    hess = np.zeros((k if hessians else 0, d, d))
    out = np.zeros((6, ts.size))
    sums = np.zeros(3)  # a, b of the line's fixed rows; Σ|w u|
    for blk, lo in enumerate(starts):
        vb, yb, wb = v[lo:lo + FUSED_ROWS], y[lo:lo + FUSED_ROWS], w[lo:lo + FUSED_ROWS]
        z = np.empty((pts.shape[1], yb.size))
        np.multiply((vb @ pts).T, yb, out=z)  # the margins y vᵀp, one row per point
        if line is not None:
            _line_block(out, sums, wb, z[1], z[0], h, ts)
        elif first:
            sums[2] += float(wb @ np.abs(z[0]))
        coef = huber_dloss(z[first:], h)
        coef *= wb * yb  # (w y)·ℓ'(z)
        parts[blk] = coef @ vb
        for j in range(hess.shape[0]):
            hess[j] += _hessian(vb, wb, z[first + j], h)
    grads = np.asarray(exact_total(list(parts)), dtype=np.float64)
    return grads, hess, _line_total(out, sums, ts) if line is not None else out, float(sums[2])


def grad_hess(part: Part, start: int, *, theta: FloatArray, h: float
              ) -> tuple[FloatArray, FloatArray]:
    """Σ_batch w ℓ'(y vᵀθ) y v and Σ_{|1−y vᵀθ| ≤ h} w v vᵀ/(2h), in one sweep."""
    grads, hess, _, _ = sweep(part, theta[None, :], h=h, hessians=True)
    return grads[0], hess[0]


def gradient_pass(part: Part, start: int, *, theta: FloatArray, h: float) -> FloatArray:
    """Σ_batch w ℓ'(y vᵀθ) y v alone (the certificate's and the fallback's pass)."""
    return sweep(part, theta[None, :], h=h, hessians=False)[0][0]


def full_step_pass(part: Part, start: int, *, step: FloatArray, at: FloatArray, h: float
                   ) -> tuple[FloatArray, FloatArray, float]:
    """Newton's full step tried alone, in one sweep: the gradient and Hessian at ``at`` = θ − step
    (margins from scratch) and Σ|w y vᵀstep| (the scale of φ'(1) = −∇G(θ − step)·step)."""
    grads, hess, _, scale = sweep(part, at[None, :], h=h, hessians=True, step=step)
    return grads[0], hess[0], scale


def step_pass(part: Part, start: int, *, theta: FloatArray, step: FloatArray, h: float,
              ts: FloatArray, at: FloatArray
              ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """One line pass, in one sweep: the line statistics along θ − t·step at ``ts`` and the
    gradients and Hessians at the candidates, the rows of ``at`` (margins from scratch; none is
    allowed), used when a candidate is accepted (so that it costs no further pass)."""
    grads, hess, line, _ = sweep(part, at, h=h, hessians=True, step=step, line=(theta, ts))
    return grads, hess, line


def stride_rows(part: Part, start: int, *, k: int) -> Part:
    """The rows whose global index is a multiple of k (a public, partition-free subsample)."""
    v, y, w = part
    sel = np.arange((-start) % k, y.size, k)  # local i with (start + i) % k == 0
    return v[sel], y[sel], w[sel]
