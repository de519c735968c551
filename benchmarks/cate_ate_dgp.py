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

Both draw the two potential outcomes from the same random numbers, so the population ATE
(:func:`true_ate`, 10⁶ draws) includes the clipping to the outcome bounds exactly.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from scipy.special import expit

NHEFS_COVARIATES = ["sex", "race", "age", "education", "smokeintensity", "smokeyrs", "exercise",
                    "active", "wt71"]
NHEFS_BOUNDS = {"sex": [0, 1], "race": [0, 1], "age": [25, 75], "education": [1, 5],
                "smokeintensity": [0, 80], "smokeyrs": [0, 65], "exercise": [0, 2],
                "active": [0, 2], "wt71": [35, 170]}
NHEFS_OUTCOME = (-45.0, 50.0)
NSW_COVARIATES = ["age", "educ", "black", "hisp", "married", "nodegree", "re74", "re75"]
NSW_BOUNDS = {"age": [17, 55], "educ": [3, 16], "black": [0, 1], "hisp": [0, 1],
              "married": [0, 1], "nodegree": [0, 1], "re74": [0, 40000], "re75": [0, 40000]}
NSW_OUTCOME = (0.0, 60000.0)
NSW_PROPENSITY = 185 / 445


def _nhefs(n: int, rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Covariates, treatment and the two potential outcomes (Y(0), Y(1))."""
    sex = rng.binomial(1, 0.5, n)
    race = rng.binomial(1, 0.13, n)
    age = np.clip(rng.normal(43, 12, n), 25, 74)
    edu = rng.integers(1, 6, n)
    smi = np.clip(rng.gamma(3, 7, n), 1, 80)
    smy = np.clip(age - 18 - rng.uniform(0, 12, n), 1, 64)
    ex = rng.integers(0, 3, n)
    act = rng.integers(0, 3, n)
    wt = np.clip(rng.normal(71, 15, n), 36, 169)
    logit = (-1.05 - 0.15 * sex - 0.6 * race + 0.03 * (age - 43) + 0.1 * (edu - 3)
             - 0.025 * (smi - 21) + 0.1 * (ex - 1) + 0.005 * (wt - 71))
    a = rng.binomial(1, expit(logit))
    tau = 3.0 - 0.05 * (age - 43)
    mu0 = 2.0 - 0.15 * (age - 43) - 0.03 * (wt - 71) + 0.8 * sex + 0.05 * (smi - 21)
    eps = rng.normal(0, 7.0, n)
    y0 = np.clip(mu0 + eps, *NHEFS_OUTCOME)
    y1 = np.clip(mu0 + tau + eps, *NHEFS_OUTCOME)
    frame = pd.DataFrame(dict(zip(NHEFS_COVARIATES, [sex, race, age, edu, smi, smy, ex, act, wt],
                                  strict=True)))
    frame["A"] = a
    return frame, y0, y1


def _nsw(n: int, rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Covariates, treatment and the two potential outcomes (Y(0), Y(1))."""
    age = np.clip(rng.normal(25, 7, n), 17, 55)
    educ = np.clip(np.round(rng.normal(10.2, 1.8, n)), 3, 16)
    black = rng.binomial(1, 0.83, n)
    hisp = (1 - black) * rng.binomial(1, 0.6, n)
    married = rng.binomial(1, 0.17, n)
    nodeg = (educ < 12).astype(int)
    re74 = np.where(rng.uniform(size=n) < 0.73, 0.0, np.clip(rng.gamma(1.2, 7000, n), 0, 40000))
    re75 = np.where(rng.uniform(size=n) < 0.65, 0.0,
                    np.clip(0.5 * re74 + rng.gamma(1.2, 3000, n), 0, 40000))
    a = rng.binomial(1, NSW_PROPENSITY, n)
    tau = 2500.0 + 80.0 * (educ - 10)
    base = 4500 + 120 * (age - 25) + 300 * (educ - 10) + 0.15 * re74 + 0.25 * re75 - 800 * black
    work = rng.uniform(size=n) < 0.7
    noise = rng.gamma(1.3, 4500, n) - 5800
    y0 = np.where(work, np.clip(base + noise, *NSW_OUTCOME), 0.0)
    y1 = np.where(work, np.clip(base + tau + noise, *NSW_OUTCOME), 0.0)
    frame = pd.DataFrame(dict(zip(NSW_COVARIATES, [age, educ, black, hisp, married, nodeg, re74,
                                                   re75], strict=True)))
    frame["A"] = a
    return frame, y0, y1


DRAWS = {"nhefs": _nhefs, "nsw": _nsw}
SIZES = {"nhefs": 1500, "nsw": 445}


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
