"""Synthetic data of the DP-CATE paper (App. G.1, after Oprescu et al. 2019), for the cate benchmarks.

X ~ U[0,1]^p; A = 1{xᵀβ ≥ η}, η ~ U[−1,1]; Y = θ(x)A + xᵀγ + e, e ~ U[−1,1]; β ~ U[0,0.3], γ ~ U[0,1].
Dataset 1: p = 2, θ(x) = exp(2x0) + 3 sin(4x0). Dataset 2: p = 30, θ(x) = exp(2x0) + 3 sin(4x1).
The paper leaves the supports of β and γ unspecified (erratum E10); with full-support β at p = 30,
π(x) ≡ 1 (no overlap), so Dataset 2 uses |supp β| = 3 (spec §5.1 recommendation) and full γ.
Outcome bounds are the DGP's own public range (min(0, θ_min) − 1, max(0, θ_max) + Σγ + 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Design:
    """One draw of the DGP's parameters (public: part of the simulation design)."""

    dataset: int
    p: int
    beta: np.ndarray
    gamma: np.ndarray

    def theta(self, x: np.ndarray) -> np.ndarray:
        """τ(x)."""
        second = x[:, 0] if self.dataset == 1 else x[:, 1]
        return np.exp(2 * x[:, 0]) + 3 * np.sin(4 * second)

    @property
    def y_bounds(self) -> tuple[float, float]:
        """Public outcome range implied by the design."""
        lo, hi = (1.0, 5.4492) if self.dataset == 1 else (-1.2704, 10.389)
        return min(0.0, lo) - 1.0, max(0.0, hi) + float(self.gamma.sum()) + 1.0

    def sample(self, n: int, rng: np.random.Generator) -> pd.DataFrame:
        """n rows with columns x0..x{p-1}, A, Y."""
        x = rng.uniform(size=(n, self.p))
        a = (x @ self.beta >= rng.uniform(-1, 1, n)).astype(float)
        y = self.theta(x) * a + x @ self.gamma + rng.uniform(-1, 1, n)
        frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(self.p)])
        frame["A"] = a
        frame["Y"] = y
        return frame


def design(dataset: int, rng: np.random.Generator) -> Design:
    """Draw β, γ for Dataset 1 (p = 2) or 2 (p = 30, sparse β with support 3)."""
    p = 2 if dataset == 1 else 30
    beta = rng.uniform(0, 0.3, p)
    if dataset == 2:
        keep = rng.choice(p, 3, replace=False)
        beta = np.where(np.isin(np.arange(p), keep), beta, 0.0)
    return Design(dataset, p, beta, rng.uniform(0, 1, p))
