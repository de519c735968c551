"""Scale benchmark for ``two-stage`` on the engines (issue #6, DESIGN §5).

Uses the seeded synthetic observational table of ``scale_select_policy.py`` (x ~ N(0, 1)^p,
A ~ Bernoulli(σ(0.3 x1)), Y ∈ [0, 1]; 1,000,000-row Parquet files with 250,000-row row groups; the
same files are reused when present) and runs ``dpcausal two-stage`` with ``weights: ipw-logit``
(a ridge logistic propensity fitted in the ℓ₂ ball: stage-1 Newton passes, the certificate, then
one stage-2 pass) in a fresh process per engine; wall time, rows per second, the process's peak
RSS and the number of data passes are reported (see scale_owl.py). All runs use the same test
noise seed, so the released θ can be compared.

    python benchmarks/scale_two_stage.py --rows 10000000 --covariates 20 \
        --engines local local-stream dask memory
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import yaml
from scale_owl import DATA_DIR, run_on
from scale_select_policy import make_data


def write_spec(path: Path, data: Path, p: int, out: Path, engine: str,
               weights: str) -> Path:
    doc: dict[str, object] = {
        "data": {"path": str(data), "columns": {"outcome": "Y", "treatment": "A",
                                               "covariates": [f"x{j + 1}" for j in range(p)]}},
        "bounds": {"outcome": [0.0, 1.0], "covariates": [-3.0, 3.0]},
        "privacy": {"epsilon": 1.0},
        "output": {"dir": str(out)},
        "two_stage": {"treated": 1, "control": 0, "weights": weights, "l1_radius": 10.0,
                      **({"ipw_logit": {"radius": 0.3, "ridge": 1.0}}
                         if weights == "ipw-logit" else {}),
                      **({"ebw": {"radius": 0.5, "ridge": 10.0, "arm_totals": "sample"}}
                         if weights == "ebw" else {})},
    }
    if engine == "local-stream":  # no cache: every pass re-reads the Parquet row groups
        doc["engine"] = {"kind": "local", "cache_mb": 0}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--covariates", type=int, default=20)
    ap.add_argument("--weights", default="ipw-logit", choices=["ipw-logit", "ebw", "uniform"])
    ap.add_argument("--engines", nargs="+", default=["local", "dask"],
                    choices=["memory", "local", "local-stream", "dask", "dask-procs"])
    args = ap.parse_args()
    root = DATA_DIR / f"scale_select_policy_{args.rows}x{args.covariates}"
    if not root.exists():
        t = time.perf_counter()
        make_data(root, args.rows, args.covariates)
        print(f"generated {root} in {time.perf_counter() - t:.1f} s", flush=True)
    work = DATA_DIR / "scale_two_stage_runs"
    work.mkdir(parents=True, exist_ok=True)
    thetas = {}
    for engine in args.engines:
        load = os.getloadavg()[0]
        spec = write_spec(work / f"{engine}.yaml", root, args.covariates, work / engine, engine,
                          args.weights)
        res = run_on(engine, spec, command="two-stage")
        rate = args.rows / float(res["seconds"])  # type: ignore[arg-type]
        summary = res["summary"]
        thetas[engine] = np.array(res["theta"])
        print(f"{engine}: {res['seconds']:.1f} s, {rate:,.0f} rows/s, peak RSS "
              f"{res['peak_rss_mb']:.0f} MB, passes {res['passes']}, "
              f"load before {load:.1f}, after {os.getloadavg()[0]:.1f}; {summary}", flush=True)
    if len(thetas) > 1:
        first = next(iter(thetas.values()))
        diff = max(float(np.abs(t - first).max()) for t in thetas.values())
        print(f"max |θ difference| between engines (same test noise seed): {diff:.3g}")


if __name__ == "__main__":
    main()
