"""Run one cate release in-process on a DataFrame (the same plan/run the CLI executes)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from dpcausal.commands.cate.estimate import run
from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.mechanisms import NoiseGuard

NONPRIVATE_EPS = 1e20
"""ε so large that every noise sd is below 1e-9·Δ: the non-private learner, to float precision."""


def make_spec(names: list[str], y_bounds: tuple[float, float], epsilon: float, delta: float,
              **cate_over: Any) -> CateSpec:
    """A cate spec over the unit box with a placeholder query file."""
    return CateSpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": names}},
        "bounds": {"outcome": list(y_bounds), "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": epsilon, "delta": delta},
        # a public-seed split (the CLI's default is a secret one): the benchmarks must be reproducible
        "cate": {"queries": "public-test-queries.csv", "split": {"kind": "seeded", "seed": 0},
                 **cate_over},
    })


def release(spec: CateSpec, train: pd.DataFrame, queries: pd.DataFrame,
            noise_seed: int | None) -> np.ndarray:
    """Plan + run; returns the released τ̂ at the query rows."""
    side = {"queries": queries}
    pl = plan(spec, len(train), side, rng=np.random.default_rng(0))
    rel = run(spec, train, pl, side, rng=np.random.default_rng(0),
                   noise=NoiseGuard(pl, test_seed=noise_seed))
    return rel.tables["cate"]["cate"].to_numpy()


def sqrt_pehe(tau_hat: np.ndarray, tau: np.ndarray) -> float:
    """√PEHE = root mean squared error against the true CATE."""
    return math.sqrt(float(np.mean((tau_hat - tau) ** 2)))
