"""Simulations with a known average treatment effect for cate's ATE release (issue #19).

``nhefs``: shaped like NHEFS (Hernán & Robins, Causal Inference: What If, ch. 12–15): n ≈ 1,500,
9 confounders with the codebook's public ranges (sex, race, age, education, smoking intensity and
years, exercise, activity, 1971 weight), 26 % treated (quitting smoking), a weight-change outcome
with sd ≈ 8 kg bounded to [−45, 50] (range 95), effect 3 kg on average (3 − 0.05·(age − 43)),
confounding by age, smoking intensity, race and education that moves the unadjusted contrast
below the effect (NHEFS: 2.5 vs ≈ 3.4).

``nsw``: shaped like LaLonde's NSW experiment (Dehejia & Wahba sample): n ≈ 445, randomized with
P(A = 1) = 185/445, 8 covariates (age, education, black, hispanic, married, no degree, 1974 and
1975 earnings), 1978 earnings in dollars with ≈ 30 % zeros, sd ≈ 6,000–7,000, bounded to
[0, 60,000], effect ≈ $1,650 on average (≈ $2,500 on the 70 % who work).

``nhefs-t3`` / ``nhefs-skewed``: the NHEFS shape with t₃ noise (symmetric, heavy-tailed) or a
right-skewed zero-mean extra term in the treated outcome (the residual clip's bias check).

Both draw the two potential outcomes from the same random numbers, so the population ATE
(:func:`true_ate`, 10⁶ draws) includes the clipping to the outcome bounds exactly.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from defaults_dgp import (  # the shared NHEFS- and NSW-shaped simulators (their own effects here)
    NHEFS_BOUNDS,
    NHEFS_COVARIATES,
    NHEFS_OUTCOME,
    NSW_BOUNDS,
    NSW_COVARIATES,
    NSW_OUTCOME,
    Arrays,
    nhefs_shaped,
    nsw_shaped,
)

__all__ = ["NHEFS_BOUNDS", "NHEFS_COVARIATES", "NHEFS_OUTCOME", "NSW_BOUNDS", "NSW_COVARIATES",
           "NSW_OUTCOME", "SIZES", "draw", "nhefs_logit", "true_ate"]


def nhefs_logit(c: Arrays) -> np.ndarray:
    """The NHEFS-shaped simulation's treatment logit: P(A = 1 | x) = expit(nhefs_logit(x))."""
    return np.asarray(-1.05 - 0.15 * c["sex"] - 0.6 * c["race"] + 0.03 * (c["age"] - 43)
                      + 0.1 * (c["education"] - 3) - 0.025 * (c["smokeintensity"] - 21)
                      + 0.1 * (c["exercise"] - 1) + 0.005 * (c["wt71"] - 71))


def _nhefs(n: int, rng: np.random.Generator, noise: str = "normal"
           ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Covariates, treatment and the two potential outcomes (Y(0), Y(1)); ``noise`` as
    :func:`defaults_dgp.nhefs_shaped` (the ``nhefs-t3`` and ``nhefs-skewed`` kinds)."""
    d = nhefs_shaped(n, rng, logit=nhefs_logit, tau=lambda c: 3.0 - 0.05 * (c["age"] - 43),
                     noise=noise)
    return d.x.assign(A=d.a), d.y0, d.y1


def _nsw(n: int, rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Covariates, treatment and the two potential outcomes (Y(0), Y(1))."""
    d = nsw_shaped(n, rng, tau=lambda c: 2500.0 + 80.0 * (c["educ"] - 10))
    return d.x.assign(A=d.a), d.y0, d.y1


DRAWS = {"nhefs": _nhefs, "nsw": _nsw,
         "nhefs-t3": functools.partial(_nhefs, noise="t3"),
         "nhefs-skewed": functools.partial(_nhefs, noise="skewed")}
SIZES = {"nhefs": 1500, "nsw": 445, "nhefs-t3": 1500, "nhefs-skewed": 1500}


def draw(kind: str, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """One observed data set of the simulation ``kind`` (columns: covariates, A, Y)."""
    frame, y0, y1 = DRAWS[kind](n, rng)
    frame["Y"] = np.where(frame["A"].to_numpy() == 1, y1, y0)
    return frame


@functools.lru_cache(maxsize=4)
def true_ate(kind: str) -> float:
    """The population ATE: the mean of Y(1) − Y(0) over 10⁶ draws (seed 99)."""
    _, y0, y1 = DRAWS[kind](10**6, np.random.default_rng(99))
    return float(np.mean(y1 - y0))
