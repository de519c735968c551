"""The data passes of cate's random-feature solver (:func:`dpcausal.commands.cate.rff.solve_rff`):
per-piece statistics over rows (s, ρ, φ), computed from the float32 feature map ζ̃
(:mod:`dpcausal.commands.cate.rff_features`) block by block.

Every float64 quantity of a pass (margins ζ̃ᵀv, the loss, the gradient Σρℓ′ζ̃) is computed from
the float32 features converted EXACTLY to float64, so it is the float64 arithmetic of ζ̃ itself.
Only the Gram updates Σ ±ρ ζ̃ζ̃ᵀ (the Newton system, which the solver uses as a preconditioner:
it never enters the certificate, the sensitivity or the released value) are float32 products,
added into a float64 sum.
"""

from __future__ import annotations

import functools
import mmap
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.krr import huber_derivative, huber_value
from dpcausal.commands.cate.rff_features import Float32Array, FourierFeatures, block_rows
from dpcausal.numerics import SUM_CHUNK, exact_total

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Z_THREADS = 2
"""Workers sharing a pass's blocks (NumPy and BLAS release the GIL)."""
T_GRID: FloatArray = 0.5 ** np.arange(28, dtype=np.float64)
"""The backtracking steps 1, ½, …, 2⁻²⁷ of the line search (the first below 1e-8, where it
stops)."""
SUB_ROWS = 128
"""Rows converted to float64 at a time in a pass (1 MB at 2m = 1,000: stays in a core's cache)."""
Part = tuple[FloatArray, FloatArray, FloatArray]
"""One piece of second-half rows: box-scaled covariates s, weights ρ, pseudo-outcomes φ."""


class Scratch:
    """One worker's reusable buffers: the block's features in float64, the selected weighted rows
    (float32) and the p × p float32 product. A block is ~32 MB, above the size from which the C
    allocator maps fresh pages for every array, so fresh temporaries per block cost page faults
    (system CPU time) on every pass; these are allocated once per pass and worker (issue 24)."""

    def __init__(self) -> None:
        self.z64: FloatArray | None = None
        self.rows: Float32Array | None = None
        self.gram: Float32Array | None = None

    def float64(self, z: Float32Array) -> FloatArray:
        """``z`` converted exactly to float64, in this worker's buffer."""
        n, p = z.shape
        if self.z64 is None or self.z64.shape[0] < n or self.z64.shape[1] != p:
            self.z64 = np.empty((n, p))
        out = self.z64[:n]
        np.copyto(out, z)
        return out

    def take(self, k: int, z: Float32Array) -> tuple[Float32Array, Float32Array]:
        """A (k, p) float32 row buffer (room for all of block ``z``'s rows, so the next blocks fit
        it) and the (p, p) float32 product buffer."""
        n, p = z.shape
        if self.rows is None or self.rows.shape[0] < max(k, n) or self.rows.shape[1] != p:
            self.rows = np.empty((max(k, n), p), dtype=np.float32)
        if self.gram is None or self.gram.shape[0] != p:
            self.gram = np.empty((p, p), dtype=np.float32)
        return self.rows[:k], self.gram


def _add_gram(acc: FloatArray, z: Float32Array, weights: FloatArray, sign: float,
              sel: BoolArray | None = None, scratch: Scratch | None = None) -> None:
    """acc += sign·Z_Sᵀdiag(weights_S)Z_S over the rows S = ``sel`` (None: all), in place, the
    product in float32 (BLAS ssyrk through NumPy's ``zwᵀzw``, which releases the GIL, so the
    workers of a pass add their blocks' Grams at the same time) added into the float64 ``acc``."""
    root = np.sqrt(weights if sel is None else weights[sel]).astype(np.float32)[:, None]
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


