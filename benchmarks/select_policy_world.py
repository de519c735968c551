"""Building blocks of benchmarks/select_policy_reproduction.py: the public pool and DGP, the boosted-tree
and logistic nuisances, DR utilities, the EM audit quantities and the adjacent-pair constructions
(see that script's docstring for the design and the choices the paper leaves open)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression

from dpcausal.commands.select_policy.library import PolicyLibrary, build_library, h_rare, paper160
from dpcausal.commands.select_policy.scores import dr_gammas
from dpcausal.mechanisms import ExponentialMechanism

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_data"))
from select_policy_sim import (  # the simulator of sample_data/
    RareRegionDGP,
    acic_like_pool,
    encode_pool,
    simulated_covariates,
)

D, ZETA, FLOOR, EPS = 20, 0.1, 22.0, 1.0
NAMES = [f"x{j + 1}" for j in range(D)]
STABLE = {"max_depth": 3, "n_estimators": 100, "learning_rate": 0.06, "reg_lambda": 6.0}
UNSTABLE = {"max_depth": 7, "n_estimators": 180, "learning_rate": 0.06, "reg_lambda": 1e-8}
@dataclass
class World:
    """The public pool, the DGP, the library and its true values."""

    x: np.ndarray
    dgp: RareRegionDGP
    lib: PolicyLibrary
    values: np.ndarray
    rare: np.ndarray
    common: np.ndarray


def make_world(seed: int = 2016, acic_csv: Path | None = None, clip: float = 3.0) -> World:
    """The public pool: simulated ACIC-like covariates, or the real ACIC 2016 table if given."""
    if acic_csv is None:
        x, q95 = simulated_covariates(seed, D)
        if clip != 3.0:  # simulated_covariates clips to [-3, 3]; recompute from the raw pool
            x = encode_pool(acic_like_pool(np.random.default_rng(seed))).to_numpy(
                dtype=np.float64)[:, :D]
    else:
        x = encode_pool(pd.read_csv(acic_csv)).to_numpy(dtype=np.float64)[:, :D]
    if clip > 0:
        x = np.clip(x, -clip, clip)
    q95 = float(np.quantile(h_rare(x), 0.95))
    dgp = RareRegionDGP(D, q95)
    lib = build_library({"policies": paper160(NAMES, 7, rare_threshold=q95)}, NAMES, where="p",
                        source={})
    values = dgp.policy_values(lib.decisions(x), x)
    region = dgp.region(x) > 0
    return World(x, dgp, lib, values, np.flatnonzero(region), np.flatnonzero(~region))


TREE_METHOD = {"value": "exact"}  # --tree-method: XGBoost's "exact" (default here) or "hist"


def xgb_fit(params: dict[str, float], x: np.ndarray, y: np.ndarray) -> Any:
    import xgboost as xgb

    return xgb.XGBRegressor(objective="reg:squarederror", subsample=1.0, colsample_bytree=1.0,
                            n_jobs=1, random_state=0, tree_method=TREE_METHOD["value"],
                            **params).fit(x, y)


def logit_fit(x: np.ndarray, a: np.ndarray, c: float = 1.0) -> LogisticRegression:
    return LogisticRegression(C=c, max_iter=2000).fit(x, a)


def tree_nuisance(params: dict[str, float], xs: np.ndarray, a: np.ndarray, y: np.ndarray,
                  logit: LogisticRegression, x_eval: np.ndarray,
                  cache: dict[int, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
    """(μ̂₀, μ̂₁, ê₁) at x_eval; arm models whose training rows are unchanged come from cache."""
    mus = []
    for arm in (0, 1):
        if cache is not None and arm in cache:
            mus.append(cache[arm])
            continue
        sel = a == arm
        mus.append(np.clip(xgb_fit(params, xs[sel], y[sel]).predict(x_eval), 0, 1))
    e1 = np.clip(logit.predict_proba(x_eval)[:, 1], ZETA, 1 - ZETA)
    return mus[0], mus[1], e1


def utilities(w: World, x: np.ndarray, a: np.ndarray, y: np.ndarray,
              nuis: tuple[np.ndarray, ...]) -> np.ndarray:
    mu0, mu1, e1 = nuis
    g0, g1 = dr_gammas(mu0, mu1, e1, a == 1, y)
    return g0.sum() + np.einsum("i,ik->k", g1 - g0, w.lib.decisions(x))


def llr(u_d: np.ndarray, u_dp: np.ndarray, delta: float) -> float:
    em = ExponentialMechanism(EPS, delta)
    return float(np.max(np.abs(np.log(em.probabilities(u_d)) - np.log(em.probabilities(u_dp)))))


def regret(w: World, u: np.ndarray, delta: float) -> float:
    p = ExponentialMechanism(EPS, delta).probabilities(u)
    return float(w.values.max() - p @ w.values)


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


def nuis_diag(w: World, x: np.ndarray, nuis: tuple[np.ndarray, ...]) -> tuple[float, float]:
    """(mean RMSE of μ̂₀, μ̂₁, ê; DR product ½(RMSE μ̂₀ + RMSE μ̂₁)·RMSE ê) against the truth."""
    mu0, mu1 = w.dgp.mu(x)
    e = w.dgp.propensity(x)
    r0, r1, re = rmse(nuis[0], mu0), rmse(nuis[1], mu1), rmse(nuis[2], e)
    return (r0 + r1 + re) / 3, 0.5 * (r0 + r1) * re


def rho_pred(n_s: tuple[np.ndarray, ...], n_sp: tuple[np.ndarray, ...]) -> float:
    g_mu = max(np.abs(n_s[0] - n_sp[0]).max(), np.abs(n_s[1] - n_sp[1]).max())
    g_e = np.abs(n_s[2] - n_sp[2]).max()
    return float((1 + 1 / ZETA) * g_mu + g_e / ZETA**2)


def targeted_pair(w: World, rng: np.random.Generator, m: int) -> tuple[np.ndarray, ...]:
    """One rare anchor + m − 1 non-rare rows (noise sd 0.04); S′ flips the anchor's Y 1 → 0."""
    rows = np.concatenate([[rng.choice(w.rare)], rng.choice(w.common, m - 1, replace=False)])
    xs = w.x[rows]
    a, y = w.dgp.sample(xs, rng, noise_sd=0.04)
    y_s, y_sp = y.copy(), y.copy()
    y_s[0], y_sp[0] = 1.0, 0.0
    return xs, a, y_s, y_sp


def rare_block(w: World, rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    x = w.x[rng.choice(w.rare, n, replace=True)]
    a, y = w.dgp.sample(x, rng)
    return x, a, y
