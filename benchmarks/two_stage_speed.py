"""Speed of ``dpcausal two-stage`` end to end on 100,000 rows × 10 covariates, beside scikit-learn.

    python benchmarks/two_stage_speed.py [--rows 100000]

Times the real CLI (subprocess: start-up, CSV read, stage-1 weights, one noise draw, the exact
stage-2 solve, receipt) for the certified ipw-known weights and for ebw / ipw-logit (universal), and
times scikit-learn's weighted LogisticRegression on the same rows and the same ipw-known weights as
a familiar reference for "one weighted fit". Prints a Markdown table (for benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from dpcausal.commands.two_stage.setup import build_setup, prepare
from dpcausal.commands.two_stage.stage1 import compute_weights

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sample_data"))
sys.path.insert(0, str(REPO))

from make_two_stage_data import PROPENSITY, simulate  # noqa: E402

from dpcausal.commands.two_stage.spec import TwoStageSpec  # noqa: E402

COVS = [f"x{j}" for j in range(1, 11)]


def spec_doc(data: Path, out: Path, weights: str) -> dict:
    two: dict = {"treated": 1, "weights": weights, "l1_radius": 30.0}
    if weights == "ipw-known":
        two["ipw_known"] = PROPENSITY
    else:
        two["sensitivity"] = "universal"
    return {
        "data": {"path": str(data), "columns": {"outcome": "Y", "treatment": "A",
                                                "covariates": COVS}},
        "bounds": {"outcome": [-15.0, 15.0], "covariates": [-1.0, 1.0]},
        "privacy": {"epsilon": 1.0},
        "output": {"dir": str(out)},
        "two_stage": two,
    }


def main() -> None:
    """Run the timings and print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    frame = simulate("linear", args.rows, rng).drop(columns="d_opt")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "obs.csv"
        frame.to_csv(data, index=False)
        for weights in ("ipw-known", "ebw", "ipw-logit"):
            spec = Path(tmp) / f"{weights}.yaml"
            spec.write_text(yaml.safe_dump(spec_doc(data, Path(tmp) / weights, weights)))
            t0 = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "dpcausal", "two-stage", "--spec",
                                  str(spec), "--json"], capture_output=True, text=True, check=False)
            elapsed = time.perf_counter() - t0
            if res.returncode != 0:
                raise SystemExit(res.stderr)
            receipt = json.loads(res.stdout)
            rows.append((f"dpcausal two-stage, {weights} "
                         f"({receipt['events'][0]['params']['stability']['source'].split(' (')[0]})",
                         elapsed))
        spec_obj = TwoStageSpec.model_validate(spec_doc(data, Path(tmp), "ipw-known"))
        setup = build_setup(spec_obj)
        prepared = prepare(spec_obj, setup, frame, data)
        w = compute_weights(spec_obj, setup, prepared)
    from sklearn.linear_model import LogisticRegression

    t0 = time.perf_counter()
    LogisticRegression(max_iter=1000).fit(frame[COVS].to_numpy(), frame["A"].to_numpy(),
                                          sample_weight=w)
    rows.append(("scikit-learn LogisticRegression(sample_weight=w), fit only, same rows",
                 time.perf_counter() - t0))
    print(f"| what ({args.rows:,} rows × 10 covariates) | wall time (s) |")
    print("|---|---|")
    for name, sec in rows:
        print(f"| {name} | {sec:.2f} |")


if __name__ == "__main__":
    main()
