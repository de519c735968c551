"""Public simulations for ``select-policy``: an ACIC-2016-like covariate pool and the paper's
rare-region DGP (spec select_policy §5.1–5.2). Used by tests, sample data and benchmarks only;
nothing here touches sensitive data.

Covariates: the ACIC 2016 table (4,802 × 58, three categorical columns x_2, x_21, x_24) is not
shipped; :func:`acic_like_pool` simulates a table of the same shape and column types (skewed,
binary, count and normal numerics with ~3% missing values; categoricals with 6/16/5 levels), then
applies the paper's recipe (:func:`encode_pool`): a column is numeric if ≥ 90% of its entries parse
as numbers; numerics are median-imputed and standardised; categoricals are one-hot encoded with
missing as an extra level. Indices in the DGP formulas are 0-based (x_1 is column 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.special import expit

from dpcausal.commands.select_policy.library import h_rare

FloatArray = npt.NDArray[np.float64]
ZETA = 0.10
CATEGORICAL = {1: 6, 20: 16, 23: 5}  # 0-based positions of x_2, x_21, x_24 and their level counts


def acic_like_pool(rng: np.random.Generator, n: int = 4802, p: int = 58) -> pd.DataFrame:
    """A raw covariate table shaped like ACIC 2016's (numbers and level strings, some missing)."""
    cols: dict[str, object] = {}
    latent = rng.standard_normal((n, 4))  # shared factors give correlated covariates
    for j in range(p):
        name = f"x_{j + 1}"
        if j in CATEGORICAL:
            levels = np.array([chr(ord("A") + k) for k in range(CATEGORICAL[j])], dtype=object)
            probs = rng.dirichlet(np.ones(CATEGORICAL[j]) * 2.0)
            vals = levels[rng.choice(len(levels), size=n, p=probs)]
            vals[rng.uniform(size=n) < 0.02] = None
            cols[name] = vals
            continue
        kind = j % 4
        base = latent @ rng.normal(0.0, 0.5, 4) + rng.standard_normal(n)
        if kind == 0:
            v = base
        elif kind == 1:
            v = np.exp(0.6 * base)  # skewed
        elif kind == 2:
            v = (base > rng.normal(0.5, 0.5)).astype(float)  # binary
        else:
            v = rng.poisson(np.exp(0.3 * base + 0.5)).astype(float)  # counts
        v = v.astype(float)
        v[rng.uniform(size=n) < 0.03] = np.nan
        cols[name] = v
    return pd.DataFrame(cols)


def encode_pool(raw: pd.DataFrame) -> pd.DataFrame:
    """The paper's recipe: numeric ≥ 90% parse → median impute + standardise; else one-hot."""
    parts: list[pd.DataFrame] = []
    for c in raw.columns:
        num = pd.to_numeric(raw[c], errors="coerce")
        present = raw[c].notna()
        if num[present].notna().mean() >= 0.9:
            v = num.fillna(num.median())
            sd = float(v.std(ddof=0))
            parts.append(((v - v.mean()) / (sd if sd > 0 else 1.0)).to_frame(c))
        else:
            lv = raw[c].astype(object).where(present, "missing")
            parts.append(pd.get_dummies(lv, prefix=c, dtype=float))
    return pd.concat(parts, axis=1)


@dataclass(frozen=True)
class RareRegionDGP:
    """The rare-region DGP of App. G.1 on d covariates, with q₀.₉₅ of h_R from the public pool."""

    d: int
    q95: float
    noise_sd: float = 0.06

    def region(self, x: FloatArray) -> FloatArray:
        """R(x) = 1{h_R(x) ≥ q₀.₉₅}."""
        return (h_rare(x) >= self.q95).astype(float)

    def _w(self, lo: float, hi: float) -> FloatArray:
        k = min(10, self.d)
        w = np.zeros(self.d)
        w[:k] = np.linspace(lo, hi, k)
        return w

    def propensity(self, x: FloatArray) -> FloatArray:
        """e₀(x) = clip_[ζ, 1−ζ] σ(g_e(x) + 1.7R(x))."""
        k = min(10, self.d)
        ge = (1.2 * x @ self._w(0.85, -0.65) / np.sqrt(k) + 0.4 * np.sin(x[:, 1])
              - 0.25 * x[:, 2] * (x[:, 3] > 0))
        return np.clip(expit(ge + 1.7 * self.region(x)), ZETA, 1 - ZETA)

    def mu(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(μ₀, μ₁)."""
        k = min(10, self.d)
        g0 = x @ self._w(0.55, -0.35) / np.sqrt(k) + 0.3 * np.sin(x[:, 1] * x[:, 4]) + 0.21 * (
            x[:, 5] > 0)
        gt = x @ self._w(-0.75, 0.95) / np.sqrt(k)
        tau = (0.20 * np.tanh(1.4 * gt) + 0.11 * (x[:, 1] > 0) - 0.07 * (x[:, 6] > 0)
               + 0.45 * self.region(x))
        mu0 = np.clip(0.25 + 0.45 * expit(g0), 0.02, 0.98)
        return mu0, np.clip(mu0 + tau, 0.02, 0.98)

    def sample(self, x: FloatArray, rng: np.random.Generator,
               noise_sd: float | None = None) -> tuple[npt.NDArray[np.int8], FloatArray]:
        """Draw A ~ Bern(e₀(x)) and Y = clip_[0,1](μ_{0,A}(x) + ξ)."""
        a = (rng.uniform(size=x.shape[0]) < self.propensity(x)).astype(np.int8)
        mu0, mu1 = self.mu(x)
        sd = self.noise_sd if noise_sd is None else noise_sd
        y = np.clip(np.where(a == 1, mu1, mu0) + rng.normal(0.0, sd, x.shape[0]), 0.0, 1.0)
        return a, y

    def policy_values(self, decisions: npt.NDArray[np.bool_], x: FloatArray) -> FloatArray:
        """V(π) = E[μ_{0,π(X)}(X)] over the rows x (Monte Carlo over a large public sample)."""
        mu0, mu1 = self.mu(x)
        return np.asarray(mu0.mean() + (mu1 - mu0) @ decisions / x.shape[0], dtype=np.float64)


def simulated_covariates(seed: int, d: int = 20) -> tuple[FloatArray, float]:
    """The encoded public pool's first d columns (clipped to [−3, 3]) and q₀.₉₅ of h_R on it."""
    pool = encode_pool(acic_like_pool(np.random.default_rng(seed)))
    x = np.clip(pool.to_numpy(dtype=np.float64)[:, :d], -3.0, 3.0)
    return x, float(np.quantile(h_rare(x), 0.95))
