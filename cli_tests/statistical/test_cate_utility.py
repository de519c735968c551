"""Utility of the cate release improves with ε and with n (spec T13/T14) on the paper's Dataset 1."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cli_tests.unit.test_cate_method import dataset1, theta1
from dpcausal.commands.cate.estimate import run
from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.mechanisms import NoiseGuard

pytestmark = pytest.mark.statistical

QUERIES = pd.DataFrame({"x0": np.linspace(0, 1, 60), "x1": np.full(60, 0.5)})


def _rmse(n: int, eps: float, seed: int, mode: str = "function") -> float:
    frame = dataset1(n, seed)
    spec = CateSpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": ["x0", "x1"]}},
        "bounds": {"outcome": [-1.0, 9.0], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": eps, "delta": 1e-6},
        "cate": {"queries": "public.csv", "mode": mode, "search_points": 256},
    })
    side = {"queries": QUERIES}
    pl = plan(spec, n, side, rng=np.random.default_rng(0))
    rel = run(spec, frame, pl, side, rng=np.random.default_rng(0),
                   noise=NoiseGuard(pl, test_seed=seed + 99))
    tau_hat = rel.tables["cate"]["cate"].to_numpy()
    return float(np.sqrt(np.mean((tau_hat - theta1(QUERIES.to_numpy())) ** 2)))


def test_pehe_falls_with_epsilon_and_n() -> None:
    seeds = range(4)
    by_eps = [np.mean([_rmse(800, e, s) for s in seeds]) for e in (0.5, 20.0)]
    assert by_eps[0] > by_eps[1]
    by_n = [np.mean([_rmse(n, 1.0, s) for s in seeds]) for n in (300, 1200)]
    assert by_n[0] > by_n[1]


@pytest.mark.slow
def test_pehe_falls_with_epsilon_and_n_full() -> None:
    seeds = range(6)
    by_eps = [np.mean([_rmse(1200, e, s) for s in seeds]) for e in (0.5, 2.0, 20.0)]
    assert by_eps[0] > by_eps[1] > by_eps[2]
    by_n = [np.mean([_rmse(n, 1.0, s) for s in seeds]) for n in (400, 1600, 6400)]
    assert by_n[0] > by_n[1] > by_n[2]


@pytest.mark.slow
def test_queries_mode_pehe_falls_with_epsilon() -> None:
    seeds = range(4)
    by_eps = [np.mean([_rmse(1200, e, s, "queries") for s in seeds]) for e in (1.0, 5.0, 50.0)]
    assert by_eps[0] > by_eps[1] > by_eps[2]
