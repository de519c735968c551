"""Regenerate the sample data of ``dpcausal cate`` with ``estimand: ate`` (seeded, reproducible).

    python sample_data/make_ate_data.py

ate_obs.csv   1,566 observational rows shaped like NHEFS (Hernán & Robins, *Causal Inference: What
              If*, ch. 12–15), drawn from ``benchmarks/cate_ate_dgp.py`` (kind ``nhefs``): 9
              confounders with the codebook's public ranges, 26 % treated (quit smoking), the
              weight change 1971–1982 in kg (Y, public bounds [−45, 50]); the true average effect
              is 3.0 kg (population mean of Y(1) − Y(0) over 10⁶ draws, clipping included),
              while the unadjusted difference of means in this draw is 1.6 kg (confounding by age and
              smoking intensity).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))
from cate_ate_dgp import draw, true_ate  # noqa: E402  (the simulation the benchmarks use)

ROWS = 1566
SEED = 1982


def main() -> None:
    """Write ate_obs.csv and print the true ATE and the unadjusted contrast."""
    frame = draw("nhefs", ROWS, np.random.default_rng(SEED))
    frame = frame.round({"age": 1, "smokeintensity": 1, "smokeyrs": 1, "wt71": 1, "Y": 2})
    frame.to_csv(HERE / "ate_obs.csv", index=False)
    a = frame["A"] == 1
    print(f"true ATE {true_ate('nhefs'):.3f}; unadjusted contrast "
          f"{frame.loc[a, 'Y'].mean() - frame.loc[~a, 'Y'].mean():.3f}; treated {a.mean():.3f}")


if __name__ == "__main__":
    main()
