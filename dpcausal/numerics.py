"""Float64 rounding primitives shared by every solver and learner whose tolerance or slack is a
public bound on its rounding error (:mod:`dpcausal.learners.rounding` states the model: IEEE
float64, round to nearest, γ_k = ku/(1 − ku), and sums over ≤ ``SUM_CHUNK`` rows whose blocks are
added exactly rounded, so a sum errs by ≤ γ_{SUM_TERMS}·Σ|terms| whatever the row count)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

UNIT_ROUNDOFF = 2.0**-53
"""u of IEEE float64 (round to nearest)."""
SAFETY = 4.0
"""Multiplier on every rounding bound (library functions a few ulps off, blocked BLAS/LAPACK)."""
SUM_CHUNK = 4096
"""Rows per block of a learner's data sums (one BLAS call: error ≤ γ_{SUM_CHUNK}·Σ|terms|)."""
SUM_TERMS = SUM_CHUNK + 2
"""k of the error bound γ_k·Σ|terms| of a learner's sum: a block, then two exactly rounded
additions of partial sums (the blocks of a batch, the batches of an engine)."""
Stat = TypeVar("Stat")


def exact_total(parts: Sequence[Stat]) -> Stat:
    """The elementwise correctly rounded sum (``math.fsum``) of same-shaped statistics: arrays,
    floats, or tuples/lists of them."""
    first: Any = parts[0]
    if len(parts) == 1:
        return first
    if isinstance(first, tuple | list):
        seqs: list[Any] = list(parts)
        return type(first)(exact_total([p[k] for p in seqs])  # type: ignore[return-value]
                           for k in range(len(first)))
    stacked = np.asarray(parts, dtype=np.float64)
    flat = stacked.reshape(len(parts), -1)
    out = np.array([math.fsum(flat[:, j]) for j in range(flat.shape[1])])
    if stacked.ndim == 1:
        return float(out[0])  # type: ignore[return-value]
    return out.reshape(stacked.shape[1:])  # type: ignore[return-value]


def objective_scale(bound: float) -> float:
    """w = 2^−e with ``bound`` = m·2^e (0.5 ≤ m < 1): a power of two from a PUBLIC bound (a
    solver's L_w, which bounds ρ|ℓ′|) that brings the residuals, coefficients and gradients a
    solver squares to order one whatever the outcome scale. Multiplying by it is exact (no
    overflow, underflow only below 2^−1022 after scaling), so a sum of squares of scaled values
    is w² times the unscaled sum, bit for bit, wherever the latter neither overflows nor
    underflows, and any comparison of such sums is unchanged."""
    return math.ldexp(1.0, -math.frexp(bound)[1])


MIN_SCALED_BOUND = 2.0**-1000
"""The smallest public bound (a solver's L_w or W, in the outcome's units) whose power of two
:func:`objective_scale` exists in float64 with room to spare (≈ 9.3e-302): below it a solver's
certificate cannot be scaled into float64's normal range, and products that underflow could rival
its rounding allowance."""


def bound_scale_problem(bound: float, what: str) -> str | None:
    """Why the public ``bound`` is beyond a certified float64 solve (below
    :data:`MIN_SCALED_BOUND`, or not finite), or None; ``what`` names it in the message."""
    if MIN_SCALED_BOUND <= bound < math.inf:
        return None
    where = "below 2^-1000 ≈ 9.3e-302" if bound < MIN_SCALED_BOUND else "not finite"
    return (f"{what} = {bound:.3g} is {where}, where float64 cannot bound the solver's rounding; "
            "give the outcome and its bounds in other units")


def scaled_norm(x: npt.NDArray[np.float64], scale: float) -> float:
    """‖x‖₂ computed as ‖scale·x‖₂/scale (``scale`` a power of two, :func:`objective_scale`): the
    same float as ``np.linalg.norm(x)`` wherever that neither overflows nor underflows (both
    scalings are exact), and within the same relative rounding bound where it would (x's
    squares beyond 1.8e308 or below 2^−1022 at outcome scales beyond ~1e154 or below ~1e−154)."""
    return float(np.linalg.norm(x * scale)) / scale


def block_total(stat: Callable[[slice], Stat], n: int) -> Stat:
    """Σ over the rows [0, n) of a statistic computed per block of ≤ ``SUM_CHUNK`` rows
    (``stat(rows)``), the blocks added exactly rounded (n = 0: one empty block)."""
    return exact_total([stat(slice(i, min(n, i + SUM_CHUNK)))
                        for i in range(0, max(n, 1), SUM_CHUNK)])


def expit(x: float) -> float:
    """The logistic function 1/(1 + e^{−x}) of one float, bit for bit as ``scipy.special.expit``
    computes it (e^{−x} overflowing to ∞ gives 0), without importing scipy: a plan needs it, and
    importing scipy.special costs more than planning (issue 24)."""
    try:
        return 1.0 / (1.0 + math.exp(-x))
    except OverflowError:
        return 0.0


def gamma(k: int) -> float:
    """γ_k = ku/(1 − ku) (needs ku < 1)."""
    ku = k * UNIT_ROUNDOFF
    if ku >= 0.5:
        raise ValueError(f"{k} terms are too many for the float64 rounding model")
    return ku / (1.0 - ku)


