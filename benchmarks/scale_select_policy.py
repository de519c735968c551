"""Scale benchmark for ``select-policy`` on the engines (issue #6, DESIGN §5).

A seeded synthetic observational table of ROWS × COVARIATES (x ~ N(0, 1), A ~ Bernoulli(σ(0.3 x1)),
Y ∈ [0, 1]) is written as a directory of Parquet files, then ``dpcausal select-policy`` (learned
regime, index split, m = N/2 nuisance rows, the paper's 160-policy library) runs in a fresh process
per engine; wall time, rows per second and the process's peak RSS are reported (see scale_owl.py).

    python benchmarks/scale_select_policy.py --rows 10000000 --covariates 20 --engines local dask
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from scale_owl import DATA_DIR, FILE_ROWS, ROW_GROUP, run_on


def make_data(root: Path, rows: int, p: int, seed: int = 20260102) -> None:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, start in enumerate(range(0, rows, FILE_ROWS)):
        m = min(FILE_ROWS, rows - start)
        x = rng.normal(0.0, 1.0, (m, p))
        a = (rng.uniform(size=m) < 1.0 / (1.0 + np.exp(-0.3 * x[:, 0]))).astype(np.int64)
        y = np.clip(0.5 + 0.1 * x[:, 0] + a * 0.1 * x[:, 1] + rng.normal(0.0, 0.2, m), 0.0, 1.0)
        cols = {f"x{j + 1}": x[:, j] for j in range(p)}
        cols.update({"A": a, "Y": y})
        pq.write_table(pa.table(cols), root / f"part-{i:04d}.parquet", row_group_size=ROW_GROUP)
        del x, cols


def write_spec(path: Path, data: Path, p: int, out: Path, engine: str) -> Path:
    doc: dict[str, object] = {
        "data": {"path": str(data), "columns": {"outcome": "Y", "treatment": "A",
                                               "covariates": [f"x{j + 1}" for j in range(p)]}},
        "bounds": {"outcome": [0.0, 1.0], "covariates": [-3.0, 3.0]},
        "privacy": {"epsilon": 1.0},
        "output": {"dir": str(out)},
        "select_policy": {"treated": 1, "control": 0,
                          "library": {"generator": "paper160", "seed": 0},
                          "regime": "learned", "zeta": 0.1, "train_fraction": 0.5,
                          "split": {"kind": "index"}, "lambda_mu": 50.0, "lambda_e": 50.0},
    }
    if engine == "local-stream":
        doc["engine"] = {"kind": "local", "cache_mb": 0}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--covariates", type=int, default=20)
    ap.add_argument("--engines", nargs="+", default=["local", "dask"],
                    choices=["memory", "local", "local-stream", "dask", "dask-procs"])
    args = ap.parse_args()
    root = DATA_DIR / f"scale_select_policy_{args.rows}x{args.covariates}"
    if not root.exists():
        t = time.perf_counter()
        make_data(root, args.rows, args.covariates)
        print(f"generated {root} in {time.perf_counter() - t:.1f} s", flush=True)
    work = DATA_DIR / "scale_select_policy_runs"
    work.mkdir(parents=True, exist_ok=True)
    for engine in args.engines:
        spec = write_spec(work / f"{engine}.yaml", root, args.covariates, work / engine, engine)
        res = run_on(engine, spec, command="select-policy", document="selection.json")
        rate = args.rows / float(res["seconds"])  # type: ignore[arg-type]
        print(f"{engine}: {res['seconds']:.1f} s, {rate:,.0f} rows/s, peak RSS "
              f"{res['peak_rss_mb']:.0f} MB, {res['summary']}", flush=True)


if __name__ == "__main__":
    main()
