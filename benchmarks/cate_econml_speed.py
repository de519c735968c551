"""Wall time of EconML's non-private DRLearner on the data of ``cate_speed.py`` (beside dpcausal's).

    PYTHONPATH=/tmp/econml_env python benchmarks/cate_econml_speed.py --rows 10000 [--final all]

EconML is NOT a dpcausal dependency: install it to a side directory, e.g.
``pip install --no-deps --target /tmp/econml_env econml`` plus what it needs that is missing
(statsmodels, patsy, shap, slicer, numba, llvmlite, sparse, lightgbm, formulaic, interface_meta,
tqdm). Same rows, same 1,000 query points, in-process (no CSV parsing, which the dpcausal CLI
times include). Final stages:

- ``default``: DRLearner() as shipped (model_propensity / model_regression 'auto', cv = 2,
  StatsModelsLinearRegression final stage: a linear CATE, not a kernel);
- ``rff``: linear nuisances like dpcausal's (LogisticRegression, Ridge on (x, a)), final stage
  RBFSampler(2m = 1000 components, γ = 1/(2h²), h = √(q/2)) + Ridge — dpcausal's rff model, squared loss;
- ``krr``: the same nuisances, KernelRidge(rbf, γ = 1/(2h²)) final stage: dpcausal's exact
  function mode (n × n; only up to ~20,000 rows).
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import time
from pathlib import Path

import numpy as np
from econml.dr import DRLearner
from sklearn.kernel_approximation import RBFSampler
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline

sys.path.insert(0, str(Path(__file__).parent))
from cate_speed import Q, make_data


def learner(final: str, n: int) -> DRLearner:
    """The DRLearner variant named ``final``."""
    if final == "default":
        return DRLearner(random_state=0)
    gamma = 1.0 / (2.0 * (Q / 2.0))  # 1/(2h²), h = √(q/2)
    lam = n / math.sqrt(n / 2)  # dpcausal's λ0 = 1/√(n/2) on the second half, times the rows
    if final == "rff":
        model = make_pipeline(RBFSampler(gamma=gamma, n_components=1000, random_state=0),
                              Ridge(alpha=lam))
    else:
        model = KernelRidge(alpha=lam, kernel="rbf", gamma=gamma)
    return DRLearner(model_propensity=LogisticRegression(C=1e4),
                     model_regression=Ridge(alpha=1e-3), model_final=model, cv=2,
                     min_propensity=0.05, random_state=0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--final", choices=["default", "rff", "krr", "all"], default="all")
    args = ap.parse_args()
    frame, queries = make_data(args.rows, 1_000)
    x = frame[[f"x{i}" for i in range(Q)]].to_numpy()
    finals = ["default", "rff", "krr"] if args.final == "all" else [args.final]
    for final in finals:
        t = time.perf_counter()
        est = learner(final, args.rows).fit(frame["Y"].to_numpy(), frame["A"].to_numpy(), X=x)
        tau = est.effect(queries.to_numpy())
        wall = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"EconML DRLearner ({final}): {args.rows} rows x {Q} covariates, 1000 queries: "
              f"fit+effect {wall:.1f} s, process peak RSS so far {peak:.0f} MB, "
              f"mean effect {float(np.mean(tau)):.3f}")


if __name__ == "__main__":
    main()
