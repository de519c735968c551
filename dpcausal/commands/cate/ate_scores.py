"""The doubly robust scores of cate's ATE release and their bounds over the whole data domain.

Each row i gets a pair (u_i, v_i); the estimand is E[u]/E[v]:

- ``clipped`` (ATE): u = μ̂₁ − μ̂₀ + A(Y − μ̂₁)/ê − (1 − A)(Y − μ̂₀)/(1 − ê) (the AIPW score,
  ê clipped to [ζ, 1 − ζ]), v = 1;
- ``overlap`` (ATO, Li, Morgan & Zaslavsky 2018): u = ê(1 − ê)(μ̂₁ − μ̂₀) + A(1 − ê)(Y − μ̂₁)
  − (1 − A)ê(Y − μ̂₀), v = ê(1 − ê): the overlap-weighted effect E[e(1 − e)τ(X)]/E[e(1 − e)],
  whose scores need no 1/ê.

The bounds are over every (x, a, y) of the domain — x in the public box, a ∈ {0, 1}, y in the
public outcome bounds — given the nuisance models, which are fixed (released, or public) when the
scores are computed. They relax the models to independent ranges: ê ∈ [e_lo, e_hi], μ̂_a ∈
[m_a,lo, m_a,hi] (each model's exact range over the box, :class:`NuisanceRanges`). For fixed e the
scores are multilinear in (μ̂₁, μ̂₀, y), so their extremes over the box of those three are at its
vertices; in e the clipped score is monotone for a fixed vertex (∂u/∂e = (μ̂₁ − y)/e² for A = 1,
(μ̂₀ − y)/(1 − e)² for A = 0), and every overlap quantity is a quadratic, so its extremes over
[e_lo, e_hi] are at the ends or at the stationary point. Taking the max/min over the vertices of
the max/min over e is exact for the relaxation, hence an upper/lower bound over the domain.
Every score the release sums is clipped into these bounds (a no-op up to rounding), so the bound
holds for the computed floats too.

The residual clip (``cate.ate.residual_clip`` r, public, outcome units): every Y − μ̂_a in the
scores is replaced by ρ_a = clip(Y − μ̂_a, −r, r) (Huber-type: E[u] is then the ATE only when the
fitted μ̂_a is close to right and the residuals beyond ±r are rare or symmetric — a right
propensity alone no longer suffices; the interval does not cover that bias). The scores are the
same expressions with ρ_a in place of Y − μ̂_a, so they stay affine in (μ̂₁, μ̂₀, ρ_a) for fixed e
and monotone (clipped: ∂u/∂e = −ρ₁/e², −ρ₀/(1 − e)²) or quadratic (overlap) in e. Only the set
that (μ̂_a, ρ_a) ranges over changes: for a fixed μ̂_a = m, y ∈ [y_lo, y_hi] gives ρ_a ∈
[clip(y_lo − m), clip(y_hi − m)] (clip is monotone), and each end is piecewise affine in m with
kinks at m = y_lo ± r, y_hi ± r. Between consecutive kinks (and the ends of [m_a,lo, m_a,hi]) the
set is a trapezoid whose corners are (m, each end) at the two breakpoints
(:func:`residual_corners`); a function affine in (m, ρ) takes its extremes over it at a corner.
So the same max over corners of the max over e bounds u − c·v over the domain, now exactly for
the clipped relaxation. Without r the corners are (m, y − m) at the four vertices, the
computation above bit for bit.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Weights = Literal["clipped", "overlap"]


@dataclass(frozen=True)
class NuisanceRanges:
    """The nuisance models' ranges over the whole box: ê ∈ e, μ̂₀ ∈ mu0, μ̂₁ ∈ mu1."""

    e: tuple[float, float]
    mu0: tuple[float, float]
    mu1: tuple[float, float]

    def __post_init__(self) -> None:
        for name, (lo, hi) in (("e", self.e), ("mu0", self.mu0), ("mu1", self.mu1)):
            if not lo <= hi:
                raise ValueError(f"range {name} must have lo <= hi, got {(lo, hi)}")
        if not (self.e[0] > 0.0 and self.e[1] < 1.0):
            raise ValueError(f"propensities must lie in (0, 1), got {self.e}")


def residuals(y: FloatArray, m: FloatArray, residual_clip: float | None) -> FloatArray:
    """ρ = Y − μ̂, clipped to [−r, r] when a public residual clip r is given."""
    rho = y - m
    if residual_clip is None:
        return np.asarray(rho, dtype=np.float64)
    return np.asarray(np.clip(rho, -residual_clip, residual_clip), dtype=np.float64)


