"""cate's τ(x) defaults (issue 17) on the NHEFS-shaped observational simulation of
``defaults_dgp.nhefs`` (n = 1,566, nine confounders, 26 % treated, effect 3.4 kg falling with age,
outcome bounds [−45, 50]).

For each seeded draw and each setting — today's (nuisance penalties and λ0 by the total-error
rules) and the old defaults (nuisance λ = 0.05, λ0 = 1/√n) — it runs the command's own plan and
release in process (function mode, the R-learner, exact kernel; noise from a test seed, the split
seeded per draw) at 300 public query points (one fixed draw of the same simulator), and records
the mean of τ̂ over the queries and the RMSE against the true τ(x). Beside it, the standard
non-private DR-learner on the same halves (scikit-learn: unpenalised logistic propensity clipped to
[0.05, 0.95] and per-arm OLS on the nuisance half, DR pseudo-outcomes on the second half, then a
Gaussian-kernel ridge on the box-scaled covariates with its penalty chosen by 5-fold CV), and the
RMSE between the two releases.

Run: ``nice -n 19 python benchmarks/defaults_cate.py --reps 20``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.model_selection import GridSearchCV

from dpcausal.commands.cate.method import plan, run
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common import row_split
from dpcausal.mechanisms import NoiseGuard

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import defaults_dgp as dgp  # noqa: E402

COLS = dgp.NHEFS_COVARIATES
N = dgp.NHEFS_N
OLD_RIDGE = 1.0 / math.sqrt(N - N // 2)
SETTINGS: dict[str, dict[str, Any]] = {
    "total (today)": {},
    "old (λ = 0.05, λ0 = 1/√n)": {"nuisance": {"propensity_l2": 0.05, "outcome_l2": 0.05},
                                  "ridge": OLD_RIDGE},
}


def spec_for(epsilon: float, seed: int, **section: Any) -> CateSpec:
    """The spec a practitioner would write from the README and the codebook's ranges."""
    return CateSpec.model_validate({
        "data": {"path": "nhefs.csv",
                 "columns": {"outcome": "Y", "treatment": "A", "covariates": COLS}},
        "bounds": {"outcome": list(dgp.NHEFS_OUTCOME), "covariates": dgp.NHEFS_BOUNDS},
        "privacy": {"epsilon": epsilon, "delta": 1e-6},
        "cate": {"queries": "queries.csv", "split": {"kind": "seeded", "seed": seed},
                 **section}})


def release(spec: CateSpec, frame: Any, queries: Any, noise_seed: int) -> np.ndarray:
    """τ̂ at the queries: the CLI's plan and run in process."""
    side = {"queries": queries}
    pl = plan(spec, len(frame), side, rng=np.random.default_rng(0))
    guard = NoiseGuard(pl, test_seed=noise_seed)
    rel = run(spec, frame, pl, side, rng=np.random.default_rng(0), noise=guard)
    guard.check_all_drawn()
    return np.asarray(rel.tables["cate"]["cate"], dtype=float)


def scaled(x: np.ndarray) -> np.ndarray:
    """Covariates mapped to [0, 1] by their public bounds."""
    lo = np.array([dgp.NHEFS_BOUNDS[c][0] for c in COLS], dtype=float)
    hi = np.array([dgp.NHEFS_BOUNDS[c][1] for c in COLS], dtype=float)
    return (x - lo) / (hi - lo)


def reference_dr(spec: CateSpec, frame: Any, queries: Any) -> np.ndarray:
    """The non-private DR-learner on the command's own halves (module docstring)."""
    n = len(frame)
    first, second = row_split.parts(spec.cate.split, n, math.floor(n * 0.5))
    x = frame[COLS].to_numpy(dtype=float)
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    a = frame["A"].to_numpy(dtype=float)
    y = frame["Y"].to_numpy(dtype=float)
    prop = LogisticRegression(C=1e6, max_iter=2000).fit(z[first], a[first])
    e = np.clip(prop.predict_proba(z[second])[:, 1], 0.05, 0.95)
    mu = {arm: LinearRegression().fit(z[first][a[first] == arm], y[first][a[first] == arm])
          for arm in (0, 1)}
    m1, m0 = mu[1].predict(z[second]), mu[0].predict(z[second])
    a2, y2 = a[second], y[second]
    phi = m1 - m0 + a2 * (y2 - m1) / e - (1 - a2) * (y2 - m0) / (1 - e)
    s2 = scaled(x[second])
    h = math.sqrt(len(COLS) / 2.0)
    search = GridSearchCV(KernelRidge(kernel="rbf", gamma=1.0 / (2 * h * h)),
                          {"alpha": 10.0 ** np.arange(-3.0, 3.01, 0.5)}, cv=5)
    search.fit(s2, phi)
    return np.asarray(search.predict(scaled(queries[COLS].to_numpy(dtype=float))), dtype=float)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 5.0, 1e9])
    ap.add_argument("--seed", type=int, default=4000)
    args = ap.parse_args()
    q = dgp.nhefs(300, np.random.default_rng(999))
    queries, true_tau = q.x, q.y1 - q.y0
    rows: dict[str, list[tuple[float, float, float]]] = {}
    t0 = time.time()
    for r in range(args.reps):
        seed = args.seed + r
        frame = dgp.nhefs(N, np.random.default_rng(seed)).frame()
        ref = reference_dr(spec_for(1.0, seed), frame, queries)
        rows.setdefault("reference", []).append(
            (float(ref.mean()), _rmse(ref, true_tau), 0.0))
        for eps in args.eps:
            for name, section in SETTINGS.items():
                tau = release(spec_for(eps, seed, **section), frame, queries, noise_seed=seed)
                rows.setdefault(f"{name} @ {eps:g}", []).append(
                    (float(tau.mean()), _rmse(tau, true_tau), _rmse(tau, ref)))
    out = {k: {"mean_tau": _ms([v[0] for v in vals]), "rmse_true": _ms([v[1] for v in vals]),
               "rmse_vs_reference": _ms([v[2] for v in vals]), "reps": len(vals)}
           for k, vals in rows.items()}
    print(json.dumps({"true_mean_tau_at_queries": round(float(true_tau.mean()), 3),
                      "seconds": round(time.time() - t0, 1)}))
    for k, v in out.items():
        print(json.dumps({"setting": k, **v}, ensure_ascii=False))


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


def _ms(v: list[float]) -> list[float]:
    arr = np.asarray(v, dtype=float)
    return [round(float(arr.mean()), 3), round(float(arr.std(ddof=1) / math.sqrt(arr.size)), 3)
            if arr.size > 1 else 0.0]


if __name__ == "__main__":
    main()
