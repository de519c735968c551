"""Cross-check: at ε → ∞ the cate release equals EconML's R-learner (NonParamDML) and DR-learner
(DRLearner) with the same nuisances and the same kernel-ridge final stage.

    PYTHONPATH=/path/to/econml python benchmarks/cate_econml_check.py

EconML is NOT a dpcausal dependency (optional check). The nuisance models are frozen wrappers around
dpcausal's (ε = 1e30, i.e. noise-free) DP nuisances, so EconML's cross-fitting re-uses them unchanged;
the final stage is sklearn KernelRidge(alpha = n·λ0, rbf, gamma = 1/(2h²)), which both learners fit
with the weights (a − π)² (R) or 1 (DR), as the closed form of dpcausal's squared-loss second stage.
Huber c is set huge so that dpcausal's Huber fit is the squared-loss fit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from econml.dml import NonParamDML
from econml.dr import DRLearner
from sklearn.base import BaseEstimator
from sklearn.kernel_ridge import KernelRidge

from dpcausal.commands.cate.estimate import prepare, run
from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.privacy import nuisance_learners

sys.path.insert(0, str(Path(__file__).parent))
from cate_common import make_spec
from cate_dgp import design

from dpcausal.commands.cate.setup import build_setup
from dpcausal.mechanisms import NoiseGuard


class FrozenClassifier(BaseEstimator):
    """predict_proba = dpcausal's (clipped) propensity; fit does nothing."""

    def __init__(self, model=None):
        self.model = model

    def fit(self, x, y, **kw):
        self.classes_ = np.array([0.0, 1.0])
        return self

    def predict_proba(self, x):
        p = self.model.predict(x)
        return np.column_stack([1 - p, p])


class FrozenRegressor(BaseEstimator):
    """predict = a fixed function of x (and, for DR, of the treatment in the last column)."""

    def __init__(self, fn=None):
        self.fn = fn

    def fit(self, x, y, **kw):
        return self

    def predict(self, x):
        return self.fn(x)


def main() -> None:
    for dataset in (1, 2):
        rng = np.random.default_rng(7 + dataset)
        des = design(dataset, rng)
        train, test = des.sample(1200, rng), des.sample(200, rng)
        names = [f"x{i}" for i in range(des.p)]
        queries = test[names].reset_index(drop=True)
        for learner in ("r", "dr"):
            spec = make_spec(names, des.y_bounds, 1e30, 1e-6, learner=learner,
                             huber_c=1e6)
            setup = build_setup(spec, len(train))
            side = {"queries": queries}
            pl = plan(spec, len(train), side, rng=np.random.default_rng(0))
            ours = run(spec, train, pl, side, rng=np.random.default_rng(0),
                            noise=NoiseGuard(pl, test_seed=1)).tables["cate"]["cate"].to_numpy()
            # the same DP nuisances (noise-free at this ε), refitted exactly as run() does
            data = prepare(spec, setup, train)
            prop_l, out_l = nuisance_learners(spec, setup)
            noise = NoiseGuard(pl, test_seed=1)
            prop = prop_l.fit(data.x1, data.a1, clip=setup.kappa, noise=noise)
            outm = out_l.fit(data.x1, data.a1, data.y1, noise=noise)
            x2, a2, y2 = data.x2, data.a2, data.y2
            final = KernelRidge(alpha=setup.n * setup.lam0, kernel="rbf",
                                gamma=1 / (2 * setup.bandwidth**2))
            s2 = setup.box.unit(x2)
            sq = setup.box.unit(queries.to_numpy())
            scaled = _Scaled(prop, setup.box)
            if learner == "r":
                est = NonParamDML(model_y=FrozenRegressor(_MeanOutcome(scaled, outm)),
                                  model_t=FrozenClassifier(scaled), model_final=final,
                                  discrete_treatment=True, cv=2, random_state=0)
            else:
                est = DRLearner(model_propensity=FrozenClassifier(scaled),
                                model_regression=FrozenRegressor(_ArmOutcome(scaled, outm)),
                                model_final=final, cv=2, min_propensity=setup.kappa,
                                random_state=0)
            est.fit(y2, a2, X=s2)
            theirs = est.effect(sq)
            err = float(np.max(np.abs(ours - theirs)))
            print(f"Dataset {dataset}, {learner.upper()}-learner, n = {setup.n}: "
                  f"max |dpcausal − EconML| = {err:.2e} (τ̂ range {ours.min():.2f}..{ours.max():.2f})")


class _Scaled:
    """The propensity model evaluated on box-scaled inputs (EconML sees s(x))."""

    def __init__(self, prop, box):
        self.prop, self.box = prop, box

    def raw(self, s):
        return self.box.lo + s * (self.box.hi - self.box.lo)

    def predict(self, s):
        return self.prop.predict(self.raw(s))


class _MeanOutcome:
    """m(x) = π̂ μ̂1 + (1 − π̂) μ̂0 on scaled inputs (the R-learner's outcome nuisance)."""

    def __init__(self, scaled, outm):
        self.scaled, self.outm = scaled, outm

    def __call__(self, s):
        x, p = self.scaled.raw(s), self.scaled.predict(s)
        return p * self.outm.predict(x, 1) + (1 - p) * self.outm.predict(x, 0)


class _ArmOutcome:
    """μ̂(x, a) with the treatment in the last column (the DR-learner's regression)."""

    def __init__(self, scaled, outm):
        self.scaled, self.outm = scaled, outm

    def __call__(self, z):
        x, t = self.scaled.raw(z[:, :-1]), z[:, -1]
        return np.where(t > 0.5, self.outm.predict(x, 1), self.outm.predict(x, 0))


if __name__ == "__main__":
    main()
