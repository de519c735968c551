"""One coordinate (or a unit-norm functional) of ℓ2-Laplace noise: its tail and (1 − α)
half-width (the law is in :mod:`dpcausal.mechanisms.noise_law`'s docstring).

Up to :data:`NUMPY_MAX_DIM` dimensions in numpy and plain floats (adaptive Gauss–Legendre and a
bracketed root), so that owl's plan imports no scipy (issue 24); above it, ``scipy.integrate.quad``
and ``scipy.optimize.brentq`` as before (the numpy quadrature needs many panels there: the
weight sin^{d−2} is narrow and its rounding noise large against the tolerance).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dpcausal.numerics import adaptive_integral, bracketed_root

NUMPY_MAX_DIM = 128
"""Largest dimension whose projection law is computed without scipy."""


def projection_tail(x: float, dim: int) -> float:
    """P(|R·u₁| > x) for R ~ Gamma(dim, 1), u uniform on S^{dim−1}, x > 0 and an integer dim ≥ 2
    (:func:`dpcausal.mechanisms.noise_law.l2_laplace_projection_tail` checks and scales).

    The integral of :mod:`~dpcausal.mechanisms.noise_law`'s docstring, with Q(d, ·) the Erlang
    tail (a sum of d positive terms, no cancellation), by adaptive Gauss–Legendre quadrature in
    numpy (:func:`dpcausal.numerics.adaptive_integral`, split where the mass sits) to a relative
    1e-12; above :data:`NUMPY_MAX_DIM`, ``scipy.integrate.quad`` as before.
    """
    if dim > NUMPY_MAX_DIM:
        return _projection_tail_quad(x, dim)
    d = float(dim)
    log_norm = math.log(0.5 * math.sqrt(math.pi)) + math.lgamma((d - 1.0) / 2.0) \
        - math.lgamma(d / 2.0)

    def integrand(phi: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        cos, sin = np.cos(phi), np.sin(phi)
        with np.errstate(divide="ignore"):
            y = np.where(cos > 0.0, x / np.where(cos > 0.0, cos, 1.0), np.inf)
            log_sin = np.log(np.where(sin > 0.0, sin, 1.0))
        weight = np.exp((d - 2.0) * log_sin - log_norm)
        if dim > 2:
            weight = np.where(sin > 0.0, weight, 0.0)
        return _upper_gamma_tail(dim, y) * weight

    # where the mass sits: sin^{d-2} peaks at π/2 with width ~1/√d; Q(d, x/cos φ) turns on at
    # cos φ ≈ x/d
    points = sorted({min(max(math.acos(min(1.0, x / d)), 1e-9), math.pi / 2 - 1e-9),
                     max(math.pi / 2 - 1.0 / math.sqrt(d), 1e-9)})
    val = adaptive_integral(integrand, [0.0, *points, math.pi / 2], rtol=1e-12, atol=1e-15)
    return min(1.0, max(0.0, val))


def _upper_gamma_tail(dim: int, y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Q(dim, y) elementwise (y ≥ 0, ∞ allowed) for an integer dim: ``erlang_upper_tail`` of
    :mod:`~dpcausal.mechanisms.noise_law` vectorised (blocks of terms: bounded memory)."""
    flat = np.ravel(y)
    finite = np.isfinite(flat) & (flat > 0.0)
    ys = np.where(finite, flat, 1.0)
    log_y = np.log(ys)
    total = np.zeros_like(ys)
    step = max(1, (1 << 18) // max(ys.size, 1))  # terms per block: bounded memory
    for start in range(0, int(dim), step):
        k = np.arange(start, min(int(dim), start + step), dtype=np.float64)[:, None]
        log_fact = np.array([math.lgamma(v + 1.0) for v in k[:, 0]])[:, None]
        total += np.exp(k * log_y - ys - log_fact).sum(axis=0)
    out = np.where(finite, total, np.where(flat > 0.0, 0.0, 1.0))
    return out.reshape(np.shape(y))


PROJECTION_MARGIN = 1e-9
"""The projection half-width is the root's bracket upper end times (1 + this) (a bound on the
relative error of the quadrature's root, so the half-width is never below the exact one)."""


def projection_halfwidth(dim: int, scale: float, alpha: float, hi: float) -> float:
    """h with P(|R u₁| ≤ h) = 1 − α for R ~ Gamma(dim, scale), an integer dim ≥ 2, scale > 0,
    given ``hi`` = the radius's (1 − α) quantile (|R u₁| ≤ R: the root lies below it).

    The root of the tail = α is shrunk by :func:`dpcausal.numerics.bracketed_root` to a relative
    1e-12 of ``hi`` and its upper end returned times (1 + :data:`PROJECTION_MARGIN`): a half-width
    errs only on the wide side (against the former ``scipy.integrate.quad`` + ``brentq`` at
    rtol 1e-11: never below it, ~1e-9 above; tested). Above :data:`NUMPY_MAX_DIM`, the former
    scipy code, unchanged.
    """
    if dim > NUMPY_MAX_DIM:
        return _projection_halfwidth_brentq(dim, scale, alpha)

    def excess(t: float) -> float:
        return (projection_tail(t / scale, dim) if t > 0.0 else 1.0) - alpha

    _, top = bracketed_root(excess, 0.0, hi, 1.0 - alpha, excess(hi),
                            lambda a, b: b - a <= 1e-12 * hi)
    return top * (1.0 + PROJECTION_MARGIN)


def _projection_tail_quad(x: float, dim: int) -> float:
    """P(|R u₁| > x) at unit scale by ``scipy.integrate.quad`` (dimensions above
    :data:`NUMPY_MAX_DIM`; the former code, unchanged)."""
    from scipy import integrate, special

    d = float(dim)
    log_norm = math.log(0.5 * math.sqrt(math.pi)) + special.gammaln((d - 1.0) / 2.0) \
        - special.gammaln(d / 2.0)

    def integrand(phi: float) -> float:
        cos = math.cos(phi)
        if cos <= 0.0:
            return 0.0
        sin = math.sin(phi)
        if sin <= 0.0:
            return 0.0
        weight = math.exp((d - 2.0) * math.log(sin) - log_norm)
        return float(special.gammaincc(d, x / cos)) * weight

    points = sorted({min(max(math.acos(min(1.0, x / d)), 1e-9), math.pi / 2 - 1e-9),
                     max(math.pi / 2 - 1.0 / math.sqrt(d), 1e-9)})
    val, _ = integrate.quad(integrand, 0.0, math.pi / 2, points=points, limit=500,
                            epsabs=1e-14, epsrel=1e-11)
    return min(1.0, max(0.0, float(val)))


def _projection_halfwidth_brentq(dim: int, scale: float, alpha: float) -> float:
    """The half-width by ``scipy.optimize.brentq`` (dimensions above :data:`NUMPY_MAX_DIM`;
    the former code, unchanged)."""
    from scipy import optimize, special

    hi = scale * float(special.gammainccinv(dim, alpha))
    root = optimize.brentq(
        lambda t: (_projection_tail_quad(t / scale, dim) if t > 0.0 else 1.0) - alpha,
        0.0, hi, xtol=1e-13 * hi, rtol=1e-11)
    return float(root)
