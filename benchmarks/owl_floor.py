"""owl at 1,000,000 × 20 beside the Parquet-read floor, whole processes in interleaved pairs
(issue 24: "owl 1M ≤ 2.5× the Parquet-read floor").

    nice -n 19 python benchmarks/owl_floor.py [--pairs 10] [--rows 1000000] [--covariates 20]
                                              [--no-plot]

The data and spec are ``owl_speed.py``'s (its Parquet file is written once under
``benchmarks/_data``). The floor is a whole Python process that reads the columns owl reads
into numpy float64 arrays with pyarrow and does nothing else::

    python -c "import pyarrow.parquet as pq, numpy as np; t = pq.read_table(P, columns=C);
               [t.column(c).to_numpy() for c in C]"

(``to_numpy`` of an int64 column is cast to float64 as owl's reader does). Ours is
``dpcausal owl --spec S --quiet`` (start-up, plan, read, fit, noise, rule + receipt). After one
warm-up of each (file cache, bytecode), ``--pairs`` pairs run A B, B A, … alternating the order,
each under ``/usr/bin/time -v``. Printed: the load average, each side's median (min–max) CPU
(user + sys) and wall seconds, and the pair-by-pair ratios ours / floor, median (min–max).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from owl_speed import GAMMA, OUTCOME_BOUNDS, SPEC, make_data  # noqa: E402
from peers import timed  # noqa: E402  (one whole process under /usr/bin/time -v)

FLOOR = ("import sys, numpy as np, pyarrow.parquet as pq; C = sys.argv[2].split(','); "
         "t = pq.read_table(sys.argv[1], columns=C); "
         "[t.column(c).to_numpy().astype(np.float64, copy=False) for c in C]")


def spread(xs: list[float]) -> str:
    """median (min–max)."""
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--covariates", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--no-plot", action="store_true",
                    help="owl.plot: false (no rule.png: matplotlib is not imported)")
    args = ap.parse_args()
    data = make_data(args.rows, args.covariates, args.seed)
    covs = [f"x{j}" for j in range(1, args.covariates + 1)]
    columns = ",".join(["B", "A", *covs])
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "owl.yaml"
        spec.write_text(SPEC.format(data=data, out=Path(tmp) / "out", gamma=GAMMA,
                                    lo=OUTCOME_BOUNDS[0], hi=OUTCOME_BOUNDS[1],
                                    covs=", ".join(covs))
                        + ("  plot: false\n" if args.no_plot else ""))
        sides = {
            "ours": [sys.executable, "-m", "dpcausal", "owl", "--spec", str(spec), "--quiet"],
            "floor": [sys.executable, "-c", FLOOR, str(data), columns],
        }
        load0 = os.getloadavg()[0]
        for argv in sides.values():
            timed(argv)  # warm-up
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
        for i in range(args.pairs):
            order = ("ours", "floor") if i % 2 == 0 else ("floor", "ours")
            for name in order:
                runs[name].append(timed(sides[name]))
        load1 = os.getloadavg()[0]
    print(f"{args.pairs} interleaved pairs, {args.rows} rows × {args.covariates} covariates "
          f"({data.stat().st_size / 1e6:.0f} MB); 1-minute load average {load0:.1f} at the "
          f"start, {load1:.1f} at the end; owl.plot: {not args.no_plot}")
    print("| side | CPU s, median (min–max) | wall s, median (min–max) |")
    print("|---|---|---|")
    for name, rs in runs.items():
        print(f"| {name} | {spread([r[1] for r in rs])} | {spread([r[0] for r in rs])} |")
    cpu = [o[1] / f[1] for o, f in zip(runs["ours"], runs["floor"], strict=True)]
    wall = [o[0] / f[0] for o, f in zip(runs["ours"], runs["floor"], strict=True)]
    print(f"| ours / floor (pair by pair) | **{spread(cpu)}** | **{spread(wall)}** |")


if __name__ == "__main__":
    main()
