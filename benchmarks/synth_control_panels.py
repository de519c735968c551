"""Simulated panels shaped like the classic synthetic-control data sets (issue #18), seeded.

No real panel ships offline (see RESULTS.md), so each shape copies the public facts of one classic
study — its donor count n, pre-periods T0, post-periods h, a careful a-priori outcome range
[lo, hi], the target's growth and its post-period spread relative to that range — and plants a
handful of donors (``m``, default 4) that match the target:

| shape | n | T0 | h | bounds | the study |
|---|---|---|---|---|---|
| basque | 16 | 15 | 28 | [0, 15] thousand $ per head | Abadie & Gardeazabal (2003) |
| germany | 16 | 30 | 14 | [0, 40 000] $ per head | Abadie, Diamond & Hainmueller (2015) |
| texas | 50 | 8 | 8 | [0, 80 000] prisoners | Cunningham (2021), Texas prisons |
| california | 38 | 19 | 12 | [0, 300] packs per head | Abadie, Diamond & Hainmueller (2010) |

Model (in units of the range R = hi − lo, then mapped to [lo, hi]): unit i's series is
μ_i + g_i·F1_t + p_i·F2_t + noise, F1 a common growth curve (a trend plus a slow cycle), F2 a
common random walk. The target's (μ0, g0, p0) is drawn per shape so that its post-period standard
deviation is near the classic one (medians: Basque 0.075 R, Germany 0.063 R, Texas 0.115 R,
California 0.049 R; the real ones are about 0.07, 0.07, 0.15 and 0.045 R); ``m`` donors get the
target's loadings plus N(0, ``match``²) perturbations, the others loadings drawn over a wide range. The target is the mean of the matching donors' latent
series plus its own noise, and from T0 on it carries an effect of −``effect`` × its post-period
spread (ramped in over 3 periods). The true effect and the untreated target are returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shape:
    """The public facts a simulated panel copies."""

    n: int
    t0: int
    h: int
    lo: float
    hi: float
    mu0: tuple[float, float]
    g0: tuple[float, float]


SHAPES = {
    "basque": Shape(16, 15, 28, 0.0, 15.0, (0.15, 0.30), (0.30, 0.45)),
    "germany": Shape(16, 30, 14, 0.0, 40_000.0, (0.02, 0.06), (0.70, 0.85)),
    "texas": Shape(50, 8, 8, 0.0, 80_000.0, (0.05, 0.15), (0.85, 1.05)),
    "california": Shape(38, 19, 12, 0.0, 300.0, (0.50, 0.55), (-0.40, -0.30)),
}
"""n, T0, h, bounds and the target's level and growth ranges (in units of hi − lo) per shape."""


@dataclass(frozen=True)
class Panel:
    """One simulated panel, in outcome units."""

    x: np.ndarray  # n × T donors
    y: np.ndarray  # T observed target (with the effect)
    y0: np.ndarray  # T target without the effect
    t0: int
    matching: np.ndarray  # indices of the matching donors

    @property
    def spread(self) -> float:
        """The target's post-period spread: the standard deviation of its observed post values."""
        return float(np.std(self.y[self.t0:], ddof=1))

    @property
    def true_effect(self) -> float:
        """The average post-period effect."""
        return float(np.mean(self.y[self.t0:] - self.y0[self.t0:]))


def simulate(shape: Shape, rng: np.random.Generator, *, m: int = 4, noise: float = 0.005,
             match: float = 0.01, effect: float = 1.0) -> Panel:
    """One panel of ``shape`` (module docstring)."""
    n, t0, periods = shape.n, shape.t0, shape.t0 + shape.h
    r = shape.hi - shape.lo
    t = np.linspace(0.0, 1.0, periods)
    f1 = t + 0.05 * np.sin(2 * np.pi * t * rng.uniform(0.5, 1.5) + rng.uniform(0, 2 * np.pi))
    walk = np.cumsum(rng.normal(0.0, 1.0, periods))
    f2 = (walk - walk.mean()) / max(float(walk.std()), 1e-9) * 0.05
    mu0, g0, p0 = rng.uniform(*shape.mu0), rng.uniform(*shape.g0), rng.uniform(-1, 1)
    lo_g, hi_g = sorted((0.2 * g0, 1.8 * g0))
    mu = rng.uniform(0.02, 0.6, n)
    g = rng.uniform(lo_g, hi_g, n)
    p = rng.uniform(-1, 1, n)
    idx = rng.choice(n, m, replace=False)
    mu[idx] = mu0 + rng.normal(0, match, m)
    g[idx] = g0 + rng.normal(0, match, m)
    p[idx] = p0 + rng.normal(0, match, m)
    latent = mu[:, None] + g[:, None] * f1 + p[:, None] * f2
    x = np.clip(latent + rng.normal(0, noise, (n, periods)), 0.0, 1.0)
    y0 = np.clip(latent[idx].mean(axis=0) + rng.normal(0, noise, periods), 0.0, 1.0)
    spread = float(np.std(y0[t0:], ddof=1))
    ramp = np.clip((np.arange(periods) - t0 + 1) / 3.0, 0.0, 1.0)
    y = y0 - effect * spread * ramp
    return Panel(shape.lo + r * x, shape.lo + r * y, shape.lo + r * y0, t0, idx)
