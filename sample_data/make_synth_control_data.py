"""Regenerate the synthetic-control sample panels (seeded, so the files are reproducible).

    python sample_data/make_synth_control_data.py

synth_control_panel.csv   long panel (unit, year, sales), 39 states × 31 years (1970–2000), Prop-99
                          sized: state "CA" is the target, treated from 1989 (T0 = 19, h = 12),
                          38 donors. A low-rank factor model: y_it = θ_i·g(t) + μ_i + noise, the
                          target a convex mix of five donors, then a drop of 20 packs from 1989 on
                          (the true effect). Values in [0, 300]: the public bounds.
synth_control_wide.csv    the same panel in the wide layout (one row per year, one column per state).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
TRUE_EFFECT = -20.0


def panel(rng: np.random.Generator) -> pd.DataFrame:
    """A Prop-99-sized long panel with a known effect."""
    years = np.arange(1970, 2001)
    states = [f"S{i:02d}" for i in range(1, 39)]
    t = (years - 1970) / 30.0
    trend = np.column_stack([np.ones_like(t), -t, np.sin(2.5 * t)])
    loadings = rng.uniform([80, 10, -10], [140, 60, 10], size=(len(states), 3))
    donors = loadings @ trend.T + rng.normal(0.0, 3.0, size=(len(states), len(years)))
    mix = np.zeros(len(states))
    mix[rng.choice(len(states), 5, replace=False)] = rng.dirichlet(np.ones(5))
    target = mix @ (loadings @ trend.T) + rng.normal(0.0, 2.0, size=len(years))
    target = target + np.where(years >= 1989, TRUE_EFFECT, 0.0)
    values = np.vstack([target, donors]).clip(0.0, 300.0).round(2)
    units = ["CA", *states]
    return pd.DataFrame({
        "unit": np.repeat(units, len(years)),
        "year": np.tile(years, len(units)),
        "sales": values.ravel(),
    })


def main() -> None:
    """Write the sample panels."""
    long = panel(np.random.default_rng(20261127))
    long.to_csv(HERE / "synth_control_panel.csv", index=False)
    wide = long.pivot(index="year", columns="unit", values="sales").reset_index()
    wide = wide[["year", "CA", *[c for c in wide.columns if c not in ("year", "CA")]]]
    wide.columns.name = None
    wide.to_csv(HERE / "synth_control_wide.csv", index=False)


if __name__ == "__main__":
    main()
