"""Regenerate the mixed-type sample data (seeded, so the files are reproducible).

    python sample_data/make_mixed_data.py

A synthetic blood-pressure trial with the covariates real data has: numbers with missing cells,
a skewed income, categorical text columns (one with a level the codebook does not list) and
text treatment labels. The outcome is the systolic blood pressure at 12 weeks (mmHg; lower is
better).

mixed_trial.csv         10,000 rows of a 1:1 randomised trial, arm ∈ {control, treated}:
                        age (18–90), income (log-normal, 8 % missing), bmi (5 % missing),
                        region ∈ {north, south, east, west} (3 % missing, 1 % 'islands', a
                        level the codebook omits), smoker ∈ {yes, no} (2 % missing), sbp.
                        Treatment lowers sbp by 4 + 14·smoker + 0.4·(age − 50) − 12·south
                        (it raises it for the young non-smokers of the south).
mixed_trial_3arm.csv    6,000 rows of the same design with three arms (placebo, low_dose,
                        high_dose; 1:1:1), the low dose having half the high dose's effect:
                        for commands with K ≥ 3 arms.
mixed_new_patients.csv  200 new covariate rows (with an id and missing cells) to score with a
                        released rule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
REGIONS = np.array(["north", "south", "east", "west", "islands"])


def covariates(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """Raw covariates, as a registry export would hold them (text, numbers, empty cells)."""
    age = rng.integers(18, 91, size=n)
    income = np.round(np.minimum(rng.lognormal(10.6, 0.6, size=n), 250_000.0), -2)
    bmi = np.round(np.clip(rng.normal(27.0, 4.5, size=n), 15.0, 50.0), 1)
    region = REGIONS[rng.choice(5, size=n, p=[0.3, 0.25, 0.24, 0.2, 0.01])]
    smoker = np.where(rng.uniform(size=n) < 0.3, "yes", "no")
    frame = pd.DataFrame({"age": age, "income": income, "bmi": bmi, "region": region,
                          "smoker": smoker}).astype({"income": object, "bmi": object,
                                                     "region": object, "smoker": object})
    for column, share in (("income", 0.08), ("bmi", 0.05), ("region", 0.03), ("smoker", 0.02)):
        frame.loc[rng.uniform(size=n) < share, column] = None
    return frame


def outcome(frame: pd.DataFrame, effect: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Systolic blood pressure at 12 weeks: a baseline from the covariates minus the effect."""
    smoker = (frame["smoker"] == "yes").to_numpy(dtype=float)
    south = (frame["region"] == "south").to_numpy(dtype=float)
    age = frame["age"].to_numpy(dtype=float)
    base = 140.0 + 0.1 * (age - 50.0) + 2.0 * smoker + 1.0 * south
    gain = 4.0 + 14.0 * smoker + 0.4 * (age - 50.0) - 12.0 * south
    return np.round(np.clip(base - effect * gain + rng.normal(0.0, 6.0, len(frame)),
                            80.0, 220.0), 1)


def trial(n: int, arms: list[str], doses: list[float], rng: np.random.Generator) -> pd.DataFrame:
    """A randomised trial with equal allocation to ``arms`` (each with its share of the effect)."""
    frame = covariates(n, rng)
    arm = rng.integers(0, len(arms), size=n)
    frame["arm"] = np.array(arms)[arm]
    frame["sbp"] = outcome(frame, np.array(doses)[arm], rng)
    return frame


def main() -> None:
    """Write every mixed-type sample file."""
    rng = np.random.default_rng(20260420)
    trial(10_000, ["control", "treated"], [0.0, 1.0], rng).to_csv(HERE / "mixed_trial.csv",
                                                                  index=False)
    trial(6_000, ["placebo", "low_dose", "high_dose"], [0.0, 0.5, 1.0], rng).to_csv(
        HERE / "mixed_trial_3arm.csv", index=False)
    new = covariates(200, rng)
    new.insert(0, "patient_id", [f"N{i:04d}" for i in range(1, 201)])
    new.to_csv(HERE / "mixed_new_patients.csv", index=False)


if __name__ == "__main__":
    main()
