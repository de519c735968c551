"""SIMULATIONS shaped like the DP-CATE paper's MIMIC-III and TCGA experiments (§5.2, App. G.2).

    python benchmarks/cate_medical_shaped.py [--which mimic tcga] [--eps 1 10] [--seed-offset K]

Neither data set can be had here: MIMIC-III needs a credentialed PhysioNet account and TCGA's
expression matrix is not shipped by any package on PyPI. So this script simulates tables of the
same SHAPE and runs the CLI's own finite-query release (``mode: queries``, Thm 1, kernel-ridge
second stage, DP nuisances) on them, to show what the paper's pipelines cost under our
implementation. Every number it prints is from simulated data; none is a reproduction of Figs. 6–7.

* MIMIC-shaped: 14,719 rows, 8 confounders with ICU-like ranges (heart rate, sodium, red blood
  cell count, glucose, hematocrit, respiratory rate, age, gender), binary treatment "ventilation"
  (logistic in respiratory rate, heart rate and age), outcome "red blood cell count after" with an
  effect that varies with hematocrit, τ(x) = −0.4 + 0.03·(hematocrit − 35); 90/10 split, so the
  test set gives d = 1,472 queries (the paper's 1,312 after its own cleaning).
* TCGA-shaped: 9,659 patients × 4,000 log-normal "expression" covariates min-max scaled to [0, 1]
  by a public range; treatment by the sum of the 10 highest-variance covariates; a constant
  effect τ = 1 (the paper: "a constant treatment effect in the sum of the covariates"); 2,659
  queries drawn from the rows, as in the paper's d.

Reported per ε: √PEHE of the released τ̂ against the simulated τ, the same pipeline at
ε = 1e20 (non-private), and the public per-query noise sd γ·c(ε, δ, n). δ = 1/(10·n_rows).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special

from dpcausal.commands.cate.privacy import queries_constant

sys.path.insert(0, str(Path(__file__).parent))
from cate_common import NONPRIVATE_EPS, make_spec, release, sqrt_pehe

from dpcausal.commands.cate.setup import build_setup

MIMIC = {  # name: (mean, sd, public lo, public hi)
    "heart_rate": (88, 18, 30, 180), "sodium": (139, 5, 115, 160),
    "rbc": (3.6, 0.7, 1.5, 6.5), "glucose": (135, 45, 40, 400),
    "hematocrit": (31, 5, 15, 50), "resp_rate": (20, 6, 5, 50), "age": (64, 16, 18, 90),
}
RAW: dict[str, list[float]] = {}


def mimic_like(rng: np.random.Generator, n: int = 14_719
               ) -> tuple[pd.DataFrame, list[str], np.ndarray, tuple[float, float]]:
    """(frame with covariates mapped to [0, 1] by their public box, covariates, τ, Y bounds)."""
    cols = {k: np.clip(rng.normal(m, s, n), lo, hi) for k, (m, s, lo, hi) in MIMIC.items()}
    cols["gender"] = rng.integers(0, 2, n).astype(float)
    frame = pd.DataFrame(cols)
    z = (0.08 * (frame.resp_rate - 20) + 0.02 * (frame.heart_rate - 88)
         + 0.01 * (frame.age - 64)).to_numpy()
    a = (rng.uniform(size=n) < special.expit(z - 0.5)).astype(float)
    tau = -0.4 + 0.03 * (frame.hematocrit.to_numpy() - 35)
    y = frame.rbc.to_numpy() + 0.02 * (frame.hematocrit.to_numpy() - 31) + tau * a \
        + rng.normal(0, 0.3, n)
    names = list(cols)
    for k, (_, _, lo, hi) in MIMIC.items():  # the public box mapped to [0, 1]
        frame[k] = (frame[k] - lo) / (hi - lo)
    frame["A"], frame["Y"] = a, np.clip(y, 0.0, 8.0)
    return frame, names, tau, (0.0, 8.0)


def tcga_like(rng: np.random.Generator, n: int = 9_659, p: int = 4_000
              ) -> tuple[pd.DataFrame, list[str], np.ndarray, tuple[float, float]]:
    """(frame with covariates in [0, 1], covariates, τ, Y bounds)."""
    scale = rng.uniform(0.3, 1.2, p)
    x = np.clip(rng.lognormal(0.0, scale, (n, p)) / 20.0, 0.0, 1.0)
    names = [f"g{j}" for j in range(p)]
    top = np.argsort(scale)[-10:]
    z = x[:, top].sum(axis=1)
    a = (rng.uniform(size=n) < special.expit((z - z.mean()) / z.std())).astype(float)
    y = x.sum(axis=1) / np.sqrt(p) + 1.0 * a + rng.normal(0, 0.5, n)
    frame = pd.DataFrame(x, columns=names)
    frame["A"], frame["Y"] = a, np.clip(y, -5.0, 40.0)
    return frame, names, np.ones(n), (-5.0, 40.0)


def run(which: str, eps_grid: list[float], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    frame, names, tau, ybounds = (mimic_like if which == "mimic" else tcga_like)(rng)
    n = len(frame)
    d = n // 10 if which == "mimic" else 2_659
    test = rng.choice(n, d, replace=False)
    train = frame.drop(index=test).reset_index(drop=True)
    queries = frame.iloc[test][names].reset_index(drop=True)
    delta = 1.0 / (10 * len(train))
    lines = []
    for eps in [*eps_grid, NONPRIVATE_EPS]:
        spec = make_spec(names, ybounds, eps, delta, mode="queries", search_points=1024)
        t0 = time.time()
        tau_hat = release(spec, train, queries, noise_seed=seed + 1)
        setup = build_setup(spec, len(train))
        pehe = sqrt_pehe(tau_hat, tau[test])
        RAW[f"{which}/eps={eps:g}/sqrt_pehe"] = [pehe]
        label = "non-private" if eps >= NONPRIVATE_EPS else f"{eps:g}"
        lines.append(f"| {which}-shaped (simulated) | {n} × {len(names)} | {len(queries)} | {label} | "
                     f"{pehe:.3g} | {queries_constant(spec, setup):.3g} | "
                     f"{time.time() - t0:.0f} s |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--which", nargs="+", default=["mimic", "tcga"], choices=["mimic", "tcga"])
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 10.0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--raw-out", type=Path, default=None)
    args = ap.parse_args()
    lines = ["| data | rows × covariates | queries d | ε | √PEHE | c(ε, δ, n) (noise sd = γ(T,D)·c) "
             "| wall |", "|---|---|---|---|---|---|---|"]
    for which in args.which:
        lines += run(which, args.eps, args.seed + args.seed_offset)
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    if args.raw_out is not None:
        args.raw_out.write_text(json.dumps(RAW) + "\n")


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        main()
