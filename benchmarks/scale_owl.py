"""Scale benchmark for ``owl`` on the engines (issue #6, DESIGN §5).

Writes a seeded synthetic trial of ROWS × COVARIATES as a directory of Parquet files (generated file
by file, never all in memory), then runs ``dpcausal owl`` in a fresh process per engine and reports
wall time, rows per second and the peak resident memory of that process (ru_maxrss of the child;
with ``--engine dask`` and no address the 2-worker LocalCluster runs in that process, so its
workers' memory is included). All runs use the same test noise seed, so their released θ can be
compared (the receipts then say dp_guarantee: false; the timing is the same as a real run).

    python benchmarks/scale_owl.py --rows 10000000 --covariates 20 --engines local dask
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

DATA_DIR = Path(__file__).resolve().parent / "_data"
FILE_ROWS = 1_000_000
ROW_GROUP = 250_000


def make_data(root: Path, rows: int, p: int, seed: int = 20260101) -> None:
    """A two-arm trial: x ~ U(0,1)^p, A ~ Bernoulli(1/2), B = x1 − x2 + (2A − 1)(x3 − ½)·3 + N(0,1)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, start in enumerate(range(0, rows, FILE_ROWS)):
        m = min(FILE_ROWS, rows - start)
        x = rng.uniform(0.0, 1.0, (m, p))
        a = rng.integers(0, 2, m)
        b = x[:, 0] - x[:, 1] + (2 * a - 1) * (x[:, 2] - 0.5) * 3.0 + rng.normal(0.0, 1.0, m)
        cols = {f"x{j + 1}": x[:, j] for j in range(p)}
        cols.update({"A": a, "B": b})
        pq.write_table(pa.table(cols), root / f"part-{i:04d}.parquet", row_group_size=ROW_GROUP)
        del x, cols


def write_spec(path: Path, data: Path, p: int, out: Path, engine: str) -> Path:
    doc: dict[str, object] = {
        "data": {"path": str(data), "columns": {"outcome": "B", "treatment": "A",
                                               "covariates": [f"x{j + 1}" for j in range(p)]}},
        "bounds": {"outcome": [-6.0, 6.0], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 1.0},
        "output": {"dir": str(out)},
        "owl": {"treated": 1, "propensity": 0.5, "gamma": 1000.0},
    }
    if engine == "local-stream":  # no cache: every pass re-reads the Parquet row groups
        doc["engine"] = {"kind": "local", "cache_mb": 0}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(spec: Path, extra: list[str], command: str = "owl",
        document: str = "rule.json") -> dict[str, object]:
    """One CLI run in a child process; wall time, the child's peak RSS and, on an engine, its number
    of data passes (counted in the child: the CLI never publishes it, it is data-dependent)."""
    code = (
        "import contextlib, resource, sys, time\n"
        "import dpcausal.engine as E\n"
        "from dpcausal.cli import main\n"
        "real = E.open_engine\n"
        "@contextlib.contextmanager\n"
        "def counting(*a, **k):\n"
        "    with real(*a, **k) as eng:\n"
        "        yield eng\n"
        "        sys.stderr.write(f'PASSES {eng.passes}\\n')\n"
        "E.open_engine = counting\n"
        "sys.argv = ['dpcausal', *sys.argv[1:]]\n"
        "t = time.perf_counter()\n"
        "try:\n    main()\n"
        "except SystemExit as e:\n    rc = e.code or 0\nelse:\n    rc = 0\n"
        "sys.stderr.write(f'BENCH {time.perf_counter() - t} '\n"
        "                 f'{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')\n"
        "sys.exit(rc)\n"
    )
    cmd = [sys.executable, "-c", code, command, "--spec", str(spec), "--json",
           "--test-noise-seed", "1", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    line = [x for x in proc.stderr.splitlines() if x.startswith("BENCH ")][-1].split()
    out = json.loads(proc.stdout)
    doc = json.loads((Path(out["output_paths"][0]).parent / document).read_text())
    passes = [int(x.split()[1]) for x in proc.stderr.splitlines() if x.startswith("PASSES ")]
    return {"seconds": float(line[1]), "peak_rss_mb": int(line[2]) / 1024.0,
            "summary": out["summary"], "theta": doc.get("theta"),
            "passes": passes[-1] if passes else None}


def run_on(engine: str, spec: Path, **kw: str) -> dict[str, object]:
    """``run`` with the command-line flags of ``engine``; ``dask-procs`` starts a 2-process tcp
    LocalCluster first (the peak RSS reported is then the client's only)."""
    if engine == "dask-procs":
        from distributed import LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as lc:
            return run(spec, ["--engine-address", lc.scheduler_address], **kw)
    return run(spec, {"memory": [], "local-stream": []}.get(engine, ["--engine", engine]), **kw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--covariates", type=int, default=20)
    ap.add_argument("--engines", nargs="+", default=["local", "dask"],
                    choices=["memory", "local", "local-stream", "dask", "dask-procs"])
    args = ap.parse_args()
    root = DATA_DIR / f"scale_owl_{args.rows}x{args.covariates}"
    if not root.exists():
        t = time.perf_counter()
        make_data(root, args.rows, args.covariates)
        print(f"generated {root} in {time.perf_counter() - t:.1f} s", flush=True)
    work = DATA_DIR / "scale_owl_runs"
    work.mkdir(parents=True, exist_ok=True)
    results = {}
    for engine in args.engines:
        spec = write_spec(work / f"{engine}.yaml", root, args.covariates, work / engine, engine)
        res = run_on(engine, spec)
        res["rows_per_second"] = args.rows / float(res["seconds"])  # type: ignore[arg-type]
        results[engine] = res
        print(f"{engine}: {res['seconds']:.1f} s, {res['rows_per_second']:,.0f} rows/s, "
              f"peak RSS {res['peak_rss_mb']:.0f} MB, passes {res['passes']}, {res['summary']}", flush=True)
    thetas = [np.array(r["theta"]) for r in results.values()]
    if len(thetas) > 1:
        diff = max(float(np.abs(t - thetas[0]).max()) for t in thetas[1:])
        print(f"max |θ difference| between engines (same test noise seed): {diff:.3g}")
    _ = resource  # the parent's own RSS is not reported


if __name__ == "__main__":
    main()
