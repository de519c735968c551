"""Regenerate the two-stage sample data (seeded) and hold the DGP of the paper's simulation (§7).

    python sample_data/make_two_stage_data.py

two_stage_obs.csv        2,000 observational rows from scenario (i) "linear" of Lee & Chen §7:
                         x1..x10 ~ TN_[-1,1](0,1), logit P(A=1|X) = 0.3 x1 − 0.5 x2 + 0.05,
                         Y = μ(X) + (A±/2)·f_opt(X) + N(0, σ²) with A± = 2A − 1.
two_stage_new_patients.csv 200 new covariate rows (with an id) to score with a released rule.

``simulate(scenario, n, rng)`` is also used by benchmarks/two_stage_sim.py; it returns the
covariates, A ∈ {0, 1}, Y and the optimal rule d_opt = 1{f_opt(X) > 0}.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

HERE = Path(__file__).parent
P = 10
PROPENSITY = {"intercept": 0.05, "coefficients": {"x1": 0.3, "x2": -0.5}}


def _mu_f_var(scenario: str, x: np.ndarray, a_pm: np.ndarray) -> tuple[np.ndarray, ...]:
    x1, x2, x3, x4, x5 = (x[:, j] for j in range(5))
    base = np.sum(x[:, :5] + (2.0 / 3.0) * (2.0 * x[:, :5] ** 2 - 1.0), axis=1)
    if scenario == "linear":
        mu = -0.1 * base
        f = 8 * x1 - 8 * x2 + 4 * x3 + 8 * x4
        var = np.full(len(x1), 2.0)
    elif scenario == "tree":
        mu = -3.0 * base
        f = (6.0 * (x1 > -0.5) * np.sign(x1 - 0.5) + 5.0 * (2 * x1 < -0.5) * np.sign(x4 + 0.5)
             + 1.0)
        var = np.full(len(x1), 2.0)
    elif scenario == "nonlinear":
        mu = (2 + 3 * x1 + 2 * x2 + 3 * x4 - 2.5 * x4**2 - 1.5 * x5**2 + 2 * x1 * x2
              + 2 * np.exp(-x1 * x2) + np.sin(x3))
        f = -0.5 - 2 * x4 + x4**2 + 2.5 * x5**2
        var = (0.25 + 2 * x2 * (x2 > 0) + x3 * ((x3 > 0) & (a_pm == 1))
               + x4 * ((x4 > 0) & (a_pm == -1)))
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    return mu, f, var


def simulate(scenario: str, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """One sample of the paper's §7 design (columns x1..x10, A, Y, d_opt)."""
    x = stats.truncnorm.rvs(-1.0, 1.0, size=(n, P), random_state=rng)
    logit = 0.3 * x[:, 0] - 0.5 * x[:, 1] + 0.05
    a = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-logit))).astype(int)
    a_pm = 2 * a - 1
    mu, f, var = _mu_f_var(scenario, x, a_pm)
    y = mu + 0.5 * a_pm * f + rng.normal(size=n) * np.sqrt(var)
    frame = pd.DataFrame(x, columns=[f"x{j + 1}" for j in range(P)])
    frame["A"] = a
    frame["Y"] = y
    frame["d_opt"] = (f > 0).astype(int)
    return frame


def main() -> None:
    """Write the sample files."""
    rng = np.random.default_rng(20261127)
    obs = simulate("linear", 2000, rng).drop(columns="d_opt").round(6)
    obs.to_csv(HERE / "two_stage_obs.csv", index=False)
    new = simulate("linear", 200, rng)[[f"x{j + 1}" for j in range(P)]].round(6)
    new.insert(0, "patient_id", [f"N{i:04d}" for i in range(1, 201)])
    new.to_csv(HERE / "two_stage_new_patients.csv", index=False)


if __name__ == "__main__":
    main()
