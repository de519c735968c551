"""Regenerate the sample data of ``dpcausal cate`` (seeded, so the files are reproducible).

    python sample_data/make_cate_data.py

cate_obs.csv      3,000 observational rows from the DP-CATE paper's synthetic Dataset 1 (App. G.1,
                  after Oprescu et al. 2019): x0, x1 ~ U[0,1]; A = 1{xᵀβ ≥ η}, η ~ U[−1,1],
                  β ~ U[0,0.3]²; Y = θ(x)A + xᵀγ + e, e ~ U[−1,1], γ ~ U[0,1]²,
                  θ(x) = exp(2 x0) + 3 sin(4 x0). Y lies in [−1, 8.45]: public bounds [−1, 9].
cate_queries.csv  50 public query points (id, x0, x1) on a Sobol-like lattice, fixed in advance,
                  with the true τ(x) dropped (a public file must not carry labels).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent


def theta1(x: np.ndarray) -> np.ndarray:
    """τ(x) of Dataset 1 (Eq. 73)."""
    return np.exp(2 * x[:, 0]) + 3 * np.sin(4 * x[:, 0])


def dataset1(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """Dataset 1 of the paper (p = 2)."""
    beta = rng.uniform(0.0, 0.3, size=2)
    gamma = rng.uniform(0.0, 1.0, size=2)
    x = rng.uniform(0.0, 1.0, size=(n, 2))
    a = (x @ beta >= rng.uniform(-1.0, 1.0, size=n)).astype(int)
    y = theta1(x) * a + x @ gamma + rng.uniform(-1.0, 1.0, size=n)
    frame = pd.DataFrame(x.round(6), columns=["x0", "x1"])
    frame["A"] = a
    frame["Y"] = y.round(6)
    return frame


def main() -> None:
    """Write the sample files."""
    rng = np.random.default_rng(20261126)
    dataset1(3000, rng).to_csv(HERE / "cate_obs.csv", index=False)
    u = (np.arange(50)[:, None] * np.array([0.618034, 0.754878]) + 0.01) % 1.0
    queries = pd.DataFrame(u.round(4), columns=["x0", "x1"])
    queries.insert(0, "id", np.arange(1, 51))
    queries.to_csv(HERE / "cate_queries.csv", index=False)


if __name__ == "__main__":
    main()
