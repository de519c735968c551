"""select-policy's defaults (issue 17) on the NHEFS-shaped observational simulation of
``defaults_dgp.nhefs`` (n = 1,566, 26 % treated, effect 3.4 kg falling with age).

For each seeded draw and each setting — today's (``lambda_mu: total``, ``lambda_e: total``,
``effective_bounds: true``) and the old defaults (λ_μ = λ_e = 50, clips at the spec's ranges) —
it computes the command's utilities on the draw (the real code path, ``split: index``), the
exponential mechanism's exact choice probabilities at ε, and the **expected regret** of the
released policy: Σ_k P(k)·(max V − V_k), V the true policy values (one 400,000-row population
draw of the same simulator). Beside it, the standard non-private estimator on the same blocks
(scikit-learn: unpenalised logistic propensity and per-arm OLS on the m nuisance rows, AIPW values
on the n scoring rows, ê clipped to [0.1, 0.9]) and its best policy.

Run: ``nice -n 19 python benchmarks/defaults_select_policy.py --reps 40``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import softmax
from sklearn.linear_model import LinearRegression, LogisticRegression

from dpcausal.commands.select_policy.estimate import compute_utilities
from dpcausal.commands.select_policy.library import build_library
from dpcausal.commands.select_policy.scores import dr_score
from dpcausal.commands.select_policy.setup import build_setup
from dpcausal.commands.select_policy.spec import SelectPolicySpec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import defaults_dgp as dgp  # noqa: E402

COLS = dgp.NHEFS_COVARIATES
SIDE = {"library": {"policies": dgp.nhefs_library()}}
SETTINGS: dict[str, dict[str, Any]] = {
    "total (today)": {},
    "old λ = 50": {"lambda_mu": 50.0, "lambda_e": 50.0, "effective_bounds": False},
}


def spec_for(epsilon: float, **section: Any) -> SelectPolicySpec:
    return SelectPolicySpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": COLS}},
        "bounds": {"outcome": list(dgp.NHEFS_OUTCOME), "covariates": dgp.NHEFS_BOUNDS},
        "privacy": {"epsilon": epsilon},
        "select_policy": {"treated": 1, "control": 0, "split": {"kind": "index"},
                          "library": {"path": "lib.yaml"}, **section}})


def sklearn_values(frame: Any, m: int, lib: Any) -> np.ndarray:
    """AIPW values of every policy with scikit-learn's unpenalised nuisances (module doc)."""
    x = frame[COLS].to_numpy(float)
    a, y = frame["A"].to_numpy(), frame["Y"].to_numpy(float)
    tr, sc = slice(0, m), slice(m, None)
    e = np.clip(LogisticRegression(C=np.inf, max_iter=5000).fit(
        x[tr], a[tr]).predict_proba(x[sc])[:, 1], 0.1, 0.9)
    mus = [np.clip(LinearRegression().fit(x[tr][a[tr] == k], y[tr][a[tr] == k]).predict(x[sc]),
                   *dgp.NHEFS_OUTCOME) for k in (0, 1)]
    dec = lib.decisions(x[sc])
    return np.array([dr_score(dec[:, k], mus[0], mus[1], e, a[sc] == 1, y[sc]).mean()
                     for k in range(lib.size)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=2000)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 5.0, 1e9])
    args = ap.parse_args()
    t0 = time.time()
    lib = build_library(SIDE["library"], COLS, where="bench", source={})
    pop = dgp.nhefs(400_000, np.random.default_rng(1))
    truth = np.array([pop.value(d) for d in lib.decisions(pop.x[COLS].to_numpy(float)).T])
    regret = truth.max() - truth
    rows: dict[str, dict[float, list[float]]] = {s: {e: [] for e in args.epsilons}
                                                for s in SETTINGS}
    ref_regret, agree, value_diff = [], [], []
    penalties: dict[float, set[tuple[float, float]]] = {e: set() for e in args.epsilons}
    for r in range(args.reps):
        frame = dgp.nhefs(dgp.NHEFS_N, np.random.default_rng(args.seed + r)).frame()
        ref = None
        for name, section in SETTINGS.items():
            for eps in args.epsilons:
                spec = spec_for(eps, **section)
                setup = build_setup(spec, len(frame), SIDE)
                u = compute_utilities(spec, setup, frame, SIDE)
                p = softmax(eps * (u - u.max()) / (2.0 * setup.utility_sensitivity))
                rows[name][eps].append(float(p @ regret))
                if name == "total (today)":
                    penalties[eps].add((setup.learners["outcome"]["lambda"],
                                        setup.learners["propensity"]["lambda"]))
                    if eps == max(args.epsilons):
                        ref = sklearn_values(frame, setup.m, setup.library)
                        agree.append(int(np.argmax(u)) == int(np.argmax(ref)))
                        value_diff.append(float(np.max(np.abs(u / setup.n - ref))))
        assert ref is not None
        ref_regret.append(float(regret[int(np.argmax(ref))]))
    out: dict[str, Any] = {"reps": args.reps, "seed": args.seed, "truth": truth.tolist(),
                           "seconds": time.time() - t0}
    for name in SETTINGS:
        for eps in args.epsilons:
            v = np.array(rows[name][eps])
            out[f"{name} @ ε={eps:g}"] = {"mean_regret_kg": float(v.mean()),
                                          "se": float(v.std(ddof=1) / np.sqrt(len(v)))}
    v = np.array(ref_regret)
    out["sklearn AIPW best policy"] = {"mean_regret_kg": float(v.mean()),
                                       "se": float(v.std(ddof=1) / np.sqrt(len(v)))}
    out["agreement with sklearn's choice at the largest ε"] = float(np.mean(agree))
    out["max |V_dpcausal − V_sklearn| over policies (kg): max over reps"] = max(value_diff)
    out["penalties chosen by total"] = {f"{e:g}": sorted(penalties[e]) for e in args.epsilons}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
