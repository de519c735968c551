"""Speed and memory of ``dpcausal cate`` (function mode) on 10,000 rows × 5 covariates, 1,000 queries.

    python benchmarks/cate_speed.py [--rows 10000] [--queries 1000] [--threads N]
                                    [--features exact|rff] [--rff-dim 500]

Runs the real CLI in a subprocess on a generated file (Dataset-1-like DGP with 5 covariates) and
reports wall time, the child's CPU time and peak RSS (getrusage). The exact second stage solves an
n × n kernel system with n = rows/2 (O(n³) per active-set iteration, n² memory); ``--features rff``
streams the random features in row blocks (bounded memory), e.g. ``--features rff --rows 1000000``
(δ = min(1e-6, 0.1/rows)).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

Q = 5
Y_BOUNDS = (-2.0, 14.0)


def make_data(rows: int, n_queries: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The benchmark table (x0..x4 ~ U[0,1], A, Y; seed 0) and the public query points."""
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(rows, Q))
    a = (x[:, :2].sum(1) * 0.3 >= rng.uniform(-1, 1, rows)).astype(int)
    y = (np.exp(2 * x[:, 0]) + 3 * np.sin(4 * x[:, 1])) * a + x.sum(1) * 0.5 \
        + rng.uniform(-1, 1, rows)
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(Q)])
    frame["A"], frame["Y"] = a, y
    queries = pd.DataFrame(rng.uniform(size=(n_queries, Q)), columns=frame.columns[:Q])
    return frame, queries


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=1_000)
    ap.add_argument("--threads", type=int, default=None, help="BLAS threads (default: unset)")
    ap.add_argument("--features", choices=["exact", "rff"], default="exact")
    ap.add_argument("--rff-dim", type=int, default=500)
    args = ap.parse_args()
    q = Q
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        frame, queries = make_data(args.rows, args.queries)
        frame.to_csv(d / "data.csv", index=False)
        queries.to_csv(d / "queries.csv", index=False)
        spec = {
            "data": {"path": str(d / "data.csv"),
                     "columns": {"outcome": "Y", "treatment": "A",
                                 "covariates": [f"x{i}" for i in range(q)]}},
            "bounds": {"outcome": list(Y_BOUNDS), "covariates": [0.0, 1.0]},
            "privacy": {"epsilon": 1.0, "delta": min(1e-6, 0.1 / args.rows)},
            "output": {"dir": str(d / "out")},
            "cate": {"mode": "function", "queries": str(d / "queries.csv"),
                     "features": args.features, "rff_dim": args.rff_dim},
        }
        (d / "spec.yaml").write_text(yaml.safe_dump(spec))
        env = dict(os.environ)
        if args.threads is not None:
            env["OPENBLAS_NUM_THREADS"] = str(args.threads)
        load = os.getloadavg()[0]
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "dpcausal", "cate", "--spec",
                               str(d / "spec.yaml"), "--quiet"], env=env, capture_output=True,
                              text=True, check=False)
        wall = time.perf_counter() - t
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_mb = usage.ru_maxrss / 1024
        cpu = usage.ru_utime + usage.ru_stime
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        released = pd.read_csv(d / "out" / "cate.csv")
        assert len(released) == args.queries
    print(f"cate function mode ({args.features}): {args.rows} rows x {q} covariates, "
          f"{args.queries} queries, "
          f"BLAS threads={args.threads or 'default'}: wall {wall:.1f} s, CPU {cpu:.1f} s, "
          f"peak RSS {peak_mb:.0f} MB, load avg before {load:.1f}")


if __name__ == "__main__":
    main()
