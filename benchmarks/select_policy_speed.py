"""Speed/memory of `dpcausal select-policy` at 1,000,000 rows × 20 covariates × 160 policies.

    python benchmarks/select_policy_speed.py [--rows 1000000] [--workdir /tmp/spbench]

1. Writes a seeded data set (rare-region DGP on i.i.d. N(0,1) covariates clipped to [-3, 3]) as
   Parquet and CSV.
2. Runs the real CLI end to end (subprocess; spec → plan → read → certified ridge/logistic on the
   m = N/2 nuisance rows → chunked DR utilities of the paper's 160-policy library → exponential
   mechanism → receipt), measuring wall time and peak RSS (resource.getrusage of the child).
3. Times the same DR-score computation written the usual way: pandas + scikit-learn nuisances
   (Ridge per arm, LogisticRegression), then one pandas column of ψ per policy, summed.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from dpcausal.commands.select_policy.library import build_library, paper160

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_data"))
from select_policy_sim import RareRegionDGP  # the simulator of sample_data/

D = 20
NAMES = [f"x{j + 1}" for j in range(D)]


def make_data(rows: int, workdir: Path) -> tuple[Path, Path, float]:
    rng = np.random.default_rng(2026)
    x = np.clip(rng.standard_normal((rows, D)), -3, 3)
    from dpcausal.commands.select_policy.library import h_rare

    q95 = float(np.quantile(h_rare(x[:200_000]), 0.95))
    a, y = RareRegionDGP(D, q95).sample(x, rng)
    frame = pd.DataFrame(x.astype(np.float64), columns=NAMES)
    frame["A"], frame["Y"] = a, y
    pq_path, csv_path = workdir / "big.parquet", workdir / "big.csv"
    if not pq_path.exists():
        frame.to_parquet(pq_path)
    if not csv_path.exists():
        frame.to_csv(csv_path, index=False, float_format="%.6f")
    return pq_path, csv_path, q95


def write_spec(workdir: Path, data: Path) -> Path:
    spec = {
        "data": {"path": str(data), "columns": {"outcome": "Y", "treatment": "A",
                                                "covariates": NAMES}},
        "bounds": {"outcome": [0.0, 1.0], "covariates": [-3.0, 3.0]},
        "privacy": {"epsilon": 1.0},
        "output": {"dir": str(workdir / "out")},
        "select_policy": {"treated": 1, "control": 0,
                          "library": {"generator": "paper160", "seed": 7}},
    }
    path = workdir / f"spec_{data.suffix[1:]}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run_cli(spec: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (GB) of one CLI run in a child process (GNU time -f %M)."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "dpcausal",
                           "select-policy", "--spec", str(spec), "--quiet"], check=True,
                          env={**os.environ, "CI": "true"}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak_kb = float(proc.stderr.strip().splitlines()[-1])
    return wall, peak_kb / 1024**2


def sklearn_pandas(data: Path, q95: float) -> float:
    """The same DR utilities with pandas + scikit-learn nuisances (not private, for timing)."""
    from sklearn.linear_model import LogisticRegression, Ridge

    t0 = time.perf_counter()
    df = pd.read_parquet(data)
    m = len(df) // 2
    tr, sc = df.iloc[:m], df.iloc[m:].copy()
    xs = ((tr[NAMES].clip(-3, 3) + 3) / 3 - 1)
    mus = {}
    for arm in (0, 1):
        sel = tr["A"] == arm
        mus[arm] = Ridge(alpha=m * 50.0).fit(xs[sel], tr.loc[sel, "Y"])
    ps = LogisticRegression(C=1.0 / (50.0 * m)).fit(xs, tr["A"])
    xsc = ((sc[NAMES].clip(-3, 3) + 3) / 3 - 1)
    sc["mu0"] = np.clip(mus[0].predict(xsc), 0, 1)
    sc["mu1"] = np.clip(mus[1].predict(xsc), 0, 1)
    sc["e1"] = np.clip(ps.predict_proba(xsc)[:, 1], 0.1, 0.9)
    lib = build_library({"policies": paper160(NAMES, 7, rare_threshold=q95)}, NAMES, where="b",
                        source={})
    utilities = []
    for k in range(lib.size):  # one pandas pass per policy, the usual way
        pi = pd.Series(lib.decisions(sc[NAMES].to_numpy())[:, k] if k == 0 else
                       _decide(lib, k, sc), index=sc.index)
        mu = sc["mu1"].where(pi, sc["mu0"])
        e = sc["e1"].where(pi, 1 - sc["e1"])
        psi = mu + ((sc["A"] == 1) == pi) / e * (sc["Y"] - mu)
        utilities.append(float(psi.sum()))
    return time.perf_counter() - t0


def _decide(lib, k, sc: pd.DataFrame) -> np.ndarray:  # type: ignore[no-untyped-def]
    p = lib.policies[k]
    if p["type"] == "constant":
        return np.full(len(sc), p["treat"])
    if p["type"] == "threshold":
        col = sc[p["covariate"]]
        return (col >= p["threshold"]) if p["op"] == ">=" else (col < p["threshold"])
    if p["type"] == "linear":
        s = sum(sc[c] * w for c, w in p["weights"].items()) + p["intercept"]
        return (s < 0) if p["complement"] else (s >= 0)
    from dpcausal.commands.select_policy.library import h_rare

    return (h_rare(sc[p["covariates"]].to_numpy()) >= p["threshold"]) ^ p["complement"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/spbench"))
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    pq_path, csv_path, q95 = make_data(args.rows, args.workdir)
    rows = []
    for data in (pq_path, csv_path):
        wall, peak = run_cli(write_spec(args.workdir, data))
        rows.append((f"dpcausal select-policy, end to end ({data.suffix[1:]})", wall, peak))
    rows.append(("pandas + scikit-learn DR utilities (no privacy, no I/O of outputs)",
                 sklearn_pandas(pq_path, q95), float("nan")))
    print(f"rows = {args.rows:,}, d = {D}, M = 160 policies, m = n = rows/2, "
          f"{os.cpu_count()} cores\n")
    print("| run | wall (s) | peak RSS (GB) |\n|---|---|---|")
    for name, wall, peak in rows:
        print(f"| {name} | {wall:.1f} | {'' if peak != peak else f'{peak:.2f}'} |")


if __name__ == "__main__":
    main()
