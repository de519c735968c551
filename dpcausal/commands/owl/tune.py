"""Algorithm 2 (corrected): choose γ on a public file, before any sensitive row is read."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.owl.estimate import fit_nonprivate
from dpcausal.commands.owl.privacy import mechanism
from dpcausal.commands.owl.setup import OwlSetup, Prepared, prepare
from dpcausal.commands.owl.spec import OwlSpec, TuneSpec
from dpcausal.errors import SpecError

if TYPE_CHECKING:
    import pandas as pd


def tune_gamma(spec: OwlSpec, setup: OwlSetup, public: pd.DataFrame, *, n: int,
               epsilon: float) -> dict[str, Any]:
    """Algorithm 2 (corrected, spec §3.2) on a *public* file: choose γ for the private (n, ε).

    Each repeat draws a training set of size n and a disjoint validation set from the public rows
    (bootstrap when n > n₀ − m, else without replacement with the rest as validation), runs the
    whole DP fit — noise included, from the public seeded generator since nothing here is
    sensitive — for every γ on the grid, and scores the empirical value V (Eq. 23). The same split
    serves every γ of a repeat (common random numbers). The largest mean V wins; ties go to the
    smallest γ. Costs no privacy: the sensitive data is not read.
    """
    tune: TuneSpec = spec.owl.tune  # type: ignore[assignment]
    data = prepare(spec, setup, public, tune.public_data)
    n0 = len(data.y)
    m = tune.validation_size or max(n0 // 5, 50)
    if m >= n0:
        raise SpecError(
            f"owl.tune.validation_size: {m} must be smaller than the {n0} rows of "
            f"{tune.public_data}; lower it or use a larger public file"
        )
    grid = sorted(set(tune.grid))
    rng = np.random.default_rng(tune.seed)
    scores = np.zeros((len(grid), tune.repeats))
    for j in range(tune.repeats):
        if n > n0 - m:
            valid = rng.choice(n0, size=m, replace=False)
            pool = np.setdiff1d(np.arange(n0), valid)
            train = rng.choice(pool, size=n, replace=True)
        else:
            perm = rng.permutation(n0)
            train, valid = perm[:n], perm[n:]
        tr = Prepared(data.v[train], data.y[train], data.b_shifted[train], data.pi_received[train])
        va = Prepared(data.v[valid], data.y[valid], data.b_shifted[valid], data.pi_received[valid])
        for i, gamma in enumerate(grid):
            theta = mechanism(setup, gamma, epsilon, tr.y.size).release(
                fit_nonprivate(setup, tr, gamma), rng=rng)
            scores[i, j] = value_hajek(va.v @ theta > 0.0, va)
    mean = scores.mean(axis=1)
    best = int(np.flatnonzero(mean == mean.max())[0])
    return {
        "gamma": grid[best], "public_data": str(tune.public_data), "public_rows": n0,
        "validation_size": m, "repeats": tune.repeats, "seed": tune.seed, "metric": "value (Eq. 23)",
        "grid": grid,
        "mean_value": [float(v) if math.isfinite(v) else None for v in mean],
    }


def value_hajek(pred_treated: npt.NDArray[np.bool_], data: Prepared) -> float:
    """Empirical value (Eq. 23): Σ 1(A=f) B′/π / Σ 1(A=f)/π; −inf when no row agrees."""
    agree = (data.y > 0) == pred_treated
    den = float(np.sum(agree / data.pi_received))
    if den == 0.0:
        return -math.inf
    return float(np.sum(agree * data.b_shifted / data.pi_received)) / den
