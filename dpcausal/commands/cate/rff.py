"""Large-n variant of the function release: random Fourier features from a PUBLIC seed (spec §3.6).

ζ(s) = m^{-1/2}(cos(Ωᵀs), sin(Ωᵀs)) ∈ ℝ^{2m}, Ω's columns ~ N(0, h⁻²I_q) drawn from ``rff_seed``
before any data is read, so ‖ζ(s)‖ = 1 exactly and k_m(s, s′) = ζ(s)ᵀζ(s′) → k0(s, s′) as m grows.
The second stage is the same weighted Huber ridge, now in the RKHS of k_m, i.e. over weights w:
J(w) = (1/n)Σ ρ_i ℓ_c(wᵀζ_i − φ_i) + λ0‖w‖². A GP with covariance k_m is U(x) = ζ(x)ᵀξ with
ξ ~ N(0, I_{2m}), so the private function is the weight vector w + σξ: releasable, evaluable anywhere.
Data-dependent centres (Nyström, k-means) would break the sensitivity argument (spec P13); these
features depend on the public seed only.

One solver (:func:`solve_rff`) for every backend: every data pass is a ``backend.map_sum`` of
per-piece statistics (:func:`rff_pass`) over the rows (s, ρ, φ), in memory one piece
(:func:`fit_rff_streaming`), on an engine its batches or partitions. The n × 2m feature matrix is
never held: each pass computes ζ for blocks of rows (in memory the first blocks, up to
``CACHE_MB``, are kept between passes), so memory is O(n + m² + block + CACHE_MB).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.krr import huber_derivative, huber_value
from dpcausal.commands.cate.rff_accuracy import RffAccuracy
from dpcausal.numerics import block_total, exact_total
from dpcausal.solvers.backend import Backend, InMemory

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
BLOCK_BYTES = 32 * 2**20
"""Target size of one block of feature rows (rows per block = BLOCK_BYTES / (8·2m), at least 256)."""
CACHE_MB = 2048
"""In memory, feature blocks kept between passes (the rest are recomputed each pass)."""
Z_THREADS = 2
"""Threads computing feature blocks ahead of the one being summed."""
T_GRID: FloatArray = 0.5 ** np.arange(28, dtype=np.float64)
"""The backtracking steps 1, ½, …, 2⁻²⁷ of the line search (the first below 1e-8, where it
stops)."""
Part = tuple[FloatArray, FloatArray, FloatArray]
"""One piece of second-half rows: box-scaled covariates s, weights ρ, pseudo-outcomes φ."""


@dataclass(frozen=True)
class FourierFeatures:
    """The public feature map ζ on box-scaled covariates."""

    omega: FloatArray  # (q, m)

    @classmethod
    def draw(cls, q: int, m: int, bandwidth: float, seed: int) -> FourierFeatures:
        """Ω ~ N(0, h⁻²) from the public seed."""
        return cls(np.random.default_rng(seed).normal(0.0, 1.0 / bandwidth, size=(q, m)))

    @property
    def dim(self) -> int:
        """2m."""
        return 2 * int(self.omega.shape[1])

    def transform(self, s: FloatArray) -> FloatArray:
        """ζ(s) for the rows of ``s`` (unit norm)."""
        proj = np.atleast_2d(s) @ self.omega
        m = self.omega.shape[1]
        out = np.empty((proj.shape[0], 2 * m))
        np.cos(proj, out=out[:, :m])
        np.sin(proj, out=out[:, m:])
        out /= math.sqrt(m)
        return out

    def evaluate(self, s: FloatArray, w: FloatArray) -> FloatArray:
        """ζ(s)ᵀw for the rows of ``s``, block by block."""
        s = np.atleast_2d(s)
        step = block_rows(self.dim)
        return np.concatenate([self.transform(s[i:i + step]) @ w
                               for i in range(0, s.shape[0], step)] or [np.empty(0)])


def block_rows(p: int) -> int:
    """Rows per streamed block for p features."""
    return max(256, BLOCK_BYTES // (8 * p))


@dataclass(frozen=True)
class RffFit:
    """ĝ(x) = wᵀζ(s(x)) and how exact the solve was."""

    w: FloatArray
    grad_norm: float
    iterations: int


def _add_gram_upper(acc: FloatArray, z: FloatArray, weights: FloatArray, sign: float) -> None:
    """acc += sign·Zᵀdiag(weights)Z on the upper triangle, in place (BLAS syrk; ``acc`` F-ordered)."""
    from scipy.linalg import blas  # lazy: planning never solves

    zw = z * np.sqrt(weights)[:, None]
    out = blas.dsyrk(sign, zw.T, beta=1.0, c=acc, trans=0, lower=0, overwrite_c=1)
    if out is not acc:  # pragma: no cover - BLAS wrapper made a copy
        acc[...] = out


def add_inside_change(d_hess: FloatArray, z: FloatArray, rho: FloatArray, inside: BoolArray,
                      prev: BoolArray) -> None:
    """d_hess += Σ ρ z zᵀ over the rows that entered the inside set − over those that left it
    (upper triangle, in place): the change of Z_SᵀW_SZ_S between two iterates."""
    enter = inside & ~prev
    if enter.all():
        _add_gram_upper(d_hess, z, rho, 1.0)
        return
    for sel, sign in ((enter, 1.0), (prev & ~inside, -1.0)):
        if sel.any():
            _add_gram_upper(d_hess, z[sel], rho[sel], sign)


class FeatureCache:
    """The feature blocks of the one in-memory piece, kept between passes up to ``cache_mb`` (ζ's
    cos/sin dominate a pass). An engine's pieces are never cached: a worker may recompute a
    partition, and nothing per row survives a pass there."""

    def __init__(self, cache_mb: float) -> None:
        self.cache_mb = cache_mb
        self.blocks: dict[tuple[int, int], FloatArray] = {}
        self.bytes = 0

    def get(self, key: tuple[int, int], make: Callable[[], FloatArray]) -> FloatArray:
        """The block ``key`` = (i0, i1), computed by ``make`` unless kept."""
        z = self.blocks.get(key)
        if z is None:
            z = make()
            if self.bytes + z.nbytes <= self.cache_mb * 2**20:
                self.blocks[key] = z
                self.bytes += z.nbytes
        return z


def _feature_blocks(feats: FourierFeatures, s: FloatArray, rows: int,
                    cache: FeatureCache | None) -> Iterator[tuple[int, int, FloatArray]]:
    """(i0, i1, ζ(s[i0:i1])) in row order; the cos/sin of the next blocks not kept in ``cache`` run
    in ``Z_THREADS`` threads meanwhile (they dominate a pass; NumPy releases the GIL)."""
    bounds = [(i, min(i + rows, s.shape[0])) for i in range(0, s.shape[0], rows)]

    def compute(k: int) -> FloatArray:
        i0, i1 = bounds[k]
        return feats.transform(s[i0:i1])

    with ThreadPoolExecutor(max_workers=Z_THREADS) as pool:
        ahead: dict[int, Future[FloatArray]] = {}
        for k, (i0, i1) in enumerate(bounds):
            for j in range(k, min(k + Z_THREADS + 1, len(bounds))):
                if j not in ahead and (cache is None or bounds[j] not in cache.blocks):
                    ahead[j] = pool.submit(compute, j)
            if cache is None:
                z = ahead.pop(k).result()
            else:
                future = ahead.pop(k, None)
                z = cache.get((i0, i1), future.result if future is not None
                              else functools.partial(compute, k))
            yield i0, i1, z


def _inside(r: FloatArray, c: float | None) -> BoolArray:
    return np.ones(r.shape[0], dtype=bool) if c is None else np.abs(r) <= c


def rff_pass(part: Part, start: int, *, feats: FourierFeatures, c: float | None, w: FloatArray,
             w_in: FloatArray | None, step: FloatArray | None, ts: FloatArray = T_GRID,
             rows: int | None = None, cache: FeatureCache | None = None
             ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """One piece's statistics at the point v = w (``step`` None) or v = w + step.

    Returns (Zᵀu, Zᵀ(ρℓ′(r)), the upper triangle of Σ ±ρ ζζᵀ over the rows entering/leaving the
    inside set relative to the inside set at ``w_in`` (None: no row inside), and the loss sums
    Σ ρ ℓ_c(r)) with r = Zv − φ; with ``step``, the loss sums are Σ ρ ℓ_c(Zw + t·Z·step − φ) for every
    t of ``ts`` (J along the step), else the single sum at v. Every product is computed from
    scratch for the rows of this piece."""
    s, rho, phi = part
    p = feats.dim
    n = s.shape[0]
    zuv = np.zeros((p, 2))
    d_hess = np.zeros((p, p), order="F")
    losses = np.zeros(ts.size if step is not None else 1)
    if n == 0:
        return zuv[:, 0].copy(), zuv[:, 1].copy(), d_hess, losses
    v = w if step is None else w + step
    for i0, i1, z in _feature_blocks(feats, s, rows or block_rows(p), cache):
        ph, rc = phi[i0:i1], rho[i0:i1]
        fv = z @ v  # margins at a point are always this one product (consistent inside sets)
        r = fv - ph
        f = None
        if step is None:
            losses[0] += float(rc @ huber_value(r, c))
        else:
            f = z @ w
            df = fv - f  # Z·step without a third product
            rt = f[:, None] + df[:, None] * ts[None, :] - ph[:, None]
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


NEWTON_ITER = 100
"""At most this many active-set Newton steps before the guaranteed fallback runs."""


def exact_gradient_pass(part: Part, start: int, *, feats: FourierFeatures, c: float | None,
                        w: FloatArray) -> FloatArray:
    """Σ ρ_i ℓ_c′(ζ_iᵀw − φ_i)ζ_i over one piece, in blocks of ≤ ``SUM_CHUNK`` rows added exactly
    rounded (what :attr:`RffAccuracy.grad_allowance` bounds)."""
    s, rho, phi = part

    def block(rows: slice) -> FloatArray:
        z = feats.transform(s[rows])
        return np.asarray(z.T @ (rho[rows] * huber_derivative(z @ w - phi[rows], c)))

    if s.shape[0] == 0:
        return np.zeros(feats.dim)
    return block_total(block, s.shape[0])


def exact_gradient(backend: Backend, feats: FourierFeatures, w: FloatArray, *, n: int,
                   lam0: float, huber_c: float | None) -> FloatArray:
    """ĝ = ∇J(w), the pieces added exactly rounded; one pass."""
    parts = backend.map_list(functools.partial(exact_gradient_pass, feats=feats, c=huber_c, w=w))
    return np.asarray(exact_total(parts), dtype=np.float64) / n + 2.0 * lam0 * w


def project(w: FloatArray, radius: float) -> FloatArray:
    """P_R(w): w scaled onto the ball ‖w‖ ≤ R when outside it (0 when not finite)."""
    if not bool(np.all(np.isfinite(w))):
        return np.zeros_like(w)
    norm = float(np.linalg.norm(w))
    return w * (radius / norm) if norm > radius else w


def guaranteed_descent(backend: Backend, feats: FourierFeatures, start: FloatArray, *, n: int,
                       lam0: float, huber_c: float | None, accuracy: RffAccuracy) -> RffFit:
    """The fallback: projected gradient descent from P_R(start), step s, for the public
    ``accuracy.steps`` passes (fewer when a step's gradient meets the certificate); the returned w
    is within ``accuracy.target`` of w* by the contraction bound (rff_accuracy's docstring), with
    no check."""
    w = project(np.asarray(start, dtype=np.float64), accuracy.radius)
    for it in range(accuracy.steps):
        grad = exact_gradient(backend, feats, w, n=n, lam0=lam0, huber_c=huber_c)
        if accuracy.accepts(w, grad):
            return RffFit(w, float(np.linalg.norm(grad)), it)
        w = project(w - accuracy.step * grad, accuracy.radius)
    return RffFit(w, math.nan, accuracy.steps)


def _newton_direction(lhs: FloatArray, rhs: FloatArray) -> FloatArray | None:
    """The Newton point of the active-set system, or None when it is not numerically positive
    definite (then the guaranteed fallback runs)."""
    from scipy import linalg  # lazy: planning never solves

    try:
        return np.asarray(linalg.cho_solve(linalg.cho_factor(lhs, lower=False, check_finite=False),
                                           rhs, check_finite=False))
    except (linalg.LinAlgError, ValueError):
        return None


def solve_rff(backend: Backend, feats: FourierFeatures, *, n: int, lam0: float,
              huber_c: float | None, accuracy: RffAccuracy, rows: int | None = None,
              cache_mb: float | None = None) -> RffFit:
    """Minimise J(w) = (1/n)Σ ρ_i ℓ_c(wᵀζ_i − φ_i) + λ0‖w‖² over the backend's pieces of (s, ρ, φ)
    (box-scaled covariates, weights, pseudo-outcomes) to within ``accuracy.target`` of the exact
    minimiser, whatever the data: never raises on the data.

    Active-set Newton: given the rows S with |residual| ≤ c, stationarity is the p × p system
    (Z_SᵀW_SZ_S/n + λ0 I) w = Z_SᵀW_Sφ_S/n − c Σ_{i∉S} ρ_i sign(r_i) z_i/n. The client keeps
    Z_SᵀW_SZ_S and updates it by the rows that enter or leave S, which each pass computes
    statelessly per piece: ζ recomputed from s (in memory the blocks are kept, ``cache_mb``),
    f = Zw from scratch, and the inside set of the point whose rows the Gram already holds, by the
    same test |ζᵀw − φ| ≤ c. One pass per full step: at w it returns, for w + step, the system,
    the loss gradient, the Gram delta and J along w + t·step for t = 1, ½, …, 2⁻²⁷ (``T_GRID``;
    in memory first t = 1 alone, the rest only for a damped step); the step is the first t with
    J(w + t·step) ≤ J(w) + 1e-12|J(w)|, and a damped step costs one more pass at the accepted
    point. When the pass's gradient norm is ≤ ``accuracy.stop_tol`` the certificate recomputes
    the gradient over every row, summed with a proven rounding bound (:func:`exact_gradient`,
    one pass) and returns w if :meth:`RffAccuracy.accepts`. When no iterate certifies within
    ``NEWTON_ITER`` steps, or a system is not positive definite, :func:`guaranteed_descent` runs
    from the last iterate. Either way the result is within ``accuracy.target`` of the exact
    minimiser, so Δ = L_w/(λ0 n) + τ/λ0 holds (docs/proofs/cate.md §3).
    """
    p = feats.dim
    in_memory = isinstance(backend, InMemory)
    cache = FeatureCache(CACHE_MB if cache_mb is None else cache_mb) if in_memory else None
    stat: Any = functools.partial(rff_pass, feats=feats, c=huber_c, rows=rows, cache=cache)
    exact = functools.partial(exact_gradient, backend, feats, n=n, lam0=lam0, huber_c=huber_c)
    w = np.zeros(p)
    hess = np.zeros((p, p))
    zu, zv, d_hess, loss = backend.map_sum(functools.partial(stat, w=w, w_in=None, step=None))
    val = float(loss[0]) / n + lam0 * float(w @ w)
    for it in range(NEWTON_ITER + 1):
        gnorm = float(np.linalg.norm(zv / n + 2.0 * lam0 * w))
        if gnorm <= accuracy.stop_tol:
            grad = exact(w)
            if accuracy.accepts(w, grad):
                return RffFit(w, float(np.linalg.norm(grad)), it)
        if it == NEWTON_ITER:
            break
        hess += d_hess  # the Gram now holds the inside set at w
        lhs = hess / n
        lhs[np.diag_indices_from(lhs)] += lam0
        new = _newton_direction(lhs, zu / n)
        if new is None or not bool(np.all(np.isfinite(new))):
            break
        step = new - w
        ts = T_GRID[:1] if in_memory else T_GRID
        zu_f, zv_f, dh_f, line = backend.map_sum(
            functools.partial(stat, w=w, w_in=w, step=step, ts=ts))
        if in_memory and not _accepts(float(line[0]), w + step, n, lam0, val):
            line = backend.map_sum(functools.partial(stat, w=w, w_in=w, step=step))[3]
        for k, t in enumerate(T_GRID):
            cand_w = w + t * step
            cval = float(line[k]) / n + lam0 * float(cand_w @ cand_w)
            if cval <= val + 1e-12 * abs(val) or t < 1e-8:
                break
        if k == 0:
            zu, zv, d_hess = zu_f, zv_f, dh_f
        else:
            zu, zv, d_hess, _ = backend.map_sum(
                functools.partial(stat, w=cand_w, w_in=w, step=None))
        w, val = cand_w, cval
    return guaranteed_descent(backend, feats, w, n=n, lam0=lam0, huber_c=huber_c,
                              accuracy=accuracy)


def _accepts(loss: float, cand_w: FloatArray, n: int, lam0: float, val: float) -> bool:
    """Whether the full step's J(w + step) passes the descent test (the first of ``T_GRID``)."""
    return loss / n + lam0 * float(cand_w @ cand_w) <= val + 1e-12 * abs(val)


def fit_rff_streaming(feats: FourierFeatures, s: FloatArray, rho: FloatArray, phi: FloatArray, *,
                      lam0: float, huber_c: float | None, accuracy: RffAccuracy,
                      rows: int | None = None, cache_mb: float | None = None) -> RffFit:
    """:func:`solve_rff` on the rows in memory (one piece), ζ computed block by block from the
    box-scaled rows ``s`` (never n × 2m at once; the first blocks up to ``cache_mb`` kept)."""
    part = (s, rho, phi)
    return solve_rff(InMemory(part, s.shape[0]), feats, n=s.shape[0], lam0=lam0, huber_c=huber_c,
                     accuracy=accuracy, rows=rows, cache_mb=cache_mb)
