"""owl's ``lambda: auto`` (issue 17) against the default ``lambda: total`` and the old γ = 75, on
NSW-shaped dollar trials (``defaults_dgp.nsw``, n = 445): the varied effect of
``defaults_owl.py`` and a flat +$1,800 effect (treating everyone is best, so the default's
unpenalised ε → ∞ limit overfits).

Per seeded draw and ε: one release of each setting through the command's own plan and run (noise
from a test seed; auto's split a secret permutation, as in the CLI), its rule's true value on a
100,000-row population of the design (mean 1978 earnings, $). Beside them, non-private
references on the same draw: the best single λ of auto's grid fitted on all rows (the oracle
choice, from the population) and the λ non-private hold-out validation picks (auto's own score
without noise, on a seeded half split).

Run: ``nice -n 19 python benchmarks/defaults_owl_auto.py --reps 30``
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

from dpcausal.commands.common import row_split
from dpcausal.commands.owl import auto
from dpcausal.commands.owl.estimate import run
from dpcausal.commands.owl.penalty import gamma_of
from dpcausal.commands.owl.plan import plan
from dpcausal.commands.owl.rule import recommend
from dpcausal.commands.owl.setup import build_setup, fit_nonprivate, prepare
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.mechanisms import NoiseGuard

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import defaults_dgp as dgp  # noqa: E402

SETTINGS: dict[str, dict[str, Any]] = {"total (default)": {}, "auto": {"lambda": "auto"},
                                       "old γ = 75": {"gamma": 75.0, "eta": 0.001}}


def spec_for(epsilon: float, **owl: Any) -> OwlSpec:
    return OwlSpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": dgp.NSW_COVARIATES}},
        "bounds": {"outcome": list(dgp.NSW_OUTCOME), "covariates": dgp.NSW_BOUNDS},
        "privacy": {"epsilon": epsilon},
        "owl": {"treated": 1, "control": 0, "propensity": dgp.NSW_PROPENSITY, "plot": False,
                **owl}})


def release(spec: OwlSpec, frame: Any, seed: int) -> tuple[np.ndarray, Any]:
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    guard = NoiseGuard(pl, test_seed=seed)
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0), noise=guard)
    guard.check_all_drawn()
    return np.asarray(rel.documents["rule.json"]["theta"]), rel.summary.get("selected_lambda")


def references(frame: Any, value: Any, seed: int) -> tuple[float, float]:
    """(oracle best grid λ's value, hold-out choice's value), both non-private."""
    spec = spec_for(1e9, **{"lambda": "auto", "auto": {"split": {"kind": "seeded",
                                                                  "seed": seed}}})
    setup = build_setup(spec)
    data = prepare(spec, setup, frame, None)
    ap = auto.auto_plan(spec, setup, len(frame))
    full = {lam: value(fit_nonprivate(setup, data, gamma_of(lam, ap.n, setup)))
            for lam in ap.grid}
    valid, train = row_split.parts(auto.settings(spec).split, ap.n, ap.n_valid)
    tr, va = auto.subset(data, train), auto.subset(data, valid)
    u = [auto.validation_value(lam * fit_nonprivate(setup, tr, gamma_of(lam, ap.n_train, setup)),
                               va, setup.weight_bound) for lam in ap.grid]
    return max(full.values()), full[ap.grid[int(np.argmax(u))]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=3000)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 5.0, 1e9])
    args = ap.parse_args()
    t0 = time.time()
    setup = build_setup(spec_for(1.0))
    for effect in ("varied", "flat"):
        pop = dgp.nsw(100_000, np.random.default_rng(1), effect=effect)
        x = pop.x[dgp.NSW_COVARIATES].to_numpy(float)

        def value(theta: np.ndarray, pop: Any = pop, x: np.ndarray = x) -> float:
            return float(np.mean(np.where(recommend(setup.fmap, theta, x), pop.y1, pop.y0)))

        res: dict[str, list[float]] = {}
        picks: dict[str, list[float]] = {}
        for r in range(args.reps):
            seed = args.seed + r
            frame = dgp.nsw(dgp.NSW_N, np.random.default_rng(seed), effect=effect).frame()
            oracle, holdout = references(frame, value, seed)
            res.setdefault("non-private best grid λ (oracle)", []).append(oracle)
            res.setdefault("non-private hold-out choice", []).append(holdout)
            for eps in args.epsilons:
                for name, owl in SETTINGS.items():
                    theta, lam = release(spec_for(eps, **owl), frame, seed)
                    res.setdefault(f"{name} @ ε={eps:g}", []).append(value(theta))
                    if lam is not None:
                        picks.setdefault(f"{name} @ ε={eps:g}", []).append(lam)
        print(json.dumps({"design": effect, "treat_all": float(pop.y1.mean()),
                          "treat_none": float(pop.y0.mean()),
                          "oracle_rule": float(np.maximum(pop.y1, pop.y0).mean())}))
        for k, v in res.items():
            arr = np.asarray(v)
            print(json.dumps({"setting": k, "mean": round(float(arr.mean()), 1),
                              "se": round(float(arr.std(ddof=1) / math.sqrt(arr.size)), 1),
                              "reps": arr.size,
                              **({"median_lambda": float(np.median(picks[k]))}
                                 if k in picks else {})}, ensure_ascii=False))
    print(json.dumps({"seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
