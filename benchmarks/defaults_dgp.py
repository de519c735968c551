"""Simulations shaped like the data sets on which the old defaults failed (issue #17), with known
potential outcomes, for ``benchmarks/defaults_benchmark.py``.

``nhefs``: an observational study shaped like NHEFS (Hernán & Robins, *Causal Inference: What If*,
ch. 12–15): n = 1,566, nine confounders within the codebook's public ranges (sex, race, age,
education, smoking intensity and years, exercise, activity, 1971 weight), 26 % treated (quitting
smoking, rarer among the young and heavy smokers), weight change in kg (sd ≈ 8, bounded to
[−45, 50]), an effect of 3.4 kg on average that falls with age (3.4 − 0.2·(age − 43): the old do
not gain, so "treat if young" policies beat treat-all by a little).

``nsw``: a randomised trial shaped like LaLonde's NSW (Dehejia–Wahba sample): n = 445,
P(treated) = 185/445, eight covariates (age, education, black, hispanic, married, no degree,
1974/1975 earnings), 1978 earnings in **dollars** (≈ 30 % zeros, bounded to [0, 60,000]), an
effect of ≈ $700 on average that is negative for the older, the better-earning and those with a
degree (so a rule matters: treating everyone loses ≈ $500 a head against the best rule).

Both draw Y(0) and Y(1) from the same random numbers, so a rule's value on a test draw is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit

NHEFS_COVARIATES = ["sex", "race", "age", "education", "smokeintensity", "smokeyrs", "exercise",
                    "active", "wt71"]
NHEFS_BOUNDS = {"sex": [0, 1], "race": [0, 1], "age": [25, 75], "education": [1, 5],
                "smokeintensity": [0, 80], "smokeyrs": [0, 65], "exercise": [0, 2],
                "active": [0, 2], "wt71": [35, 170]}
NHEFS_OUTCOME = (-45.0, 50.0)
NHEFS_N = 1566
NSW_COVARIATES = ["age", "educ", "black", "hisp", "married", "nodegree", "re74", "re75"]
NSW_BOUNDS = {"age": [17, 55], "educ": [3, 16], "black": [0, 1], "hisp": [0, 1],
              "married": [0, 1], "nodegree": [0, 1], "re74": [0, 40000], "re75": [0, 40000]}
NSW_OUTCOME = (0.0, 60000.0)
NSW_PROPENSITY = 185 / 445
NSW_N = 445


@dataclass(frozen=True)
class Draw:
    """One data set: covariates, treatment (0/1), observed Y and both potential outcomes."""

    x: pd.DataFrame
    a: np.ndarray
    y0: np.ndarray
    y1: np.ndarray
    propensity: np.ndarray

    @property
    def y(self) -> np.ndarray:
        """The observed outcome."""
        return np.where(self.a == 1, self.y1, self.y0)

    def frame(self) -> pd.DataFrame:
        """Covariates plus A and Y (what a command reads)."""
        out = self.x.copy()
        out["A"] = self.a
        out["Y"] = self.y
        return out

    def value(self, treat: np.ndarray) -> float:
        """The mean outcome if the rows marked ``treat`` were treated and the others not."""
        return float(np.mean(np.where(treat, self.y1, self.y0)))


Arrays = dict[str, np.ndarray]
"""The covariates of one draw by column name (the effect and propensity functions read them)."""


def nhefs_shaped(n: int, rng: np.random.Generator, *, logit: Callable[[Arrays], np.ndarray],
                 tau: Callable[[Arrays], np.ndarray], noise: str = "normal") -> Draw:
    """An NHEFS-shaped observational draw with the given treatment logit and effect τ(x) (the
    covariates, the control outcome and its noise are shared by every NHEFS-shaped simulation).

    ``noise``: normal (default, sd 7 in both arms); t3 (Student t with 3 degrees of freedom
    scaled to sd 7, both arms: symmetric, heavy-tailed); skewed (the normal noise, plus in the
    treated potential outcome a zero-mean right-skewed term 7·(Exp(1) − 1): the effect's average
    is unchanged but the treated residuals' tail is one-sided)."""
    sex = rng.binomial(1, 0.5, n)
    race = rng.binomial(1, 0.13, n)
    age = np.clip(rng.normal(43, 12, n), 25, 74)
    edu = rng.integers(1, 6, n)
    smi = np.clip(rng.gamma(3, 7, n), 1, 80)
    smy = np.clip(age - 18 - rng.uniform(0, 12, n), 1, 64)
    ex = rng.integers(0, 3, n)
    act = rng.integers(0, 3, n)
    wt = np.clip(rng.normal(71, 15, n), 36, 169)
    cov = dict(zip(NHEFS_COVARIATES, [sex, race, age, edu, smi, smy, ex, act, wt], strict=True))
    p = expit(logit(cov))
    a = rng.binomial(1, p)
    mu0 = 2.0 - 0.15 * (age - 43) - 0.03 * (wt - 71) + 0.8 * sex + 0.05 * (smi - 21)
    eps = (rng.normal(0, 7.0, n) if noise != "t3"
           else 7.0 / np.sqrt(3.0) * rng.standard_t(3, n))
    extra = 7.0 * (rng.exponential(1.0, n) - 1.0) if noise == "skewed" else 0.0
    y0 = np.clip(mu0 + eps, *NHEFS_OUTCOME)
    y1 = np.clip(mu0 + tau(cov) + eps + extra, *NHEFS_OUTCOME)
    return Draw(pd.DataFrame(cov), a, y0, y1, p)


def nhefs(n: int, rng: np.random.Generator) -> Draw:
    """An NHEFS-shaped observational draw (module docstring)."""
    return nhefs_shaped(
        n, rng,
        logit=lambda c: (-1.15 - 0.15 * c["sex"] - 0.6 * c["race"] + 0.045 * (c["age"] - 43)
                         + 0.1 * (c["education"] - 3) - 0.03 * (c["smokeintensity"] - 21)
                         + 0.1 * (c["exercise"] - 1) + 0.005 * (c["wt71"] - 71)),
        tau=lambda c: 3.4 - 0.2 * (c["age"] - 43))


def nsw_shaped(n: int, rng: np.random.Generator, *,
               tau: Callable[[Arrays], np.ndarray]) -> Draw:
    """An NSW-shaped randomised draw in dollars with the given effect τ(x) (covariates, earnings
    and the employment share shared by every NSW-shaped simulation)."""
    age = np.clip(rng.normal(25, 7, n), 17, 55)
    educ = np.clip(np.round(rng.normal(10.2, 1.8, n)), 3, 16)
    black = rng.binomial(1, 0.83, n)
    hisp = (1 - black) * rng.binomial(1, 0.6, n)
    married = rng.binomial(1, 0.17, n)
    nodeg = (educ < 12).astype(int)
    re74 = np.where(rng.uniform(size=n) < 0.73, 0.0, np.clip(rng.gamma(1.2, 7000, n), 0, 40000))
    re75 = np.where(rng.uniform(size=n) < 0.65, 0.0,
                    np.clip(0.5 * re74 + rng.gamma(1.2, 3000, n), 0, 40000))
    cov = dict(zip(NSW_COVARIATES, [age, educ, black, hisp, married, nodeg, re74, re75],
                   strict=True))
    a = rng.binomial(1, NSW_PROPENSITY, n)
    effect = tau(cov)
    base = 4500 + 120 * (age - 25) + 300 * (educ - 10) + 0.15 * re74 + 0.25 * re75 - 800 * black
    work = rng.uniform(size=n) < 0.7
    noise = rng.gamma(1.3, 4500, n) - 5800
    y0 = np.where(work, np.clip(base + noise, *NSW_OUTCOME), 0.0)
    y1 = np.where(work, np.clip(base + effect + noise, *NSW_OUTCOME), 0.0)
    return Draw(pd.DataFrame(cov), a, y0, y1, np.full(n, NSW_PROPENSITY))


def nsw(n: int, rng: np.random.Generator, *, effect: str = "varied") -> Draw:
    """An NSW-shaped randomised draw in dollars (module docstring). ``effect="flat"``: the same
    +$1,800 for everyone (the experimental NSW's ATE; treating everyone is the best rule), so an
    unpenalised rule fitted on 445 rows only adds sampling noise (owl's ``lambda: auto`` test)."""
    if effect == "flat":
        return nsw_shaped(n, rng, tau=lambda c: np.full(len(c["age"]), 1800.0))
    return nsw_shaped(n, rng, tau=lambda c: (1800.0 - 400.0 * (c["age"] - 25) - 0.5 * c["re75"]
                                              + 1500.0 * (c["nodegree"] - 0.7)))


def nhefs_library() -> list[dict[str, object]]:
    """A public policy library for the NHEFS-shaped data (written without looking at a draw)."""
    pols: list[dict[str, object]] = [{"name": "treat-all", "type": "constant", "treat": True},
                                     {"name": "treat-none", "type": "constant", "treat": False}]
    for t in (35, 45, 55, 65):
        pols.append({"name": f"age<{t}", "type": "threshold", "covariate": "age", "op": "<",
                     "threshold": t})
    for t in (10, 20, 40):
        pols.append({"name": f"smokes>={t}", "type": "threshold", "covariate": "smokeintensity",
                     "op": ">=", "threshold": t})
    pols += [{"name": "women", "type": "threshold", "covariate": "sex", "op": ">=", "threshold": 1},
             {"name": "men", "type": "threshold", "covariate": "sex", "op": "<", "threshold": 1},
             {"name": "heavy", "type": "threshold", "covariate": "wt71", "op": ">=",
              "threshold": 80}]
    return pols
