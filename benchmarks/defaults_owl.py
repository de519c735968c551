"""owl's defaults (issue 17): ``lambda: total`` (the default) against the example's old γ = 75, on
the NSW-shaped dollar trial of ``defaults_dgp.nsw`` (n = 445) and on the paper's simulation (the
design of configs/owl.yaml's data, n = 1,000; outcome in [−7.6, 7.4]).

Per seeded draw: the command's fit (``fit_nonprivate``) and its ℓ2-Laplace release at ε, `--noise`
noise draws each; the released rule's true value on a 100,000-row population of the same design
(NSW: mean outcome in $; the paper's design: share of rows given the better arm). Beside it the
standard non-private estimator: scikit-learn's weighted linear SVM (OWL, Zhao et al. 2012) on the
same mapped features and weights, C chosen by 5-fold cross-validation of the weighted hinge on
the draw.

Run: ``nice -n 19 python benchmarks/defaults_owl.py --reps 10 --noise 5``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.model_selection import GridSearchCV
from sklearn.svm import LinearSVC

from dpcausal.commands.owl import plan as owl_plan
from dpcausal.commands.owl.estimate import fit_nonprivate
from dpcausal.commands.owl.privacy import mechanism
from dpcausal.commands.owl.rule import recommend
from dpcausal.commands.owl.setup import build_setup, prepare
from dpcausal.commands.owl.spec import OwlSpec

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "sample_data")]
import defaults_dgp as dgp  # noqa: E402
import make_sample_data as sample  # noqa: E402

SETTINGS = {"total (today)": {}, "old γ = 75": {"gamma": 75.0, "eta": 0.001}}


class Design:
    """One simulation design: its spec, draws and the value of a rule."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "nsw":
            self.cols, self.n = dgp.NSW_COVARIATES, dgp.NSW_N
            self.bounds, self.outcome, self.p = dgp.NSW_BOUNDS, list(dgp.NSW_OUTCOME), dgp.NSW_PROPENSITY
            pop = dgp.nsw(100_000, np.random.default_rng(1))
            self.x, self.y0, self.y1 = pop.x[self.cols].to_numpy(float), pop.y0, pop.y1
        else:
            self.cols, self.n = ["x1", "x2", "x3", "x4"], 1000
            self.bounds, self.outcome, self.p = [0.0, 1.0], [-7.6, 7.4], 0.5
            pop = sample.owl_trial(100_000, np.random.default_rng(1))
            self.x = pop[self.cols].to_numpy(float)
            f = 1 + self.x[:, 0] + self.x[:, 1] - 1.8 * self.x[:, 2] - 2.2 * self.x[:, 3]
            self.y0, self.y1 = -3 * f, 3 * f

    def draw(self, seed: int) -> pd.DataFrame:
        rng = np.random.default_rng(seed)
        if self.name == "nsw":
            return dgp.nsw(self.n, rng).frame()
        return sample.owl_trial(self.n, rng).rename(columns={"B": "Y"})

    def value(self, treat: np.ndarray) -> float:
        if self.name == "nsw":
            return float(np.mean(np.where(treat, self.y1, self.y0)))
        return float(np.mean(treat == (self.y1 > self.y0)))  # accuracy

    def spec(self, epsilon: float, **owl: Any) -> OwlSpec:
        return OwlSpec.model_validate({
            "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": self.cols}},
            "bounds": {"outcome": self.outcome, "covariates": self.bounds},
            "privacy": {"epsilon": epsilon},
            "owl": {"treated": 1, "control": 0, "propensity": self.p, **owl}})


def sklearn_owl(design: Design, spec: OwlSpec, frame: pd.DataFrame) -> np.ndarray:
    """Weighted linear SVM on the command's mapped features and weights, C by 5-fold CV."""
    setup = build_setup(spec)
    data = prepare(spec, setup, frame, None)
    search = GridSearchCV(LinearSVC(loss="hinge", fit_intercept=False, max_iter=200_000),
                          {"C": list(10.0 ** np.arange(-3, 4))}, cv=5)
    search.fit(data.v, data.y, sample_weight=data.w / data.w.mean())
    return np.asarray(search.best_estimator_.decision_function(setup.fmap.transform(design.x)) > 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--noise", type=int, default=5)
    ap.add_argument("--seed", type=int, default=3000)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 5.0, 20.0, 1e9])
    args = ap.parse_args()
    t0 = time.time()
    out: dict[str, Any] = {"reps": args.reps, "noise_draws": args.noise, "seed": args.seed}
    rng = np.random.default_rng(args.seed)
    for name in ("nsw", "paper"):
        d = Design(name)
        res: dict[str, Any] = {"treat all": d.value(np.ones(len(d.x), bool)),
                               "treat none": d.value(np.zeros(len(d.x), bool)),
                               "oracle": d.value(d.y1 > d.y0)}
        frames = [d.draw(args.seed + r) for r in range(args.reps)]
        for label, owl in SETTINGS.items():
            for eps in args.epsilons:
                spec = d.spec(eps, **owl)
                setup = build_setup(spec)
                plan = owl_plan.plan(spec, d.n, {}, rng=np.random.default_rng(0))
                gamma = float(plan.details["gamma"])
                vals = []
                for fr in frames:
                    theta = fit_nonprivate(setup, prepare(spec, setup, fr, None), gamma)
                    for _ in range(args.noise):
                        t = mechanism(setup, gamma, eps, d.n).release(theta, rng=rng)
                        vals.append(d.value(recommend(setup.fmap, t, d.x)))
                v = np.array(vals)
                res[f"{label} @ ε={eps:g}"] = {"lambda": plan.details["lambda"],
                                               "mean": float(v.mean()),
                                               "se": float(v.std(ddof=1) / np.sqrt(len(v)))}
        ref = np.array([d.value(sklearn_owl(d, d.spec(1.0), fr)) for fr in frames])
        res["sklearn weighted linear SVM (CV C)"] = {
            "mean": float(ref.mean()), "se": float(ref.std(ddof=1) / np.sqrt(len(ref)))}
        out[name] = res
    out["seconds"] = time.time() - t0
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
