"""owl's utility: the released rule gets better with n and with ε (paper DGP, §6.1)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpcausal.commands.owl.estimate import fit_nonprivate
from dpcausal.commands.owl.privacy import mechanism
from dpcausal.commands.owl.rule import recommend
from dpcausal.commands.owl.setup import build_setup, prepare
from dpcausal.commands.owl.spec import OwlSpec

pytestmark = pytest.mark.statistical


def _trial(n: int, rng: np.random.Generator) -> pd.DataFrame:
    x = rng.uniform(0, 1, size=(n, 4))
    a = rng.integers(0, 2, size=n)
    f = 1 + x[:, 0] + x[:, 1] - 1.8 * x[:, 2] - 2.2 * x[:, 3]
    b = rng.normal(0.01 + 0.02 * x[:, 3] + 3 * (2 * a - 1) * f, 0.5)
    return pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2], "x4": x[:, 3], "A": a, "B": b})


def _accuracy(n: int, eps: float, gamma: float, reps: int, rng: np.random.Generator) -> float:
    spec = OwlSpec.model_validate({
        "data": {"columns": {"outcome": "B", "treatment": "A", "covariates": ["x1", "x2", "x3", "x4"]}},
        "bounds": {"outcome": [-7.6, 7.4], "covariates": [0, 1]},
        "privacy": {"epsilon": eps},
        "owl": {"treated": 1, "propensity": 0.5, "gamma": gamma},
    })
    setup = build_setup(spec)
    test = rng.uniform(0, 1, size=(4000, 4))
    truth = 1 + test[:, 0] + test[:, 1] - 1.8 * test[:, 2] - 2.2 * test[:, 3] > 0
    accs = []
    for _ in range(reps):
        data = prepare(spec, setup, _trial(n, rng), None)
        theta = mechanism(setup, gamma, eps, data.y.size).release(
            fit_nonprivate(setup, data, gamma), rng=rng)
        accs.append(np.mean(recommend(setup.fmap, theta, test) == truth))
    return float(np.mean(accs))


def test_accuracy_rises_with_n_and_epsilon() -> None:
    rng = np.random.default_rng(2026)
    small_n = _accuracy(200, 2.0, 105.0, 30, rng)  # γ from the paper's table (spec §5.4)
    large_n = _accuracy(2000, 2.0, 225.0, 30, rng)
    large_eps = _accuracy(2000, 50.0, 35.0, 30, rng)
    assert small_n < large_n - 0.05
    assert large_n < large_eps - 0.03
    assert large_eps > 0.85
