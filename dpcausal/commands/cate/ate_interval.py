"""Total (sampling + privacy noise) confidence intervals of cate's ATE release.

Every function here is post-processing of public parameters (noise scales, levels): it reads no
data and costs no ε.

The released estimate is τ̃ = τ̂ + L with τ̂ the AIPW mean over N rows and L ~ Laplace(b) the
privacy noise; by the central limit theorem τ̂ − τ ≈ N(0, s²) with s² = V/N. So τ̃ − τ ≈ sZ + L,
Z ~ N(0, 1) independent of L, whose law is known in closed form:

    F(x) = Φ(x/s) − ½ e^{s²/(2b²) − x/b} Φ(x/s − s/b) + ½ e^{s²/(2b²) + x/b} Φ(−x/s − s/b)

(the convolution of a normal and a Laplace density; each e^{…}Φ(…) product is evaluated through
the scaled complementary error function, so nothing overflows or cancels when b ≪ s).
:func:`total_halfwidth` inverts P(|sZ + L| ≤ h) = 2F(h) − 1 = 1 − α.

s² is unknown: it is estimated privately by w̃ = Q/N² + L_v, L_v ~ Laplace(β) (Q the sum of
squared centred scores). Plugging w̃ in loses coverage (the half-width is concave in w, and w̃
may fall below s²); adding a multiple k·β of the variance noise's scale restores it.
:func:`variance_inflation` finds the smallest k such that the interval τ̃ ± H(max(w̃ + kβ, 0))
covers with probability ≥ 1 − α *for every* s² ≥ 0, integrating over L_v exactly (Gauss–Laguerre
on each side of the Laplace law): the coverage depends on s², b and β only through s²/b² and
β/b², so a search over s²/b² on a wide log grid settles the worst case. Compared with a union
bound (an upper quantile of L_v at level α_v, the rest α − α_v for the estimate) it is never
more conservative, typically k ≈ 0.3–1 instead of ln(1/(2α_v)) ≈ 4.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt
from scipy import optimize, special

FloatArray = npt.NDArray[np.float64]
LAGUERRE_NODES = 80
"""Nodes of the Gauss–Laguerre rule that integrates over the variance estimate's Laplace noise."""
RATIO_GRID = np.logspace(-4.0, 5.0, 91)
"""The values of s²/b² over which :func:`variance_inflation` takes the worst case (and 0)."""
K_MAX = 16.0
"""The largest inflation k searched (far above any value the search has needed)."""
TOLERANCE = 1e-7
"""The coverage lost to the variance noise may be at most this (round-off of the quadrature)."""


def check_level(alpha: float) -> None:
    """Raise ValueError unless 0 < α < 1."""
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def normal_laplace_cdf(x: npt.ArrayLike, s: float, b: float) -> FloatArray:
    """P(sZ + L ≤ x) for Z ~ N(0, 1) and independent L ~ Laplace(0, b) (module docstring)."""
    xs = np.asarray(x, dtype=np.float64)
    if s < 0 or b < 0:
        raise ValueError("s and b must be >= 0")
    if b == 0.0 and s == 0.0:
        return np.asarray((xs >= 0).astype(np.float64))
    if b == 0.0:
        return np.asarray(special.ndtr(xs / s), dtype=np.float64)
    if s == 0.0:
        tail = 0.5 * np.exp(-np.abs(xs) / b)
        return np.asarray(np.where(xs < 0, tail, 1.0 - tail), dtype=np.float64)
    out = special.ndtr(xs / s) - 0.5 * _tilted(xs, s, b) + 0.5 * _tilted(-xs, s, b)
    return np.asarray(np.clip(out, 0.0, 1.0), dtype=np.float64)


def _tilted(x: FloatArray, s: float | FloatArray, b: float) -> FloatArray:
    """e^{s²/(2b²) − x/b}·Φ(x/s − s/b), without cancellation: where z = s/b − x/s > 0 it equals
    ½e^{−x²/(2s²)}·erfcx(z/√2) (Φ(−z) = ½erfcx(z/√2)e^{−z²/2}, and the exponents add up to
    −x²/(2s²)); elsewhere the log-space product (no large terms cancel there)."""
    z = s / b - x / s
    pos = np.maximum(z, 0.0)
    with np.errstate(under="ignore"):
        scaled = 0.5 * np.exp(-x * x / (2.0 * s * s)) * special.erfcx(pos / math.sqrt(2.0))
    with np.errstate(over="ignore"):
        direct = np.exp(np.minimum(s * s / (2.0 * b * b) - x / b + special.log_ndtr(-z), 700.0))
    return np.asarray(np.where(z > 0, scaled, direct), dtype=np.float64)


def normal_laplace_coverage(h: npt.ArrayLike, s: float, b: float) -> FloatArray:
    """P(|sZ + L| ≤ h) = 2F(h) − 1 (the law is symmetric)."""
    hs = np.asarray(h, dtype=np.float64)
    return np.asarray(np.where(hs > 0, 2.0 * normal_laplace_cdf(hs, s, b) - 1.0, 0.0),
                      dtype=np.float64)