def descent_contraction_gap(step: float, strong: float, smooth: float) -> float:
    """1 − q, rounded down, for one gradient step of size s ≤ 2/(μ + L) on a μ-strongly convex,
    L-smooth function: ‖x − s∇f(x) − (y − s∇f(y))‖ ≤ q‖x − y‖ with q = √(1 − x),
    x = 2sμL/(μ + L) (Nesterov, Lectures on Convex Optimization, 2nd ed., Thm 2.1.12 and the
    proof of Thm 2.1.15); a projection onto a convex set holding the minimiser keeps the bound.
    Computed as x/(1 + √(1 − x)), which keeps its accuracy when μ ≪ L."""
    x = min(2.0 * step * strong * smooth / (strong + smooth), 1.0)
    return x / (1.0 + math.sqrt(1.0 - x)) * (1.0 - 1e-9)


def descent_steps(initial: float, target: float, gap: float) -> int:
    """The smallest public N (plus one) with (1 − gap)^N·initial ≤ target."""
    need = math.log(initial / target)
    if need <= 0.0:
        return 0
    return math.ceil(need / -math.log1p(-gap) * (1.0 + 1e-9)) + 1


def bracketed_root(f: Callable[[float], float], lo: float, hi: float, f_lo: float, f_hi: float,
                   done: Callable[[float, float], bool]) -> tuple[float, float]:
    """Shrink a bracket [lo, hi] of a root of ``f`` (f(lo) > 0 ≥ f(hi), given as ``f_lo`` and
    ``f_hi``; f_hi may be −∞) until ``done(lo, hi)`` or lo and hi are adjacent floats, and return
    it: the sign condition holds at both ends throughout, whatever the rounding of ``f``.

    False position with the Illinois modification (an end kept twice has its f halved), and a
    bisection whenever the step leaves the bracket, cannot be formed, or two steps did not halve
    the bracket: superlinear on smooth functions, never slower than bisection by more than 3×.
    """
    widths = [math.inf, math.inf]  # the bracket's width one and two steps ago
    kept = 0  # +1: lo was moved last, −1: hi was
    while not done(lo, hi):
        x = math.nan
        if math.isfinite(f_hi):
            x = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        if not lo < x < hi or hi - lo > 0.5 * widths[0]:
            x = 0.5 * (lo + hi)
            if not lo < x < hi:  # adjacent floats
                break
        widths = [widths[1], hi - lo]
        f_x = f(x)
        if f_x > 0.0:
            lo, f_lo = x, f_x
            if kept == 1:
                f_hi *= 0.5
            kept = 1
        else:
            hi, f_hi = x, f_x
            if kept == -1:
                f_lo *= 0.5
            kept = -1
    return lo, hi


GL_NODES = 16
"""Gauss–Legendre nodes per panel of :func:`adaptive_integral`."""
MAX_PANELS = 2048
"""Most open panels :func:`adaptive_integral` refines at once."""


@functools.cache
def _gauss_legendre(n: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Nodes and weights of the n-point Gauss–Legendre rule on [−1, 1] (Golub–Welsch)."""
    k = np.arange(1.0, n)
    beta = k / np.sqrt(4.0 * k * k - 1.0)
    nodes, vectors = np.linalg.eigh(np.diag(beta, 1) + np.diag(beta, -1))
    return nodes, 2.0 * vectors[0] ** 2


def adaptive_integral(f: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]],
                       edges: list[float], *, rtol: float, atol: float) -> float:
    """∫ f over [edges[0], edges[-1]]: each panel's Gauss–Legendre value against the sum over
    its two halves; a panel is accepted (its halves' sum) when they differ by ≤ its share of
    max(atol, rtol·|estimate|) or by no more than the rounding of its own sums (64u of them),
    else split. All open panels are evaluated in one call of f."""
    nodes, weights = _gauss_legendre(GL_NODES)
    lo, hi = np.asarray(edges[:-1], dtype=np.float64), np.asarray(edges[1:], dtype=np.float64)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    length = float(edges[-1] - edges[0])
    done: list[float] = []
    for _ in range(50):
        if lo.size == 0:
            break
        mid = 0.5 * (lo + hi)
        starts, stops = np.stack([lo, mid, lo]), np.stack([mid, hi, hi])  # left, right, whole
        centre, half = 0.5 * (starts + stops), 0.5 * (stops - starts)
        vals = f(centre[..., None] + half[..., None] * nodes) @ weights * half
        fine, whole = vals[0] + vals[1], vals[2]
        estimate = abs(math.fsum(done) + float(fine.sum()))
        floor = 64.0 * UNIT_ROUNDOFF * (np.abs(vals[0]) + np.abs(vals[1]))  # rounding noise
        ok = np.abs(fine - whole) <= np.maximum(max(atol, rtol * estimate) * (hi - lo) / length,
                                                floor)
        done.extend(fine[ok].tolist())
        if (~ok).sum() > MAX_PANELS // 2:  # rounding noise, not the rule: keep the halves
            done.extend(fine[~ok].tolist())
            ok[:] = True
        lo, hi = np.concatenate([lo[~ok], mid[~ok]]), np.concatenate([mid[~ok], hi[~ok]])
    if lo.size:  # not converged in 50 halvings: keep the finest estimate
        done.append(float(fine[~ok].sum()))
    return math.fsum(done)
