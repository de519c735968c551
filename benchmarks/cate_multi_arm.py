"""cate with K = 3 arms (issue #20): the released contrasts τ_k(x) = E[Y(k) − Y(0) | x] against a
non-private per-arm DR learner on the same rows, at ε ∈ {1, 5, 10⁹}.

DGP (seeded per repetition): X ~ U[0, 1]², three arms with multinomial-logistic propensities
softmax(0, 1.5·x0 − 0.75, 1.5·x1 − 0.75) (observational: arm 1 is likelier at large x0, arm 2 at
large x1; every propensity ≥ 0.17), Y = 0.5·x1 + τ_A(X) + U(−0.5, 0.5) with τ_0 = 0,
τ_1(x) = 0.5 + 0.5·sin(2π·x0), τ_2(x) = 2·x0·x1; Y ∈ [−0.5, 3] inside the public bounds [−1, 4].
n = 2,000 rows per repetition; √PEHE on 300 public query points drawn uniformly (a separate seed).

dpcausal: `cate.arms: [0, 1, 2]`, `control: 0`, mode function, exact kernel, default bandwidth
(√(q/2) = 1), ridge (1/√n₂) and Huber c, learner r (default) and dr, seeded test noise.
Reference (non-private): the per-arm DR learner on all n rows with 2-fold cross-fitting — a
multinomial logistic propensity (scikit-learn, C = 1e4) clipped to [0.05, 0.95] and a linear
regression per arm on the same covariates, DR pseudo-outcomes per contrast, then the same Gaussian
kernel ridge (squared loss, bandwidth 1, λ0 = 1/√n) on all rows.

Run: ``nice -n 19 python benchmarks/cate_multi_arm.py --reps 10``
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import LinearRegression, LogisticRegression

from dpcausal.commands.cate.multi_arm import run
from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.mechanisms import NoiseGuard

N = 2000
QUERIES = 300
Y_BOUNDS = (-1.0, 4.0)
EPSILONS = (1.0, 5.0, 1e9)


def tau(x: np.ndarray) -> np.ndarray:
    """(τ_1, τ_2) at the rows of ``x``: shape (2, len(x))."""
    return np.vstack([0.5 + 0.5 * np.sin(2 * np.pi * x[:, 0]), 2.0 * x[:, 0] * x[:, 1]])


def simulate(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 2))
    logits = np.column_stack([np.zeros(n), 1.5 * x[:, 0] - 0.75, 1.5 * x[:, 1] - 0.75])
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    arm = (rng.uniform(size=n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    eff = np.vstack([np.zeros(n), tau(x)])[arm, np.arange(n)]
    y = 0.5 * x[:, 1] + eff + rng.uniform(-0.5, 0.5, n)
    return pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1], "A": arm, "Y": y})


def dp_release(train: pd.DataFrame, queries: pd.DataFrame, eps: float, learner: str,
               seed: int) -> np.ndarray:
    spec = CateSpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": ["x0", "x1"]}},
        "bounds": {"outcome": list(Y_BOUNDS), "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": eps, "delta": 1e-6},
        "cate": {"arms": [0, 1, 2], "control": 0, "learner": learner,
                 "queries": "public-test-queries.csv", "split": {"kind": "seeded", "seed": seed},
                 "plot": False},
    })
    side = {"queries": queries}
    pl = plan(spec, len(train), side, rng=np.random.default_rng(0))
    rel = run(spec, train, pl, side, rng=np.random.default_rng(0),
              noise=NoiseGuard(pl, test_seed=seed))
    table = rel.tables["cate"]
    return np.vstack([table.loc[table["arm"] == k, "cate"].to_numpy() for k in (1, 2)])


def reference_dr(train: pd.DataFrame, queries: pd.DataFrame, seed: int) -> np.ndarray:
    """The non-private per-arm DR learner (2-fold cross-fitted nuisances, KRR final stage)."""
    x = train[["x0", "x1"]].to_numpy()
    a = train["A"].to_numpy()
    y = train["Y"].to_numpy()
    n = len(train)
    folds = np.random.default_rng(seed).permutation(n) % 2
    pi = np.empty((n, 3))
    mu = np.empty((n, 3))
    for f in (0, 1):
        fit, out = folds != f, folds == f
        prop = LogisticRegression(C=1e4, max_iter=2000).fit(x[fit], a[fit])
        pi[out] = np.clip(prop.predict_proba(x[out]), 0.05, 0.95)
        for k in range(3):
            rows = fit & (a == k)
            mu[out, k] = LinearRegression().fit(x[rows], y[rows]).predict(x[out])
    lam0 = 1.0 / math.sqrt(n)
    out = []
    for k in (1, 2):
        phi = (mu[:, k] - mu[:, 0] + np.where(a == k, (y - mu[:, k]) / pi[:, k], 0.0)
               - np.where(a == 0, (y - mu[:, 0]) / pi[:, 0], 0.0))
        krr = KernelRidge(alpha=n * lam0, kernel="rbf", gamma=0.5).fit(x, phi)
        out.append(krr.predict(queries[["x0", "x1"]].to_numpy()))
    return np.vstack(out)


def rmse(est: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """√PEHE per contrast."""
    return np.sqrt(np.mean((est - truth) ** 2, axis=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    qx = np.random.default_rng(12345).uniform(size=(QUERIES, 2))
    queries = pd.DataFrame({"x0": qx[:, 0], "x1": qx[:, 1]})
    truth = tau(qx)
    rows: dict[str, list[np.ndarray]] = {}
    start = time.perf_counter()
    for rep in range(args.reps):
        train = simulate(N, 1000 + rep)
        rows.setdefault("reference DR (non-private, cross-fitted, all rows)", []).append(
            rmse(reference_dr(train, queries, rep), truth))
        for learner in ("r", "dr"):
            for eps in EPSILONS:
                key = f"dpcausal {learner.upper()}-learner, eps = {eps:g}"
                rows.setdefault(key, []).append(
                    rmse(dp_release(train, queries, eps, learner, rep), truth))
    print(f"{args.reps} repetitions, n = {N}, {QUERIES} queries, "
          f"{time.perf_counter() - start:.0f} s")
    print("| learner | √PEHE τ_1 (1 vs 0) | √PEHE τ_2 (2 vs 0) |")
    print("|---|---|---|")
    for key, vals in rows.items():
        v = np.array(vals)
        m, se = v.mean(axis=0), v.std(axis=0, ddof=1) / math.sqrt(len(v))
        print(f"| {key} | {m[0]:.3f} ± {se[0]:.3f} | {m[1]:.3f} ± {se[1]:.3f} |")


if __name__ == "__main__":
    main()
