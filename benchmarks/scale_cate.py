"""Scale benchmark for ``cate`` (``features: rff``) on the engines (issue #6, DESIGN §5).

Writes a seeded synthetic observational table of ROWS × 5 covariates (the DGP of
benchmarks/cate_speed.py) as a directory of Parquet files, generated file by file, plus 1,000
public query points; then runs ``dpcausal cate`` (function mode, random Fourier features with
``--rff-dim`` pairs, ε = 1, δ = min(1e-6, 0.1/rows)) in a fresh process per engine and reports
wall time, rows per second, the process's CPU time and peak RSS and the data passes (counted
in the child process by scale_owl.run: the CLI never publishes them) (see scale_owl.py; with
``dask`` and no address the 2-worker LocalCluster runs in that process, so its workers' memory is
included). All runs use the same test noise seed, so the released weights are compared.

    cd benchmarks && python scale_cate.py --rows 1000000 --engines memory local local-stream dask
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from scale_owl import DATA_DIR, FILE_ROWS, ROW_GROUP, run_on

Q = 5
Y_BOUNDS = (-2.0, 14.0)


def make_data(root: Path, rows: int, seed: int = 20260103) -> None:
    """x ~ U(0,1)^5, A = 1{0.3(x0 + x1) ≥ U(−1, 1)}, Y = (e^{2x0} + 3 sin 4x1)A + ½Σx + U(−1, 1)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, start in enumerate(range(0, rows, FILE_ROWS)):
        m = min(FILE_ROWS, rows - start)
        x = rng.uniform(size=(m, Q))
        a = (x[:, :2].sum(1) * 0.3 >= rng.uniform(-1, 1, m)).astype(np.int64)
        y = (np.exp(2 * x[:, 0]) + 3 * np.sin(4 * x[:, 1])) * a + x.sum(1) * 0.5 \
            + rng.uniform(-1, 1, m)
        cols = {f"x{j}": x[:, j] for j in range(Q)}
        cols.update({"A": a, "Y": y})
        pq.write_table(pa.table(cols), root / f"part-{i:04d}.parquet", row_group_size=ROW_GROUP)
    queries = pd.DataFrame(np.random.default_rng(1).uniform(size=(1000, Q)),
                           columns=[f"x{j}" for j in range(Q)])
    queries.to_csv(root.parent / f"{root.name}_queries.csv", index=False)


def write_spec(path: Path, data: Path, rows: int, rff_dim: int, out: Path, engine: str) -> Path:
    doc: dict[str, object] = {
        "data": {"path": str(data), "columns": {"outcome": "Y", "treatment": "A",
                                               "covariates": [f"x{j}" for j in range(Q)]}},
        "bounds": {"outcome": list(Y_BOUNDS), "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 1.0, "delta": min(1e-6, 0.1 / rows)},
        "output": {"dir": str(out)},
        "cate": {"mode": "function", "features": "rff", "rff_dim": rff_dim,
                 "queries": str(data.parent / f"{data.name}_queries.csv")},
    }
    if engine == "local-stream":  # no cache: every pass re-reads the Parquet row groups
        doc["engine"] = {"kind": "local", "cache_mb": 0}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rff-dim", type=int, default=500)
    ap.add_argument("--engines", nargs="+", default=["memory", "local", "local-stream", "dask"],
                    choices=["memory", "local", "local-stream", "dask", "dask-procs"])
    args = ap.parse_args()
    root = DATA_DIR / f"scale_cate_{args.rows}x{Q}"
    if not root.exists():
        t = time.perf_counter()
        make_data(root, args.rows)
        print(f"generated {root} in {time.perf_counter() - t:.1f} s", flush=True)
    work = DATA_DIR / "scale_cate_runs"
    work.mkdir(parents=True, exist_ok=True)
    weights = {}
    for engine in args.engines:
        spec = write_spec(work / f"{engine}.yaml", root, args.rows, args.rff_dim, work / engine,
                          engine)
        load = os.getloadavg()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        # dask-procs: a 2-process tcp LocalCluster, so RSS and CPU are the client's only
        res = run_on(engine, spec, command="cate", document="cate_function.json")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        weights[engine] = np.array(json.loads(
            (work / engine / "cate_function.json").read_text())["weights"])
        print(f"{engine}: {res['seconds']:.1f} s, {args.rows / float(res['seconds']):,.0f} "  # type: ignore[arg-type]
              f"rows/s, CPU {cpu:.1f} s, peak RSS {res['peak_rss_mb']:.0f} MB, passes "
              f"{res['passes'] or '-'}, load avg before {load[0]:.2f} / {load[1]:.2f}", flush=True)
    first = next(iter(weights.values()))
    if len(weights) > 1:
        diff = max(float(np.abs(w - first).max()) for w in weights.values())
        print(f"max |weight difference| between engines (same test noise seed): {diff:.3g} "
              f"(largest |weight| {float(np.abs(first).max()):.3g}); load avg now "
              f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
