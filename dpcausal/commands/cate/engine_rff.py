"""The random-feature Huber ridge of :func:`dpcausal.commands.cate.rff.solve_streaming`, solved over
an engine's passes.

J(w) = (1/n)Σ ρ_i ℓ_c(wᵀζ_i − φ_i) + λ0‖w‖², ζ_i = ζ(s_i) from the public feature map. The
in-memory solver keeps f = Zw and the Huber inside set as n-vectors between passes; here every pass
is STATELESS per batch (a Dask worker may recompute a partition, and nothing per row survives a
pass): a batch's ζ is recomputed from its box-scaled covariates s (the prepared batch holds only
(s, ρ, φ), never n × 2m features), f = Zw from scratch, and the inside set of the point w_in whose
rows are already in the client's Gram Z_SᵀW_SZ_S from Z·w_in, so the batch's Gram delta (rows
entering or leaving S) is consistent with the Gram the client holds. The inside set is always
computed from a weight vector by the same expression (|ζᵀw − φ| ≤ c), so a row enters and leaves
by the same test.

One pass per full Newton step: at w it returns, for the full step w + step, the Newton right-hand
side, the loss gradient and the Gram delta, plus J along w + t·step on the fixed grid ``T_GRID`` of
the in-memory backtracking steps (1, ½, …, 2⁻²⁷), so the damped step is the one the in-memory line
search takes; a damped step costs one more pass at the accepted point. The stopping test
‖∇J(w)‖ ≤ ``grad_tol`` uses the gradient computed from scratch over every row at the returned w, so
the solution carries the in-memory solver's certificate (within tol/(2λ0) of the exact minimiser)
and the sensitivity Δ = L_w/(λ0 n) + tol/λ0 holds unchanged; the Gram and the steps only shape the
path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import linalg

from dpcausal.commands.cate.krr import huber_derivative, huber_value
from dpcausal.commands.cate.rff import FourierFeatures, RffFit, add_inside_change, block_rows
from dpcausal.engine.base import Engine
from dpcausal.errors import SolverError

FloatArray = npt.NDArray[np.float64]
Part = tuple[FloatArray, FloatArray, FloatArray]
"""One prepared batch of second-half rows: box-scaled covariates s, weights ρ, pseudo-outcomes φ."""

Z_THREADS = 2
"""Threads computing feature blocks ahead of the one being summed."""
T_GRID = 0.5 ** np.arange(28)
"""The in-memory backtracking steps 1, ½, …, 2⁻²⁷ (the first below 1e-8, where it stops)."""


def _inside(r: FloatArray, c: float | None) -> npt.NDArray[np.bool_]:
    return np.ones(r.shape[0], dtype=bool) if c is None else np.abs(r) <= c


def _feature_blocks(feats: FourierFeatures, s: FloatArray, rows: int
                    ) -> Iterator[tuple[int, int, FloatArray]]:
    """(i0, i1, ζ(s[i0:i1])) in row order; the cos/sin of the next blocks run in ``Z_THREADS``
    threads meanwhile (they dominate a pass; NumPy releases the GIL)."""
    bounds = [(i, min(i + rows, s.shape[0])) for i in range(0, s.shape[0], rows)]
    with ThreadPoolExecutor(max_workers=Z_THREADS) as pool:
        ahead: dict[int, Future[FloatArray]] = {}
        for k, (i0, i1) in enumerate(bounds):
            for j in range(k, min(k + Z_THREADS + 1, len(bounds))):
                if j not in ahead:
                    ahead[j] = pool.submit(feats.transform, s[bounds[j][0]:bounds[j][1]])
            yield i0, i1, ahead.pop(k).result()


def rff_pass(part: Part, start: int, *, feats: FourierFeatures, c: float | None, w: FloatArray,
             w_in: FloatArray | None, step: FloatArray | None,
             rows: int | None = None) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """One batch's statistics at the point v = w (``step`` None) or v = w + step.

    Returns (Zᵀu, Zᵀ(ρℓ′(r)), the upper triangle of Σ ±ρ ζζᵀ over the rows entering/leaving the
    inside set relative to the inside set at ``w_in`` (None: no row inside), and the loss sums
    Σ ρ ℓ_c(r)) with r = Zv − φ; with ``step``, the loss sums are Σ ρ ℓ_c(Zw + t·Z·step − φ) for every
    t of ``T_GRID`` (J along the step), else the single sum at v."""
    s, rho, phi = part
    p = feats.dim
    n = s.shape[0]
    zuv = np.zeros((p, 2))
    d_hess = np.zeros((p, p), order="F")
    losses = np.zeros(T_GRID.size if step is not None else 1)
    if n == 0:
        return zuv[:, 0].copy(), zuv[:, 1].copy(), d_hess, losses
    v = w if step is None else w + step
    for i0, i1, z in _feature_blocks(feats, s, rows or block_rows(p)):
        ph, rc = phi[i0:i1], rho[i0:i1]
        fv = z @ v  # margins at a point are always this one product (consistent inside sets)
        r = fv - ph
        f = None
        if step is None:
            losses[0] += float(rc @ huber_value(r, c))
        else:
            f = z @ w
            df = fv - f  # Z·step without a third product
            rt = f[:, None] + df[:, None] * T_GRID[None, :] - ph[:, None]
            losses += rc @ huber_value(rt, c)
        ins = _inside(r, c)
        u = np.where(ins, rc * ph, 0.0 if c is None else -c * rc * np.sign(r))
        zuv += z.T @ np.column_stack([u, rc * huber_derivative(r, c)])
        if w_in is None:
            prev = np.zeros(i1 - i0, dtype=bool)
        else:
            prev = _inside((f if f is not None and w_in is w else z @ w_in) - ph, c)
        add_inside_change(d_hess, z, rc, ins, prev)
    return zuv[:, 0].copy(), zuv[:, 1].copy(), d_hess, losses


def solve_rff_engine(engine: Engine, feats: FourierFeatures, *, n: int, lam0: float,
                     huber_c: float | None, grad_tol: float, max_iter: int = 100,
                     rows: int | None = None) -> RffFit:
    """Minimise J(w) over the engine's prepared second-half batches (``Part``) to
    ‖∇J‖₂ ≤ ``grad_tol``: the iterates of :func:`~dpcausal.commands.cate.rff.solve_streaming`.

    Raises
    ------
    SolverError
        When the tolerance is not reached (never returns an inexact solution silently).
    """
    p = feats.dim
    stat: Any = functools.partial(rff_pass, feats=feats, c=huber_c, rows=rows)
    w = np.zeros(p)
    hess = np.zeros((p, p))
    zu, zv, d_hess, loss = engine.map_sum(functools.partial(stat, w=w, w_in=None, step=None))
    val = float(loss[0]) / n + lam0 * float(w @ w)
    gnorm = math.inf
    for it in range(max_iter + 1):
        gnorm = float(np.linalg.norm(zv / n + 2.0 * lam0 * w))
        if gnorm <= grad_tol:
            return RffFit(w, gnorm, it)
        if it == max_iter:
            break
        hess += d_hess  # the Gram now holds the inside set at w
        lhs = hess / n
        lhs[np.diag_indices_from(lhs)] += lam0
        try:
            new = linalg.cho_solve(linalg.cho_factor(lhs, lower=False, check_finite=False),
                                   zu / n, check_finite=False)
        except linalg.LinAlgError as exc:
            raise SolverError("the random-feature second-stage system is not positive definite; "
                              "raise cate.ridge") from exc
        step = new - w
        zu_f, zv_f, dh_f, line = engine.map_sum(functools.partial(stat, w=w, w_in=w, step=step))
        for k, t in enumerate(T_GRID):
            cand_w = w + t * step
            cval = float(line[k]) / n + lam0 * float(cand_w @ cand_w)
            if cval <= val + 1e-12 * abs(val) or t < 1e-8:
                break
        if k == 0:
            zu, zv, d_hess = zu_f, zv_f, dh_f
        else:
            zu, zv, d_hess, _ = engine.map_sum(
                functools.partial(stat, w=cand_w, w_in=w, step=None))
        w, val = cand_w, cval
    raise SolverError(
        f"the random-feature second stage did not reach its gradient tolerance {grad_tol:.3g} "
        "on the engine; raise cate.ridge or cate.huber_c, or report this as a bug")


__all__ = ["T_GRID", "rff_pass", "solve_rff_engine"]