def total_halfwidth(s: float, b: float, alpha: float) -> float:
    """h with P(|sZ + L| ≤ h) = 1 − α, Z ~ N(0, 1), L ~ Laplace(b) (exact, by Brent's method).

    Bracketed by the sum of the two parts' half-widths at level 1 − α/2 each (a union bound).
    """
    check_level(alpha)
    if not (math.isfinite(s) and math.isfinite(b)) or s < 0 or b < 0:
        raise ValueError(f"s and b must be finite and >= 0, got {s!r}, {b!r}")
    if s == 0.0 and b == 0.0:
        return 0.0
    if b == 0.0:
        return s * float(special.ndtri(1.0 - alpha / 2.0))
    if s == 0.0:
        return b * math.log(1.0 / alpha)
    hi = s * float(special.ndtri(1.0 - alpha / 4.0)) + b * math.log(2.0 / alpha)

    def gap(h: float) -> float:
        return float(normal_laplace_coverage(h, s, b)) - (1.0 - alpha)

    return float(optimize.brentq(gap, 0.0, hi, xtol=1e-13 * hi, rtol=1e-12))


@functools.lru_cache(maxsize=64)
def _unit_halfwidths(alpha: float) -> tuple[FloatArray, FloatArray]:
    """H(u)/b on a log grid of u = s/b (b = 1), for interpolation."""
    u = np.logspace(-5.0, 5.0, 801)
    h = np.array([total_halfwidth(float(v), 1.0, alpha) for v in u])
    return u, h


def _halfwidth_unit(u: FloatArray, alpha: float) -> FloatArray:
    """H(u·b, b)/b for u = s/b ≥ 0 (log-log interpolation; u → 0 and u → ∞ by their limits)."""
    grid, vals = _unit_halfwidths(alpha)
    uu = np.asarray(u, dtype=np.float64)
    out = np.exp(np.interp(np.log(np.clip(uu, grid[0], grid[-1])), np.log(grid), np.log(vals)))
    big = uu > grid[-1]
    out[big] = uu[big] * float(special.ndtri(1.0 - alpha / 2.0))  # the Gaussian dominates
    return np.asarray(out, dtype=np.float64)


@functools.lru_cache(maxsize=1)
def _laguerre() -> tuple[FloatArray, FloatArray]:
    """Nodes and weights of the Gauss–Laguerre rule (LAGUERRE_NODES; computed once)."""
    t, w = np.polynomial.laguerre.laggauss(LAGUERRE_NODES)
    return np.asarray(t, dtype=np.float64), np.asarray(w, dtype=np.float64)


def _unit_coverage(h: FloatArray, s: FloatArray) -> FloatArray:
    """P(|sZ + L| ≤ h) for L ~ Laplace(1), elementwise over broadcast ``h`` and ``s`` (s ≥ 0):
    :func:`normal_laplace_coverage` at b = 1 for a whole grid of s at once."""
    s_pos = np.where(s > 0, s, 1.0)  # rows with s = 0 are replaced below
    cdf = special.ndtr(h / s_pos) - 0.5 * _tilted(h, s_pos, 1.0) + 0.5 * _tilted(-h, s_pos, 1.0)
    normal_laplace = 2.0 * np.clip(cdf, 0.0, 1.0) - 1.0
    out = np.where(s > 0, normal_laplace, 1.0 - np.exp(-h))  # s = 0: the Laplace alone
    return np.asarray(np.where(h > 0, out, 0.0), dtype=np.float64)


def _worst_deficit(k: float, ratio_beta: float, alpha: float) -> float:
    """min over s²/b² of the coverage of τ̃ ± H(max(w̃ + kβ, 0)) minus that of τ̃ ± H(s²)
    (b = 1, β = ratio_beta): the coverage the estimated variance loses, the same interpolated
    H on both sides so that its interpolation error cancels. Vectorised over the grid of s²/b²
    (and 0) × the quadrature nodes."""
    t, w = _laguerre()
    noise = np.concatenate([ratio_beta * t, -ratio_beta * t])
    weights = np.concatenate([w, w]) / 2.0
    s2 = np.concatenate([[0.0], RATIO_GRID])[:, None]
    s = np.sqrt(s2)
    est = np.maximum(s2 + noise[None, :] + k * ratio_beta, 0.0)
    cover = _unit_coverage(_halfwidth_unit(np.sqrt(est), alpha), s) @ weights
    exact = _unit_coverage(_halfwidth_unit(s, alpha), s)[:, 0]
    return float(np.min(cover - exact))


def variance_inflation(b: float, beta: float, alpha: float) -> float:
    """The smallest k (to 1e-3) with coverage ≥ 1 − α for every s² (module docstring).

    ``b``: the Laplace scale of the estimate's noise; ``beta``: the Laplace scale of the noise of
    the variance estimate w̃ (in the units of s²). β = 0 (a public variance bound, or a noiseless
    variance) needs no inflation.
    """
    check_level(alpha)
    if beta < 0 or b <= 0 or not (math.isfinite(beta) and math.isfinite(b)):
        raise ValueError(f"need b > 0 and beta >= 0 finite, got b={b!r}, beta={beta!r}")
    if beta == 0.0:
        return 0.0
    ratio = beta / (b * b)
    lo, hi = 0.0, 1.0
    if _worst_deficit(lo, ratio, alpha) >= -TOLERANCE:
        return 0.0
    while _worst_deficit(hi, ratio, alpha) < -TOLERANCE:
        lo, hi = hi, 2.0 * hi
        if hi > K_MAX:
            return K_MAX
    while hi - lo > 1e-3:
        mid = 0.5 * (lo + hi)
        if _worst_deficit(mid, ratio, alpha) >= -TOLERANCE:
            hi = mid
        else:
            lo = mid
    return hi