def add_inside_change(d_hess: FloatArray, z: Float32Array, rho: FloatArray, inside: BoolArray,
                      prev: BoolArray, scratch: Scratch | None = None) -> None:
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
    """The float32 feature blocks of the one in-memory piece, kept between passes up to
    ``cache_mb`` (ζ̃ is a pass's largest computation after the Gram). An engine's pieces are never
    cached: a worker may recompute a partition, and nothing per row survives a pass there.

    Which blocks are kept is decided by their position alone (the first ones whose bytes fit),
    never by the order the workers compute them in, so every pass sees the same blocks kept."""

    def __init__(self, cache_mb: float) -> None:
        self.cache_mb = cache_mb
        self.blocks: dict[tuple[int, int], Float32Array] = {}
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
        return i1 * p * 4 <= self.cache_mb * 2**20

    def get(self, key: tuple[int, int], p: int,
            make: Callable[[Float32Array | None], Float32Array]) -> Float32Array:
        """The block ``key`` = (i0, i1) of ``p`` features, computed by ``make(out)`` unless kept
        (into a buffer of :func:`kept_buffer` when it is to be kept)."""
        z = self.blocks.get(key)
        if z is None:
            if self.keeps(key[1], p):
                z = self.blocks[key] = make(kept_buffer((key[1] - key[0], p)))
            else:
                z = make(None)
        return z

    def rows(self, i0: int, i1: int) -> Float32Array | None:
        """The kept features of rows [i0, i1) when one kept block holds them all, else None."""
        for (b0, b1), z in self.blocks.items():
            if b0 <= i0 and i1 <= b1:
                return z[i0 - b0:i1 - b0]
        return None


def kept_buffer(shape: tuple[int, int]) -> Float32Array:
    """An uninitialised float32 array for a kept feature block, in anonymous memory mapped
    without NumPy's allocator: NumPy asks the kernel for transparent huge pages on large arrays,
    and where the kernel then compacts memory on the first touch (``defrag: madvise``, the
    common default) that cost 2–3 s of system time per 2 GB of kept features on the shared 2-core
    benchmark machine, against ~0.6 s with ordinary pages (issue 24). Falls back to
    ``np.empty`` where anonymous private maps are not available."""
    nbytes = shape[0] * shape[1] * 4
    flags = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
    if nbytes == 0 or None in flags:
        return np.empty(shape, dtype=np.float32)
    buf = mmap.mmap(-1, nbytes, flags=flags[0] | flags[1])  # type: ignore[operator]
    return np.frombuffer(buf, dtype=np.float32).reshape(shape)


def _block_bounds(n: int, rows: int) -> list[tuple[int, int]]:
    return [(i, min(i + rows, n)) for i in range(0, n, rows)]


def _inside(r: FloatArray, c: float | None) -> BoolArray:
    return np.ones(r.shape[0], dtype=bool) if c is None else np.abs(r) <= c


PassStats = tuple[FloatArray, FloatArray, FloatArray]
"""One worker's sums: (Zᵀρℓ′(r), the Gram delta, the loss sums)."""


