"""Where one owl run at 10⁶ × 20 spends its CPU, component by component (issue 24).

    nice -n 19 python benchmarks/owl_phases.py [--runs 5] [--no-plot]
    PYTHONPATH=/path/to/other/tree python benchmarks/owl_phases.py   # the same for another tree

Each run is a fresh process that runs the real command line (``dpcausal owl --spec S --quiet
--test-noise-seed 1``, ``owl_speed.py``'s data and spec, as ``owl_floor.py``) with the functions
below wrapped to add up their process CPU time (user + sys, ``time.process_time``); nested
components are included in their parents (the design matrix in "validate and map"). "start-up and
the rest" is the process total minus the listed components: imports, the spec, receipts, writing.
Printed: the load average and, per component, the median (min–max) CPU seconds over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from owl_speed import GAMMA, OUTCOME_BOUNDS, SPEC, make_data  # noqa: E402

COMPONENTS = [  # (label, module, attribute): the functions timed
    ("plan (pipeline.prepare)", "dpcausal.pipeline", "prepare"),
    ("read the table (Arrow → pandas)", "dpcausal.io.tables", "read_table"),
    ("data checks (preprocess)", "dpcausal.preprocess.preprocessor", "Preprocessor.check"),
    ("validate and map (owl prepare)", "dpcausal.commands.owl.estimate", "prepare"),
    ("… of which the design matrix", "dpcausal.commands.common.linear_rule",
     "FeatureMap.transform_columns"),
    ("fit (Newton passes, warm start)", "dpcausal.commands.owl.estimate", "fit_nonprivate"),
    ("figure rule.png (import + draw)", "dpcausal.commands.owl.rule", "plot_rule"),
]

CHILD = r"""
import importlib, json, sys, time
components = json.loads(sys.argv[1])
spent = {label: 0.0 for label, _, _ in components}
from dpcausal.cli.threads import set_blas_threads
from dpcausal.cli.hugepages import set_numpy_hugepages
set_blas_threads()  # before numpy is imported by the modules wrapped below, as the CLI does
set_numpy_hugepages(["owl"])  # numpy's huge pages as the tree's CLI sets them for owl
import dpcausal.cli as cli
for label, module, attr in components:
    owner = importlib.import_module(module)
    *outer, name = attr.split(".")
    for part in outer:
        owner = getattr(owner, part)
    f = getattr(owner, name)
    def timed(*a, __f=f, __label=label, **k):
        t = time.process_time()
        try:
            return __f(*a, **k)
        finally:
            spent[__label] += time.process_time() - t
    setattr(owner, name, timed)
sys.argv = ["dpcausal", "owl", "--spec", sys.argv[2], "--quiet", "--test-noise-seed", "1"]
try:
    cli.main()
except SystemExit as exc:
    assert not exc.code, exc.code
spent["total (process)"] = time.process_time()
print(json.dumps(spent))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--covariates", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args()
    data = make_data(args.rows, args.covariates, args.seed)
    covs = ", ".join(f"x{j}" for j in range(1, args.covariates + 1))
    runs: list[dict[str, float]] = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "owl.yaml"
        for i in range(args.runs + 1):  # the first is a warm-up (file cache, bytecode)
            spec.write_text(SPEC.format(data=data, out=Path(tmp) / f"out{i}", gamma=GAMMA,
                                        lo=OUTCOME_BOUNDS[0], hi=OUTCOME_BOUNDS[1], covs=covs)
                            + ("  plot: false\n" if args.no_plot else ""))
            res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(COMPONENTS), str(spec)],
                                 capture_output=True, text=True, check=True)
            if i:
                runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    load1 = os.getloadavg()[0]
    print(f"{args.runs} runs, {args.rows} × {args.covariates}, owl.plot: {not args.no_plot}; "
          f"1-minute load average {load0:.1f} at the start, {load1:.1f} at the end")
    print("| component | CPU s, median (min–max) |")
    print("|---|---|")
    listed = [c[0] for c in COMPONENTS if not c[0].startswith("…")]
    for r in runs:
        r["start-up and the rest"] = r["total (process)"] - sum(r[k] for k in listed)
    for key in [c[0] for c in COMPONENTS] + ["start-up and the rest", "total (process)"]:
        xs = [r[key] for r in runs]
        print(f"| {key} | {statistics.median(xs):.3f} ({min(xs):.3f}–{max(xs):.3f}) |")


if __name__ == "__main__":
    main()
