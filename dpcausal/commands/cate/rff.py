"""Large-n variant of the function release: random Fourier features from a PUBLIC seed (spec §3.6).

ζ(s) = m^{-1/2}(cos(Ωᵀs), sin(Ωᵀs)) ∈ ℝ^{2m}, Ω's columns ~ N(0, h⁻²I_q) drawn from ``rff_seed``
before any data is read, so ‖ζ(s)‖ = 1 exactly and k_m(s, s′) = ζ(s)ᵀζ(s′) → k0(s, s′) as m grows.
The second stage is the same weighted Huber ridge, now in the RKHS of k_m, i.e. over weights w:
J(w) = (1/n)Σ ρ_i ℓ_c(wᵀζ_i − φ_i) + λ0‖w‖². A GP with covariance k_m is U(x) = ζ(x)ᵀξ with
ξ ~ N(0, I_{2m}), so the private function is the weight vector w + σξ: releasable, evaluable anywhere.
Data-dependent centres (Nyström, k-means) would break the sensitivity argument (spec P13); these
features depend on the public seed only.

The solver streams: the n × 2m feature matrix is never held; each pass recomputes ζ for blocks of
rows (the first blocks, up to ``CACHE_MB``, are kept between passes), so memory is
O(n + m² + block + CACHE_MB) — a few n-vectors, the 2m × 2m system and bounded buffers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import linalg
from scipy.linalg import blas

from dpcausal.commands.cate.krr import huber_derivative, huber_value
from dpcausal.errors import SolverError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
BLOCK_BYTES = 32 * 2**20
"""Target size of one block of feature rows (rows per block = BLOCK_BYTES / (8·2m), at least 256)."""
CACHE_MB = 2048
"""Feature blocks kept between passes (the rest are recomputed each pass)."""


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


class _Blocks:
    """Row blocks of Z, computed on demand by ``make(i0, i1)``; the first ones cached."""

    def __init__(self, make: Callable[[int, int], FloatArray], n: int, p: int, rows: int,
                 cache_mb: float) -> None:
        self.make, self.n, self.p, self.rows = make, n, p, rows
        self.bounds = [(i, min(i + rows, n)) for i in range(0, n, rows)]
        self.keep = int(cache_mb * 2**20 // (8 * p * rows))
        self.cache: dict[int, FloatArray] = {}

    def __iter__(self) -> Iterator[tuple[int, int, FloatArray]]:
        """Blocks in order; the next uncached block is computed in a worker thread meanwhile."""
        with ThreadPoolExecutor(max_workers=1) as pool:
            ahead: dict[int, Future[FloatArray]] = {}

            def request(k: int) -> None:
                if k < len(self.bounds) and k not in self.cache and k not in ahead:
                    ahead[k] = pool.submit(self.make, *self.bounds[k])

            for k, (i0, i1) in enumerate(self.bounds):
                request(k)
                request(k + 1)
                z = self.cache[k] if k in self.cache else ahead.pop(k).result()
                if k < self.keep:
                    self.cache[k] = z
                yield i0, i1, z


@dataclass
class _PassStats:
    """What one pass over the rows yields at a point w (given f = Zw)."""

    zu: FloatArray  # Zᵀu: u = ρφ inside, −cρ sign(r) outside (Newton right-hand side × n)
    zv: FloatArray  # Zᵀ(ρℓ′(r)) (loss gradient × n)
    d_hess: FloatArray  # upper triangle of Σ ±ρ z zᵀ over rows entering/leaving the inside set
    inside: BoolArray


def _add_gram_upper(acc: FloatArray, z: FloatArray, weights: FloatArray, sign: float) -> None:
    """acc += sign·Zᵀdiag(weights)Z on the upper triangle, in place (BLAS syrk; ``acc`` F-ordered)."""
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


def _pass(blocks: _Blocks, f: FloatArray, rho: FloatArray, phi: FloatArray, c: float | None,
          inside_prev: BoolArray, step: FloatArray | None) -> tuple[_PassStats, FloatArray | None]:
    """One pass at f (or, with ``step``, at f + Z·step, also returning Z·step)."""
    p = blocks.p
    zuv = np.zeros((p, 2))
    d_hess = np.zeros((p, p), order="F")
    inside = np.empty(f.shape[0], dtype=bool)
    df = None if step is None else np.empty(f.shape[0])
    for i0, i1, z in blocks:
        fc = f[i0:i1]
        if step is not None:
            assert df is not None
            dfc = z @ step
            df[i0:i1] = dfc
            fc = fc + dfc
        r = fc - phi[i0:i1]
        rc = rho[i0:i1]
        ins = np.ones(r.shape[0], dtype=bool) if c is None else np.abs(r) <= c
        inside[i0:i1] = ins
        u = np.where(ins, rc * phi[i0:i1], 0.0 if c is None else -c * rc * np.sign(r))
        zuv += z.T @ np.column_stack([u, rc * huber_derivative(r, c)])
        add_inside_change(d_hess, z, rc, ins, inside_prev[i0:i1])
    return _PassStats(zuv[:, 0].copy(), zuv[:, 1].copy(), d_hess, inside), df


def _objective(f: FloatArray, w: FloatArray, rho: FloatArray, phi: FloatArray, lam0: float,
               c: float | None) -> float:
    return float(rho @ huber_value(f - phi, c)) / f.shape[0] + lam0 * float(w @ w)


def solve_streaming(make: Callable[[int, int], FloatArray], n: int, p: int, rho: FloatArray,
                    phi: FloatArray, *, lam0: float, huber_c: float | None, grad_tol: float,
                    max_iter: int = 100, rows: int | None = None,
                    cache_mb: float | None = None) -> RffFit:
    """Minimise J(w) = (1/n)Σ ρ_i ℓ_c(wᵀz_i − φ_i) + λ0‖w‖² exactly, reading Z in row blocks.

    Active-set Newton (damped): given the rows S with |residual| ≤ c, stationarity is the p × p
    system (Z_SᵀW_SZ_S/n + λ0 I) w = Z_SᵀW_Sφ_S/n − c Σ_{i∉S} ρ_i sign(r_i) z_i/n. Z_SᵀW_SZ_S is
    kept and updated only by the rows that enter or leave S; f = Zw is kept as an n-vector, so the
    line search costs O(n). One pass over the rows per iteration computes Z·step and, at the full
    step, the next system and the gradient (a damped step costs one more pass). Stops at
    ‖∇J‖₂ ≤ ``grad_tol``, certified by one more pass at f = Zw recomputed from scratch.

    Raises
    ------
    SolverError
        When the tolerance is not reached.
    """
    blocks = _Blocks(make, n, p, rows or block_rows(p), CACHE_MB if cache_mb is None else cache_mb)
    w = np.zeros(p)
    f = np.zeros(n)
    hess = np.zeros((p, p))
    inside_prev = np.zeros(n, dtype=bool)
    val = _objective(f, w, rho, phi, lam0, huber_c)
    stats, _ = _pass(blocks, f, rho, phi, huber_c, inside_prev, None)
    gnorm = math.inf
    fresh = True  # f = Zw computed from scratch (not accumulated as Σ t·Z·step)
    for it in range(max_iter + 1):
        gnorm = float(np.linalg.norm(stats.zv / n + 2.0 * lam0 * w))
        if gnorm <= grad_tol and not fresh:
            # certify at f recomputed from scratch, so the gradient is ∇J(w) itself and not the
            # gradient at the accumulated f (which differs from Zw by rounding)
            f = np.concatenate([z @ w for _, _, z in blocks])
            val = _objective(f, w, rho, phi, lam0, huber_c)
            stats, _ = _pass(blocks, f, rho, phi, huber_c, inside_prev, None)
            fresh = True
            gnorm = float(np.linalg.norm(stats.zv / n + 2.0 * lam0 * w))
        if gnorm <= grad_tol:
            return RffFit(w, gnorm, it)
        if it == max_iter:
            break
        hess += stats.d_hess
        inside_prev = stats.inside
        lhs = hess / n  # upper triangle of Z_SᵀW_SZ_S/n
        lhs[np.diag_indices_from(lhs)] += lam0
        try:
            new = linalg.cho_solve(linalg.cho_factor(lhs, lower=False, check_finite=False),
                                   stats.zu / n, check_finite=False)
        except linalg.LinAlgError as exc:
            raise SolverError("the random-feature second-stage system is not positive definite; "
                              "raise cate.ridge") from exc
        step = new - w
        full, df = _pass(blocks, f, rho, phi, huber_c, inside_prev, step)
        assert df is not None
        t = 1.0
        while True:
            cand_f = f + t * df
            cand_w = w + t * step
            cval = _objective(cand_f, cand_w, rho, phi, lam0, huber_c)
            if cval <= val + 1e-12 * abs(val) or t < 1e-8:
                break
            t *= 0.5
        w, f, val = cand_w, cand_f, cval
        fresh = False
        if t == 1.0:
            stats = full
        else:
            stats, _ = _pass(blocks, f, rho, phi, huber_c, inside_prev, None)
    raise SolverError(
        f"the random-feature second stage did not reach its gradient tolerance {grad_tol:.3g}; "
        "raise cate.ridge or cate.huber_c, or report this as a bug")


def fit_rff(z: FloatArray, rho: FloatArray, phi: FloatArray, *, lam0: float, huber_c: float | None,
            grad_tol: float, max_iter: int = 100, rows: int | None = None) -> RffFit:
    """:func:`solve_streaming` on a feature matrix already in memory."""
    n, p = z.shape
    return solve_streaming(lambda i0, i1: z[i0:i1], n, p, rho, phi, lam0=lam0, huber_c=huber_c,
                           grad_tol=grad_tol, max_iter=max_iter, rows=rows, cache_mb=0)


def fit_rff_streaming(feats: FourierFeatures, s: FloatArray, rho: FloatArray, phi: FloatArray, *,
                      lam0: float, huber_c: float | None, grad_tol: float, max_iter: int = 100,
                      rows: int | None = None, cache_mb: float | None = None) -> RffFit:
    """The same fit with ζ computed block by block from the box-scaled rows ``s`` (never n × 2m)."""
    return solve_streaming(lambda i0, i1: feats.transform(s[i0:i1]), s.shape[0], feats.dim, rho,
                           phi, lam0=lam0, huber_c=huber_c, grad_tol=grad_tol, max_iter=max_iter,
                           rows=rows, cache_mb=cache_mb)
