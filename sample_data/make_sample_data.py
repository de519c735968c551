"""Regenerate the synthetic sample data sets (seeded, so the files are reproducible).

    python sample_data/make_sample_data.py

owl_trial.csv        1,000-row 1:1 randomised trial from the DP-OWL paper's simulation (§6.1):
                     x1..x4 ~ U[0,1], A ∈ {0,1} with P = 0.5, B ~ N(0.01 + 0.02 x4 + 3 A± f(x), 0.5²)
                     with f(x) = 1 + x1 + x2 − 1.8 x3 − 2.2 x4 and A± = 2A − 1. B is *not* shifted
                     (the paper's data-dependent shift is a privacy bug); public bounds [-7.6, 7.4]
                     play its role.
owl_public.csv       1,000 more rows from the same design: a public file for γ tuning.
owl_new_patients.csv 200 new covariate rows (with an id) to score with a released rule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent


def owl_trial(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """The paper's simulation design, unshifted."""
    x = rng.uniform(0.0, 1.0, size=(n, 4))
    a = rng.integers(0, 2, size=n)
    f = 1 + x[:, 0] + x[:, 1] - 1.8 * x[:, 2] - 2.2 * x[:, 3]
    b = rng.normal(0.01 + 0.02 * x[:, 3] + 3 * (2 * a - 1) * f, 0.5)
    frame = pd.DataFrame(x.round(6), columns=["x1", "x2", "x3", "x4"])
    frame["A"] = a
    frame["B"] = b.round(6)
    return frame


def main() -> None:
    """Write every sample file."""
    rng = np.random.default_rng(20261126)
    owl_trial(1000, rng).to_csv(HERE / "owl_trial.csv", index=False)
    owl_trial(1000, rng).to_csv(HERE / "owl_public.csv", index=False)
    new = owl_trial(200, rng)[["x1", "x2", "x3", "x4"]]
    new.insert(0, "patient_id", [f"P{i:04d}" for i in range(1, 201)])
    new.to_csv(HERE / "owl_new_patients.csv", index=False)


if __name__ == "__main__":
    main()