def rff_pass(part: Part, start: int, *, feats: FourierFeatures, c: float | None, w: FloatArray,
             w_in: FloatArray | None, step: FloatArray | None, ts: FloatArray = T_GRID,
             rows: int | None = None, cache: FeatureCache | None = None, scale: float = 1.0
             ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """One piece's statistics at the point v = w (``step`` None) or v = w + step.

    Returns (Zᵀ(ρℓ′(r)), Σ ±ρ ζζᵀ over the rows entering/leaving the inside set relative to the
    inside set at ``w_in`` (None: no row inside), and the scaled loss sums
    Σ ρ ℓ_{c·s}(s·r) = s²·Σ ρ ℓ_c(r)) with r = Zv − φ and s = ``scale``, a public power of two
    (:attr:`~dpcausal.commands.cate.rff_accuracy.RffAccuracy.scale`: the squares stay in
    float64's range at any outcome scale, and the sums are exactly s² times the unscaled ones
    wherever those neither overflow nor underflow); with ``step``, the loss sums are
    Σ ρ ℓ_{c·s}(s·(Zw + t·Z·step − φ)) for every t of ``ts`` (J along the step), else the single
    sum at v. Every product is computed from scratch for the rows of this piece; all but the
    Gram's in float64 (module docstring).

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
        return np.zeros(p), np.zeros((p, p)), losses
    v = w if step is None else w + step
    bounds = _block_bounds(n, rows or block_rows(p))
    cs = None if c is None else c * scale

    def block_stats(acc: PassStats, i0: int, i1: int, scratch: Scratch) -> None:
        zv_acc, d_hess, loss = acc
        if cache is None:
            z32 = feats.transform32(s[i0:i1])
        else:
            z32 = cache.get((i0, i1), p, functools.partial(feats.transform32, s[i0:i1]))
        ph, rc = phi[i0:i1], rho[i0:i1]
        f = None if step is None or cache is None else cache.margins_at((i0, i1), w)
        need_f = step is not None and f is None
        need_in = w_in is not None and (step is None or w_in is not w)
        fv, f_new, f_in = np.empty(i1 - i0), np.empty(i1 - i0), np.empty(i1 - i0)
        # float64 products a few rows at a time, each sub-block converted into a buffer that stays
        # in the core's cache: margins at a point are always this one product (consistent inside
        # sets), and the gradient's terms are row-local
        for j0 in range(0, i1 - i0, SUB_ROWS):
            j1 = min(i1 - i0, j0 + SUB_ROWS)
            z = scratch.float64(z32[j0:j1])
            fv[j0:j1] = z @ v
            if need_f:
                f_new[j0:j1] = z @ w
            if need_in and w_in is not None:
                f_in[j0:j1] = z @ w_in
            zv_acc += z.T @ (rc[j0:j1] * huber_derivative(fv[j0:j1] - ph[j0:j1], c))
        if kept is not None:
            kept[i0, i1] = fv
        r = fv - ph
        if step is None:
            loss[0] += float(rc @ huber_value(r * scale, cs))
        else:
            if f is None:
                f = f_new
            df = fv - f  # Z·step without a third product
            rt = f[:, None] + df[:, None] * ts[None, :] - ph[:, None]
            rt *= scale
            loss += rc @ huber_value(rt, cs)
        prev = (np.zeros(i1 - i0, dtype=bool) if w_in is None
                else _inside((f_in if need_in or f is None else f) - ph, c))
        add_inside_change(d_hess, z32, rc, _inside(r, c), prev, scratch)

    def worker(k: int) -> PassStats:
        acc = (np.zeros(p), np.zeros((p, p)), np.zeros_like(losses))
        scratch = Scratch()
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
    zv, d_hess, loss = parts[0]
    for more in parts[1:]:
        zv += more[0]
        d_hess += more[1]
        loss += more[2]
    losses += loss
    if cache is not None and kept is not None:
        cache.point, cache.margins = v.copy(), kept
    return zv, d_hess, losses


def exact_gradient_pass(part: Part, start: int, *, feats: FourierFeatures, c: float | None,
                        w: FloatArray, cache: FeatureCache | None = None) -> FloatArray:
    """Σ ρ_i ℓ_c′(ζ̃_iᵀw − φ_i)ζ̃_i over one piece, in blocks of ≤ ``SUM_CHUNK`` rows added exactly
    rounded (what :attr:`RffAccuracy.grad_allowance` bounds: a block's sum of ≤ ``SUM_CHUNK``
    terms, here ``SUB_ROWS`` at a time then added, errs by γ_{SUM_CHUNK} of its absolute terms
    in any order), in float64 from the float32 ζ̃ converted exactly. A block's features come
    from ``cache`` when a kept block holds its rows (the same values ``transform32`` gives them);
    the blocks are computed in ``Z_THREADS`` threads, and the exactly rounded total does not
    depend on their order."""
    s, rho, phi = part
    n = s.shape[0]
    local = threading.local()

    def block(rows: slice) -> FloatArray:
        z32 = cache.rows(rows.start, rows.stop) if cache is not None else None
        if z32 is None:
            z32 = feats.transform32(s[rows])
        if not hasattr(local, "scratch"):
            local.scratch = Scratch()
        total = np.zeros(feats.dim)
        for j0 in range(0, z32.shape[0], SUB_ROWS):  # a few rows at a time, as in rff_pass
            j1 = min(z32.shape[0], j0 + SUB_ROWS)
            z = local.scratch.float64(z32[j0:j1])
            sub = slice(rows.start + j0, rows.start + j1)
            total += z.T @ (rho[sub] * huber_derivative(z @ w - phi[sub], c))
        return total

    if n == 0:
        return np.zeros(feats.dim)
    chunks = [slice(i, min(n, i + SUM_CHUNK)) for i in range(0, n, SUM_CHUNK)]
    with ThreadPoolExecutor(max_workers=Z_THREADS) as pool:
        return np.asarray(exact_total(list(pool.map(block, chunks))), dtype=np.float64)
