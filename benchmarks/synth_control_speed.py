"""Speed of ``dpcausal synth-control``: 1,000 donors × 500 periods end to end, and a Prop-99-sized
panel beside pysyncon's non-private Synth (when pysyncon is installed).

    python benchmarks/synth_control_speed.py

End to end = a fresh ``dpcausal synth-control`` process (interpreter start, imports, spec, schema
and structure pass, plan, reading the panel, ridge, noise, CSV/JSON/PNG writing, receipt, ledger),
timed from outside with ``time.perf_counter``. Data files go to benchmarks/_data/ (not committed).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from dpcausal.commands.synth_control.method import METHOD
from dpcausal.pipeline import execute
from dpcausal.spec.load import load_spec

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "_data" / "synth_control"
DPCAUSAL = shutil.which("dpcausal") or "dpcausal"


def big_panel(n: int, periods: int, seed: int = 0) -> pd.DataFrame:
    """A long panel: n donors + target, rank-3 factor model, values in [0, 100]."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, periods)
    factors = np.vstack([np.ones(periods), t, np.sin(6 * t)])
    load = rng.uniform([30, -10, -5], [70, 10, 5], size=(n + 1, 3))
    vals = np.clip(load @ factors + rng.normal(0, 1.0, (n + 1, periods)), 0, 100).round(3)
    units = ["target", *[f"d{i:04d}" for i in range(n)]]
    return pd.DataFrame({"unit": np.repeat(units, periods), "time": np.tile(np.arange(periods), n + 1),
                         "value": vals.ravel()})


def write_spec(path: Path, data: Path, target: str, t_star: int, columns: dict[str, str],
               bounds: list[float], out: Path) -> Path:
    doc = {"data": {"path": str(data), "columns": columns}, "bounds": {"outcome": bounds},
           "privacy": {"epsilon": 10.0}, "output": {"dir": str(out)},
           "synth_control": {"target": target, "treatment_time": t_star}}
    path.write_text(yaml.safe_dump(doc))
    return path


CPU: list[float] = []


def cli_times(spec: Path, repeats: int) -> list[float]:
    """Wall times of fresh CLI processes; their CPU times (user + sys) go to CPU."""
    times = []
    CPU.clear()
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([DPCAUSAL, "synth-control", "--spec", str(spec), "--quiet"], check=True,
                       env={**os.environ, "CI": "true"})
        times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return times


def in_process(spec_path: Path, repeats: int) -> list[float]:
    spec, sha = load_spec(spec_path, METHOD.spec_model)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        execute(METHOD, spec, sha)
        times.append(time.perf_counter() - t0)
    return times


def pysyncon_time(frame: pd.DataFrame, repeats: int) -> tuple[list[float], str] | None:
    try:
        from pysyncon import Dataprep, Synth
    except ImportError:
        return None
    donors = sorted(set(frame.unit) - {"CA"})
    pre = range(1970, 1989)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        prep = Dataprep(foo=frame, predictors=["sales"], predictors_op="mean",
                        time_predictors_prior=pre, dependent="sales", unit_variable="unit",
                        time_variable="year", treatment_identifier="CA",
                        controls_identifier=donors, time_optimize_ssr=pre,
                        special_predictors=[("sales", [y], "mean") for y in (1975, 1980, 1988)])
        Synth().fit(dataprep=prep)
        times.append(time.perf_counter() - t0)
    return times, importlib.metadata.version("pysyncon")


def fmt(ts: list[float]) -> str:
    out = f"median {statistics.median(ts):.2f} s (min {min(ts):.2f}, max {max(ts):.2f}, {len(ts)} runs)"
    if CPU and len(CPU) == len(ts):
        out += f"; CPU user+sys median {statistics.median(CPU):.2f} s"
        CPU.clear()
    return out


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}")
    big = DATA / "panel_1000x500.csv"
    if not big.exists():
        big_panel(1000, 500).to_csv(big, index=False)
    big_pq = DATA / "panel_1000x500.parquet"
    if not big_pq.exists():
        pd.read_csv(big).to_parquet(big_pq, index=False)
    cols = {"unit": "unit", "time": "time", "outcome": "value"}
    for data in (big, big_pq):
        spec = write_spec(DATA / f"big_{data.suffix[1:]}.yaml", data, "target", 400, cols,
                          [0.0, 100.0], DATA / f"out_big_{data.suffix[1:]}")
        print(f"1,000 donors x 500 periods ({data.suffix[1:]}, 500,500 rows, T0 = 400), end to end "
              f"CLI: {fmt(cli_times(spec, 3))}")
        print(f"   same, in-process execute(): {fmt(in_process(spec, 3))}")
    prop = REPO / "sample_data" / "synth_control_panel.csv"
    spec = write_spec(DATA / "prop99.yaml", prop, "CA", 1989,
                      {"unit": "unit", "time": "year", "outcome": "sales"}, [0.0, 300.0],
                      DATA / "out_prop99")
    print(f"Prop-99-sized (38 donors x 31 years, simulated sample panel): end to end CLI: "
          f"{fmt(cli_times(spec, 5))}")
    print(f"   same, in-process execute(): {fmt(in_process(spec, 5))}")
    res = pysyncon_time(pd.read_csv(prop), 5)
    if res is None:
        print("pysyncon not installed: no comparison")
    else:
        times, version = res
        print(f"pysyncon {version} Synth (non-private; Dataprep + fit, Nelder-Mead over V), in-process: "
              f"{fmt(times)}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
