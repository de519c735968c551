"""Reproduce the DP-CATE paper's synthetic experiments (§5.1, App. G.1; Figs. 3–5 and 9).

    python benchmarks/cate_reproduction.py [--seeds 5] [--out benchmarks/_data/cate_reproduction.md]
        [--seed-offset K] [--raw-out RAW.json]

The paper reports figures only (no numbers, no ε grid). We report √PEHE on the 300 test queries
(mean ± SE over seeds, median in brackets; ``--seed-offset K`` shifts every seed by K, ``--raw-out``
writes each seed's value for ``benchmarks/reseed.py``) for:
  A. ε sweep (n_total = 3000: 2700 train → |D̃| = |D| = 1350; 300 test queries), Datasets 1 and 2,
     function mode (Thm 3, Alg. 1) and queries mode (Thm 1), R-learner, plus the DR-learner on
     Dataset 1 (function mode) and the non-private learner (same pipeline, ε = 1e20: no noise).
  B. n sweep at ε = 1 and ε = 5, function mode, R-learner: n ∈ {1000, 2000, 4000, 8000} training
     rows (halves of n/2), on the same 300 separate test queries.
Settings: δ = 1e-5; dpcausal defaults (h = √(q/2) on [0,1]^q, λ0 = 1/√n, Huber c = Δy/2, κ = 0.05,
nuisance λ = 0.05, stage-1 budget split 50/50; queries mode: γ by search, 1024 Sobol points, safety
1.1). The nuisances are DP (ε/2, δ/2 each on D̃); the total is (ε, δ) by parallel composition.
BLAS is limited to one thread so the run is not slowed by thread contention.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from cate_common import NONPRIVATE_EPS, make_spec, release, sqrt_pehe
from cate_dgp import design

DELTA = 1e-5
EPS_GRID = (0.5, 1.0, 2.0, 5.0, 10.0, 50.0, NONPRIVATE_EPS)
N_GRID = (1000, 2000, 4000, 8000)


def _label(eps: float) -> str:
    return "non-private" if eps >= NONPRIVATE_EPS else f"ε = {eps:g}"


def one(dataset: int, seed: int, n_total: int, eps: float, **over: object) -> float:
    """√PEHE of one release on a fresh draw (seeded) of the design and the data."""
    rng = np.random.default_rng(1000 * dataset + seed)
    des = design(dataset, rng)
    train = des.sample(n_total - 300 if n_total == 3000 else n_total, rng)
    test = des.sample(300, rng)
    names = [f"x{i}" for i in range(des.p)]
    spec = make_spec(names, des.y_bounds, eps, DELTA, search_points=1024, **over)
    queries = test[names].reset_index(drop=True)
    tau_hat = release(spec, train, queries, noise_seed=10_000 + seed)
    return sqrt_pehe(tau_hat, des.theta(queries.to_numpy()))


RAW: dict[str, list[float]] = {}  # "config/column" -> one √PEHE per seed (reseed.py)


def cell(values: list[float], label: str) -> str:
    """mean ± SE (median) over seeds; keeps the values in RAW."""
    RAW[label] = values
    se = np.std(values, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{np.mean(values):.3f} ± {se:.3f} ({np.median(values):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/_data/cate_reproduction.md"))
    ap.add_argument("--seed-offset", type=int, default=0, help="added to every seed")
    ap.add_argument("--raw-out", type=Path, default=None, help="per-seed √PEHE (JSON)")
    args = ap.parse_args()
    seeds = range(args.seed_offset, args.seed_offset + args.seeds)
    lines: list[str] = []
    t0 = time.time()
    lines.append(f"### A. √PEHE vs ε (3000 rows: 2700 train, |D| = 1350; 300 queries; {args.seeds} seeds)\n")
    configs = [("DS1", 1, {"mode": "function"}, "function, R"),
               ("DS1", 1, {"mode": "queries"}, "queries, R"),
               ("DS1", 1, {"mode": "function", "learner": "dr"}, "function, DR"),
               ("DS2", 2, {"mode": "function"}, "function, R"),
               ("DS2", 2, {"mode": "queries"}, "queries, R")]
    lines.append("| data | release | " + " | ".join(_label(e) for e in EPS_GRID) + " |")
    lines.append("|---" * (len(EPS_GRID) + 2) + "|")
    for name, ds, over, label in configs:
        row = [cell([one(ds, s, 3000, e, **over) for s in seeds], f"A/{name} {label}/{_label(e)}")
               for e in EPS_GRID]
        lines.append(f"| {name} | {label} | " + " | ".join(row) + " |")
        print(lines[-1], f"({time.time() - t0:.0f} s)", flush=True)
    lines.append(f"\n### B. √PEHE vs n (function mode, R-learner, {args.seeds} seeds)\n")
    lines.append("| data | ε | " + " | ".join(f"n = {n}" for n in N_GRID) + " |")
    lines.append("|---" * (len(N_GRID) + 2) + "|")
    for name, ds in (("DS1", 1), ("DS2", 2)):
        for eps in (1.0, 5.0):
            row = [cell([one(ds, s, n, eps) for s in seeds], f"B/{name} ε = {eps:g}/n = {n}")
                   for n in N_GRID]
            lines.append(f"| {name} | {eps:g} | " + " | ".join(row) + " |")
            print(lines[-1], f"({time.time() - t0:.0f} s)", flush=True)
    lines.append(f"\nWall time: {time.time() - t0:.0f} s; seeds {seeds.start}–{seeds.stop - 1}.")
    if args.raw_out is not None:
        args.raw_out.write_text(json.dumps(RAW) + "\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        main()
