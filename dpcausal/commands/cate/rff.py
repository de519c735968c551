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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.krr import huber_derivative, huber_value
from dpcausal.commands.cate.rff_accuracy import RffAccuracy
from dpcausal.numerics import SUM_CHUNK, exact_total
from dpcausal.solvers.backend import Backend, InMemory

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
BLOCK_BYTES = 32 * 2**20
"""Target size of one block of feature rows (rows per block = BLOCK_BYTES / (8·2m), at least 256)."""
CACHE_MB = 4096
"""In memory, feature blocks kept between passes (the rest are recomputed each pass): 4 GB keeps
every block of 500,000 second-half rows (1,000,000 rows) at the default 2m = 1,000 features, so
their cos/sin are computed once (issue 24)."""
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
    """Rows per streamed block for p features: ~``BLOCK_BYTES``, a multiple of ``SUM_CHUNK`` when
    at least that many, so the exact gradient's blocks of ``SUM_CHUNK`` rows lie inside kept
    feature blocks."""
    rows = max(256, BLOCK_BYTES // (8 * p))
    return rows - rows % SUM_CHUNK if rows >= SUM_CHUNK else rows


@dataclass(frozen=True)
class RffFit:
    """ĝ(x) = wᵀζ(s(x)) and how exact the solve was."""

    w: FloatArray
    grad_norm: float
    iterations: int


class GramScratch:
    """One worker's reusable buffers for :func:`_add_gram`: the selected, weighted rows and the
    p × p product. A block's rows are ~32 MB, above the size from which the C allocator maps
    fresh pages for every array, so fresh temporaries per block cost page faults (system CPU
    time) on every pass; these are allocated once per pass and worker instead (issue 24)."""

    def __init__(self) -> None:
        self.rows: FloatArray | None = None
        self.gram: FloatArray | None = None

    def take(self, k: int, z: FloatArray) -> tuple[FloatArray, FloatArray]:
        """A (k, p) row buffer (room for all of block ``z``'s rows, so the next blocks fit it)
        and the (p, p) product buffer."""
        n, p = z.shape
        if self.rows is None or self.rows.shape[0] < max(k, n) or self.rows.shape[1] != p:
            self.rows = np.empty((max(k, n), p))
        if self.gram is None or self.gram.shape[0] != p:
            self.gram = np.empty((p, p))
        return self.rows[:k], self.gram


def _add_gram(acc: FloatArray, z: FloatArray, weights: FloatArray, sign: float,
              sel: BoolArray | None = None, scratch: GramScratch | None = None) -> None:
    """acc += sign·Z_Sᵀdiag(weights_S)Z_S over the rows S = ``sel`` (None: all), in place.
    NumPy computes ``zwᵀzw`` by BLAS syrk (one triangle, mirrored) and, unlike SciPy's BLAS
    wrappers, releases the GIL meanwhile, so the workers of a pass add their blocks' Grams at the
    same time. With ``scratch`` the rows √w·z and the product go into its buffers (the same
    numbers as fresh arrays)."""
    root = np.sqrt(weights if sel is None else weights[sel])[:, None]
    if scratch is None:
        zw = (z if sel is None else z[sel]) * root
        gram = zw.T @ zw
    else:
        zw, gram = scratch.take(root.shape[0], z)
        if sel is None:
            np.multiply(z, root, out=zw)
        else:
            np.compress(sel, z, axis=0, out=zw)
            zw *= root
        np.matmul(zw.T, zw, out=gram)
    if sign > 0:
        acc += gram
    else:
        acc -= gram


def add_inside_change(d_hess: FloatArray, z: FloatArray, rho: FloatArray, inside: BoolArray,
                      prev: BoolArray, scratch: GramScratch | None = None) -> None:
    """d_hess += Σ ρ z zᵀ over the rows that entered the inside set − over those that left it
    (in place): the change of Z_SᵀW_SZ_S between two iterates."""
    enter = inside & ~prev
    if enter.all():
        _add_gram(d_hess, z, rho, 1.0, scratch=scratch)
        return
    for sel, sign in ((enter, 1.0), (prev & ~inside, -1.0)):
        if sel.any():
            _add_gram(d_hess, z, rho, sign, sel=sel, scratch=scratch)


class FeatureCache:
    """The feature blocks of the one in-memory piece, kept between passes up to ``cache_mb`` (ζ's
    cos/sin dominate a pass). An engine's pieces are never cached: a worker may recompute a
    partition, and nothing per row survives a pass there.

    Which blocks are kept is decided by their position alone (the first ones whose bytes fit),
    never by the order the workers compute them in, so every pass sees the same blocks kept."""

    def __init__(self, cache_mb: float) -> None:
        self.cache_mb = cache_mb
        self.blocks: dict[tuple[int, int], FloatArray] = {}
        self.point: FloatArray | None = None
        """The point v of the last pass, whose margins ``margins`` holds per block."""
        self.margins: dict[tuple[int, int], FloatArray] = {}

    def margins_at(self, key: tuple[int, int], w: FloatArray) -> FloatArray | None:
        """Zw of block ``key`` when the last pass computed Zv at v equal to ``w`` (the same
        product of the same kept features: the same numbers), else None."""
        if self.point is None or not np.array_equal(self.point, w):
            return None
        return self.margins.get(key)

    def keeps(self, i1: int, p: int) -> bool:
        """Whether the block ending at row ``i1`` (all blocks before it kept too) fits."""
        return i1 * p * 8 <= self.cache_mb * 2**20

    def get(self, key: tuple[int, int], p: int, make: Callable[[], FloatArray]) -> FloatArray:
        """The block ``key`` = (i0, i1) of ``p`` features, computed by ``make`` unless kept."""
        z = self.blocks.get(key)
        if z is None:
            z = make()
            if self.keeps(key[1], p):
                self.blocks[key] = z
        return z

    def rows(self, i0: int, i1: int) -> FloatArray | None:
        """The kept features of rows [i0, i1) when one kept block holds them all, else None."""
        for (b0, b1), z in self.blocks.items():
            if b0 <= i0 and i1 <= b1:
                return z[i0 - b0:i1 - b0]
        return None


def _block_bounds(n: int, rows: int) -> list[tuple[int, int]]:
    return [(i, min(i + rows, n)) for i in range(0, n, rows)]


def _inside(r: FloatArray, c: float | None) -> BoolArray:
    return np.ones(r.shape[0], dtype=bool) if c is None else np.abs(r) <= c


PassStats = tuple[FloatArray, FloatArray, FloatArray]
"""One worker's sums: (Zᵀ[u, ρℓ′(r)] (p × 2), the Gram delta, the loss sums)."""


def rff_pass(part: Part, start: int, *, feats: FourierFeatures, c: float | None, w: FloatArray,
             w_in: FloatArray | None, step: FloatArray | None, ts: FloatArray = T_GRID,
             rows: int | None = None, cache: FeatureCache | None = None
             ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """One piece's statistics at the point v = w (``step`` None) or v = w + step.

    Returns (Zᵀu, Zᵀ(ρℓ′(r)), Σ ±ρ ζζᵀ over the rows entering/leaving the
    inside set relative to the inside set at ``w_in`` (None: no row inside), and the loss sums
    Σ ρ ℓ_c(r)) with r = Zv − φ; with ``step``, the loss sums are Σ ρ ℓ_c(Zw + t·Z·step − φ) for every
    t of ``ts`` (J along the step), else the single sum at v. Every product is computed from
    scratch for the rows of this piece.

    The blocks of rows are shared out to ``Z_THREADS`` workers by position (worker k takes the
    blocks k, k + Z_THREADS, ...), each computing its blocks' features (or taking them from
    ``cache``) and adding their statistics in block order; the workers' sums are then added in
    worker order. So the result does not depend on thread timing, and both cores work on a pass
    (NumPy and BLAS release the GIL; BLAS itself runs one thread on small machines).
    """
    s, rho, phi = part
    p = feats.dim
    n = s.shape[0]
    losses = np.zeros(ts.size if step is not None else 1)
    if n == 0:
        return np.zeros(p), np.zeros(p), np.zeros((p, p)), losses
    v = w if step is None else w + step
    bounds = _block_bounds(n, rows or block_rows(p))

    def block_stats(acc: PassStats, i0: int, i1: int, scratch: GramScratch) -> None:
        zuv, d_hess, loss = acc
        if cache is None:
            z = feats.transform(s[i0:i1])
        else:
            z = cache.get((i0, i1), p, functools.partial(feats.transform, s[i0:i1]))
        ph, rc = phi[i0:i1], rho[i0:i1]
        fv = z @ v  # margins at a point are always this one product (consistent inside sets)
        if kept is not None:
            kept[i0, i1] = fv
        r = fv - ph
        f = None
        if step is None:
            loss[0] += float(rc @ huber_value(r, c))
        else:
            f = cache.margins_at((i0, i1), w) if cache is not None else None
            if f is None:
                f = z @ w
            df = fv - f  # Z·step without a third product
            rt = f[:, None] + df[:, None] * ts[None, :] - ph[:, None]
            loss += rc @ huber_value(rt, c)
        ins = _inside(r, c)
        u = np.where(ins, rc * ph, 0.0 if c is None else -c * rc * np.sign(r))
        zuv += z.T @ np.column_stack([u, rc * huber_derivative(r, c)])
        if w_in is None:
            prev = np.zeros(i1 - i0, dtype=bool)
        else:
            prev = _inside((f if f is not None and w_in is w else z @ w_in) - ph, c)
        add_inside_change(d_hess, z, rc, ins, prev, scratch)

    def worker(k: int) -> PassStats:
        acc = (np.zeros((p, 2)), np.zeros((p, p)), np.zeros_like(losses))
        scratch = GramScratch()
        for i0, i1 in bounds[k::Z_THREADS]:
            block_stats(acc, i0, i1, scratch)
        return acc

    # in memory, each block's Zv is kept for the next pass, whose w is this pass's v when the
    # full step is taken: one product of the features instead of two
    kept: dict[tuple[int, int], FloatArray] | None = {} if cache is not None else None
    workers = min(Z_THREADS, len(bounds))
    if workers == 1:
        parts = [worker(0)]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(worker, range(workers)))
    zuv, d_hess, loss = parts[0]
    for more in parts[1:]:
        zuv += more[0]
        d_hess += more[1]
        loss += more[2]
    losses += loss
    if cache is not None and kept is not None:
        cache.point, cache.margins = v.copy(), kept
    return zuv[:, 0].copy(), zuv[:, 1].copy(), d_hess, losses


NEWTON_ITER = 100
"""At most this many active-set Newton steps before the guaranteed fallback runs."""


def exact_gradient_pass(part: Part, start: int, *, feats: FourierFeatures, c: float | None,
                        w: FloatArray, cache: FeatureCache | None = None) -> FloatArray:
    """Σ ρ_i ℓ_c′(ζ_iᵀw − φ_i)ζ_i over one piece, in blocks of ≤ ``SUM_CHUNK`` rows added exactly
    rounded (what :attr:`RffAccuracy.grad_allowance` bounds). A block's features come from
    ``cache`` when a kept block holds its rows (the same values ``transform`` gives them); the
    blocks are computed in ``Z_THREADS`` threads, and the exactly rounded total does not depend
    on their order."""
    s, rho, phi = part
    n = s.shape[0]

    def block(rows: slice) -> FloatArray:
        z = cache.rows(rows.start, rows.stop) if cache is not None else None
        if z is None:
            z = feats.transform(s[rows])
        return np.asarray(z.T @ (rho[rows] * huber_derivative(z @ w - phi[rows], c)))

    if n == 0:
        return np.zeros(feats.dim)
    chunks = [slice(i, min(n, i + SUM_CHUNK)) for i in range(0, n, SUM_CHUNK)]
    with ThreadPoolExecutor(max_workers=Z_THREADS) as pool:
        return np.asarray(exact_total(list(pool.map(block, chunks))), dtype=np.float64)


def exact_gradient(backend: Backend, feats: FourierFeatures, w: FloatArray, *, n: int,
                   lam0: float, huber_c: float | None,
                   cache: FeatureCache | None = None) -> FloatArray:
    """ĝ = ∇J(w), the pieces added exactly rounded; one pass."""
    parts = backend.map_list(functools.partial(exact_gradient_pass, feats=feats, c=huber_c, w=w,
                                               cache=cache))
    return np.asarray(exact_total(parts), dtype=np.float64) / n + 2.0 * lam0 * w


def project(w: FloatArray, radius: float) -> FloatArray:
    """P_R(w): w scaled onto the ball ‖w‖ ≤ R when outside it (0 when not finite)."""
    if not bool(np.all(np.isfinite(w))):
        return np.zeros_like(w)
    norm = float(np.linalg.norm(w))
    return w * (radius / norm) if norm > radius else w


def guaranteed_descent(backend: Backend, feats: FourierFeatures, start: FloatArray, *, n: int,
                       lam0: float, huber_c: float | None, accuracy: RffAccuracy,
                       cache: FeatureCache | None = None) -> RffFit:
    """The fallback: projected gradient descent from P_R(start), step s, for the public
    ``accuracy.steps`` passes (fewer when a step's gradient meets the certificate); the returned w
    is within ``accuracy.target`` of w* by the contraction bound (rff_accuracy's docstring), with
    no check."""
    w = project(np.asarray(start, dtype=np.float64), accuracy.radius)
    for it in range(accuracy.steps):
        grad = exact_gradient(backend, feats, w, n=n, lam0=lam0, huber_c=huber_c, cache=cache)
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
    exact = functools.partial(exact_gradient, backend, feats, n=n, lam0=lam0, huber_c=huber_c,
                              cache=cache)
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
                              accuracy=accuracy, cache=cache)


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