def score_parts(weights: Weights, a: FloatArray, y: FloatArray, e: FloatArray,
                m0: FloatArray, m1: FloatArray, residual_clip: float | None = None
                ) -> tuple[FloatArray, FloatArray]:
    """(u, v) of every row (module docstring); ``e`` already clipped; Y − μ̂_a clipped to
    [−r, r] when ``residual_clip`` r is given."""
    r1, r0 = residuals(y, m1, residual_clip), residuals(y, m0, residual_clip)
    if weights == "clipped":
        u = m1 - m0 + a * r1 / e - (1.0 - a) * r0 / (1.0 - e)
        return np.asarray(u, dtype=np.float64), np.ones_like(u)
    w = e * (1.0 - e)
    u = w * (m1 - m0) + a * (1.0 - e) * r1 - (1.0 - a) * e * r0
    return np.asarray(u, dtype=np.float64), np.asarray(w, dtype=np.float64)


def _quadratic_range(c0: float, c1: float, c2: float, lo: float, hi: float) -> tuple[float, float]:
    """[min, max] of c0 + c1 e + c2 e² over e ∈ [lo, hi]."""
    pts = [lo, hi]
    if c2 != 0.0:
        star = -c1 / (2.0 * c2)
        if lo < star < hi:
            pts.append(star)
    vals = [c0 + c1 * t + c2 * t * t for t in pts]
    return min(vals), max(vals)


def residual_corners(m_range: tuple[float, float], y_bounds: tuple[float, float],
                     residual_clip: float | None) -> list[tuple[float, float]]:
    """The corners (μ̂, ρ) of the set {(μ̂, clip(y − μ̂, −r, r)) : μ̂ ∈ m_range, y ∈ y_bounds}'s
    hull pieces (module docstring): at μ̂ = each end of m_range and each kink of the two
    boundaries inside it, ρ = the lower and the upper boundary. Without a clip: (μ̂, y − μ̂) at the
    four vertices."""
    m_lo, m_hi = m_range
    y_lo, y_hi = y_bounds
    if residual_clip is None:
        return [(m, y - m) for m in (m_lo, m_hi) for y in (y_lo, y_hi)]
    r = residual_clip
    kinks = (y_lo - r, y_lo + r, y_hi - r, y_hi + r)
    ms = [m_lo, m_hi, *(k for k in kinks if m_lo < k < m_hi)]
    return [(m, min(max(y - m, -r), r)) for m in ms for y in (y_lo, y_hi)]


def centred_range(weights: Weights, y_bounds: tuple[float, float], ranges: NuisanceRanges,
                  center: float = 0.0, residual_clip: float | None = None
                  ) -> tuple[float, float]:
    """[min, max] of u − center·v over the domain (module docstring), with Y − μ̂_a clipped to
    [−r, r] when ``residual_clip`` r is given."""
    e_lo, e_hi = ranges.e
    lows: list[float] = []
    highs: list[float] = []
    arms = ((1, ranges.mu1, ranges.mu0), (0, ranges.mu0, ranges.mu1))
    for a, own, other in arms:
        for (m_own, rho), m_other in itertools.product(
                residual_corners(own, y_bounds, residual_clip), other):
            m1, m0 = (m_own, m_other) if a == 1 else (m_other, m_own)
            if weights == "clipped":
                vals = [_clipped_score(a, rho, e, m0, m1) - center for e in (e_lo, e_hi)]
                lows.append(min(vals))
                highs.append(max(vals))
                continue
            delta = m1 - m0
            if a == 1:  # ρ + e(Δ − ρ − c) + e²(c − Δ)
                lo, hi = _quadratic_range(rho, delta - rho - center, center - delta, e_lo, e_hi)
            else:  # e(Δ − ρ − c) + e²(c − Δ)
                lo, hi = _quadratic_range(0.0, delta - rho - center, center - delta, e_lo, e_hi)
            lows.append(lo)
            highs.append(hi)
    return min(lows), max(highs)


def _clipped_score(a: int, rho: float, e: float, m0: float, m1: float) -> float:
    if a == 1:
        return m1 - m0 + rho / e
    return m1 - m0 - rho / (1.0 - e)


def weight_range(weights: Weights, ranges: NuisanceRanges) -> tuple[float, float]:
    """[min, max] of v over the domain: 1 (clipped), e(1 − e) over [e_lo, e_hi] (overlap)."""
    if weights == "clipped":
        return 1.0, 1.0
    return _quadratic_range(0.0, 1.0, -1.0, *ranges.e)
