"""Large-n variant of the function release: random Fourier features from a PUBLIC seed (spec §3.6).

ζ̃(s) ≈ m^{-1/2}(cos(Ωᵀs), sin(Ωᵀs)) ∈ ℝ^{2m}, Ω's columns ~ N(0, h⁻²I_q) drawn from ``rff_seed``
before any data is read, computed in float32 with each (cos, sin) pair clipped so that
‖ζ̃(s)‖ ≤ 1 (:mod:`dpcausal.commands.cate.rff_features`, whose Notes prove it), and
k_m(s, s′) = ζ̃(s)ᵀζ̃(s′) ≈ k0(s, s′) as m grows. The second stage is the same weighted Huber
ridge, now in the RKHS of k_m, i.e. over weights w: J(w) = (1/n)Σ ρ_i ℓ_c(wᵀζ̃_i − φ_i) + λ0‖w‖².
A GP with covariance k_m is U(x) = ζ̃(x)ᵀξ with ξ ~ N(0, I_{2m}), so the private function is the
weight vector w + σξ: releasable, evaluable anywhere. Data-dependent centres (Nyström, k-means)
would break the sensitivity argument (spec P13); these features depend on the public seed only.

One solver (:func:`solve_rff`) for every backend: every data pass is a ``backend.map_sum`` of
per-piece statistics (:func:`~dpcausal.commands.cate.rff_pass.rff_pass`) over the rows (s, ρ, φ),
in memory one piece (:func:`fit_rff_streaming`), on an engine its batches or partitions. The
n × 2m feature matrix is never held in float64: each pass computes ζ̃ for blocks of rows (in
memory the first float32 blocks, up to ``CACHE_MB``, are kept between passes), so memory is
O(n + m² + block + CACHE_MB).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.rff_accuracy import RffAccuracy
from dpcausal.commands.cate.rff_features import FourierFeatures, block_rows
from dpcausal.commands.cate.rff_pass import (
    T_GRID,
    FeatureCache,
    Part,
    exact_gradient_pass,
    rff_pass,
)
from dpcausal.numerics import exact_total, scaled_norm
from dpcausal.solvers.backend import Backend, InMemory

__all__ = ["CACHE_MB", "FourierFeatures", "Part", "RffFit", "block_rows", "exact_gradient",
           "fit_rff_streaming", "guaranteed_descent", "rff_pass", "solve_rff"]

FloatArray = npt.NDArray[np.float64]
CACHE_MB = 4096
"""In memory, feature blocks (float32) kept between passes (the rest are recomputed each pass):
4 GB keeps every block of up to ~1,000,000 second-half rows at the default 2m = 1,000 features,
so their features are computed once (issue 24)."""


@dataclass(frozen=True)
class RffFit:
    """ĝ(x) = wᵀζ̃(s(x)) and how exact the solve was."""

    w: FloatArray
    grad_norm: float
    iterations: int


NEWTON_ITER = 100
"""At most this many active-set Newton steps before the guaranteed fallback runs."""


def exact_gradient(backend: Backend, feats: FourierFeatures, w: FloatArray, *, n: int,
                   lam0: float, huber_c: float | None,
                   cache: FeatureCache | None = None) -> FloatArray:
    """ĝ = ∇J(w), the pieces added exactly rounded; one pass."""
    parts = backend.map_list(functools.partial(exact_gradient_pass, feats=feats, c=huber_c, w=w,
                                               cache=cache))
    return np.asarray(exact_total(parts), dtype=np.float64) / n + 2.0 * lam0 * w


def project(w: FloatArray, radius: float, *, scale: float) -> FloatArray:
    """P_R(w): w scaled onto the ball ‖w‖ ≤ R when outside it (0 when not finite); ‖w‖ computed
    as ‖scale·w‖/scale (``scale`` the public power of two :attr:`RffAccuracy.scale`, so it does
    not overflow to ∞ — which projected every w to 0 — at outcome scales beyond ~1e154)."""
    if not bool(np.all(np.isfinite(w))):
        return np.zeros_like(w)
    norm = scaled_norm(w, scale)
    return w * (radius / norm) if norm > radius else w


def guaranteed_descent(backend: Backend, feats: FourierFeatures, start: FloatArray, *, n: int,
                       lam0: float, huber_c: float | None, accuracy: RffAccuracy,
                       cache: FeatureCache | None = None) -> RffFit:
    """The fallback: projected gradient descent from P_R(start), step s, for the public
    ``accuracy.steps`` passes (fewer when a step's gradient meets the certificate); the returned w
    is within ``accuracy.target`` of w* by the contraction bound (rff_accuracy's docstring), with
    no check."""
    sc = accuracy.scale
    w = project(np.asarray(start, dtype=np.float64), accuracy.radius, scale=sc)
    for it in range(accuracy.steps):
        grad = exact_gradient(backend, feats, w, n=n, lam0=lam0, huber_c=huber_c, cache=cache)
        if accuracy.accepts(w, grad):
            return RffFit(w, scaled_norm(grad, sc), it)
        w = project(w - accuracy.step * grad, accuracy.radius, scale=sc)
    return RffFit(w, math.nan, accuracy.steps)


def _newton_direction(lhs: FloatArray, rhs: FloatArray) -> FloatArray | None:
    """lhs⁻¹·rhs for the active-set system (the Newton step), or None when it is not numerically
    positive definite (then the guaranteed fallback runs)."""
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

    Active-set Newton: given the rows S with |residual| ≤ c, J's Hessian is 2H with
    H = Z_SᵀW_SZ_S/n + λ0 I, and the step is −H̃⁻¹∇J(w)/2, ∇J(w) = Zᵀρℓ′(r)/n + 2λ0w in
    float64 and H̃ = H up to float32 rounding of its Gram (``rff_pass``): with an exact H this is
    the Newton point of the active-set system (Z_SᵀW_SZ_S/n + λ0 I) w = Z_SᵀW_Sφ_S/n −
    c Σ_{i∉S} ρ_i sign(r_i) z_i/n; with H̃ it is that Newton step refined (once S is settled the
    distance to the minimiser contracts by ‖H̃⁻¹(H̃ − H)‖ per step: float32's rounding of the
    Gram against λ0, ~10⁻⁴ at 1,000,000 rows), and only the certificate decides when to stop.
    The client keeps Z_SᵀW_SZ_S and updates it by the rows that enter or leave S, which each
    pass computes statelessly per piece: ζ̃ recomputed from s (in memory the blocks are kept,
    ``cache_mb``), f = Zw from scratch, and the inside set of the point whose rows the Gram
    already holds, by the same test |ζ̃ᵀw − φ| ≤ c. One pass per full step: at w it returns,
    for w + step, the loss gradient, the Gram delta and J along w + t·step for t = 1, ½, …,
    2⁻²⁷ (``T_GRID``;
    in memory first t = 1 alone, the rest only for a damped step); the step is the first t with
    J(w + t·step) ≤ J(w) + 1e-12|J(w)|, compared as s²J with s = ``accuracy.scale`` (a public
    power of two from L_w, so the squares stay in range at any outcome scale and the decision is
    the unscaled one: :func:`_scaled_objective`), and a damped step costs one more pass at the
    accepted point. When the pass's gradient norm is ≤ ``accuracy.stop_tol`` the certificate
    recomputes the gradient over every row, summed with a proven rounding bound
    (:func:`exact_gradient`, one pass) and returns w if :meth:`RffAccuracy.accepts`. When no
    iterate certifies within ``NEWTON_ITER`` steps, or a system is not positive definite,
    :func:`guaranteed_descent` runs from the last iterate. Either way the result is within
    ``accuracy.target`` of the exact minimiser, so Δ = L_w/(λ0 n) + τ/λ0 holds
    (docs/proofs/cate.md §3).
    """
    p = feats.dim
    sc = accuracy.scale
    in_memory = isinstance(backend, InMemory)
    cache = FeatureCache(CACHE_MB if cache_mb is None else cache_mb) if in_memory else None
    stat: Any = functools.partial(rff_pass, feats=feats, c=huber_c, rows=rows, cache=cache,
                                  scale=sc)
    exact = functools.partial(exact_gradient, backend, feats, n=n, lam0=lam0, huber_c=huber_c,
                              cache=cache)
    w = np.zeros(p)
    hess = np.zeros((p, p))
    zv, d_hess, loss = backend.map_sum(functools.partial(stat, w=w, w_in=None, step=None))
    val = _scaled_objective(float(loss[0]), w, n, lam0, sc)
    for it in range(NEWTON_ITER + 1):
        grad = zv / n + 2.0 * lam0 * w
        if scaled_norm(grad, sc) <= accuracy.stop_tol:
            cert = exact(w)
            if accuracy.accepts(w, cert):
                return RffFit(w, scaled_norm(cert, sc), it)
        if it == NEWTON_ITER:
            break
        hess += d_hess  # the Gram now holds the inside set at w
        lhs = hess / n
        lhs[np.diag_indices_from(lhs)] += lam0
        step = _newton_direction(lhs, -0.5 * grad)
        if step is None or not bool(np.all(np.isfinite(step))):
            break
        ts = T_GRID[:1] if in_memory else T_GRID
        zv_f, dh_f, line = backend.map_sum(
            functools.partial(stat, w=w, w_in=w, step=step, ts=ts))
        if in_memory and not _accepts(float(line[0]), w + step, n, lam0, sc, val):
            line = backend.map_sum(functools.partial(stat, w=w, w_in=w, step=step))[2]
        for k, t in enumerate(T_GRID):
            cand_w = w + t * step
            cval = _scaled_objective(float(line[k]), cand_w, n, lam0, sc)
            if cval <= val + 1e-12 * abs(val) or t < 1e-8:
                break
        if k == 0:
            zv, d_hess = zv_f, dh_f
        else:
            zv, d_hess, _ = backend.map_sum(
                functools.partial(stat, w=cand_w, w_in=w, step=None))
        w, val = cand_w, cval
    return guaranteed_descent(backend, feats, w, n=n, lam0=lam0, huber_c=huber_c,
                              accuracy=accuracy, cache=cache)


def _scaled_objective(loss: float, w: FloatArray, n: int, lam0: float, scale: float) -> float:
    """s²·J(w) from a pass's scaled loss sum s²·Σρℓ_c (``rff_pass``), s = ``scale``.

    Notes
    -----
    s is the public power of two :attr:`RffAccuracy.scale` (from L_w alone), so every operation
    here and in the pass is the unscaled one times s or s², exactly, wherever the unscaled
    squares neither overflow nor underflow: the line search's test
    s²J(w + t·step) ≤ s²J(w) + 1e-12·|s²J(w)| is then the same decision, bit for bit, as on
    J — its slack 1e-12·|J| is relative, so it scales with the objective and needs no
    re-derivation. Where the unscaled squares would overflow (|r|, ‖w‖ ≳ 1.3e154) J was ∞ or
    nan and every step shrank to 2⁻²⁷, so Newton never certified; now the same steps as at
    order-one scales are taken. The objective only chooses Newton's iterates: it enters neither
    the certificate (:meth:`RffAccuracy.accepts`, on the recomputed gradient), nor the fallback,
    nor the sensitivity, so the guarantee is unchanged whichever iterate it picks.
    """
    return loss / n + lam0 * float((w * scale) @ (w * scale))


def _accepts(loss: float, cand_w: FloatArray, n: int, lam0: float, scale: float,
             val: float) -> bool:
    """Whether the full step's s²J(w + step) passes the descent test (the first of ``T_GRID``)."""
    return _scaled_objective(loss, cand_w, n, lam0, scale) <= val + 1e-12 * abs(val)


def fit_rff_streaming(feats: FourierFeatures, s: FloatArray, rho: FloatArray, phi: FloatArray, *,
                      lam0: float, huber_c: float | None, accuracy: RffAccuracy,
                      rows: int | None = None, cache_mb: float | None = None) -> RffFit:
    """:func:`solve_rff` on the rows in memory (one piece), ζ computed block by block from the
    box-scaled rows ``s`` (never n × 2m at once; the first blocks up to ``cache_mb`` kept)."""
    part = (s, rho, phi)
    return solve_rff(InMemory(part, s.shape[0]), feats, n=s.shape[0], lam0=lam0, huber_c=huber_c,
                     accuracy=accuracy, rows=rows, cache_mb=cache_mb)
