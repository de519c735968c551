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


def score_parts(weights: Weights, a: FloatArray, y: FloatArray, e: FloatArray,
                m0: FloatArray, m1: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(u, v) of every row (module docstring); ``e`` already clipped."""
    if weights == "clipped":
        u = m1 - m0 + a * (y - m1) / e - (1.0 - a) * (y - m0) / (1.0 - e)
        return np.asarray(u, dtype=np.float64), np.ones_like(u)
    w = e * (1.0 - e)
    u = w * (m1 - m0) + a * (1.0 - e) * (y - m1) - (1.0 - a) * e * (y - m0)
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


def centred_range(weights: Weights, y_bounds: tuple[float, float], ranges: NuisanceRanges,
                  center: float = 0.0) -> tuple[float, float]:
    """[min, max] of u − center·v over the domain (module docstring)."""
    e_lo, e_hi = ranges.e
    lows: list[float] = []
    highs: list[float] = []
    for m1, m0, y in itertools.product(ranges.mu1, ranges.mu0, y_bounds):
        for a in (0, 1):
            if weights == "clipped":
                vals = [_clipped_score(a, y, e, m0, m1) - center for e in (e_lo, e_hi)]
                lows.append(min(vals))
                highs.append(max(vals))
                continue
            delta = m1 - m0
            if a == 1:  # (y − μ1) + e(Δ − (y − μ1) − c) + e²(c − Δ)
                lo, hi = _quadratic_range(y - m1, delta - (y - m1) - center, center - delta,
                                          e_lo, e_hi)
            else:  # e(Δ − (y − μ0) − c) + e²(c − Δ)
                lo, hi = _quadratic_range(0.0, delta - (y - m0) - center, center - delta,
                                          e_lo, e_hi)
            lows.append(lo)
            highs.append(hi)
    return min(lows), max(highs)


def _clipped_score(a: int, y: float, e: float, m0: float, m1: float) -> float:
    if a == 1:
        return m1 - m0 + (y - m1) / e
    return m1 - m0 - (y - m0) / (1.0 - e)


def weight_range(weights: Weights, ranges: NuisanceRanges) -> tuple[float, float]:
    """[min, max] of v over the domain: 1 (clipped), e(1 − e) over [e_lo, e_hi] (overlap)."""
    if weights == "clipped":
        return 1.0, 1.0
    return _quadratic_range(0.0, 1.0, -1.0, *ranges.e)
