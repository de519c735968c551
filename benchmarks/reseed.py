"""Rerun a reproduction claim with shifted seeds and print mean, SE and median per quantity.

    python benchmarks/reseed.py --offsets 0 100000 -- \\
        benchmarks/select_policy_reproduction.py --table 1 --reps 40
    python benchmarks/reseed.py --match 'n=2000/naive' --raw A.json B.json   # summarise saved runs

Every reproduction script (select_policy_reproduction.py, owl_reproduction.py, two_stage_sim.py,
cate_reproduction.py, synth_control_reproduction.py) takes ``--seed-offset K``, which it adds to
every seed it draws data or noise from, and ``--raw-out FILE``, where it writes a JSON object
{quantity label: [one value per repetition]}. This script runs the given script once per offset
(its results go to a temporary directory through ``--out``, so the committed result files are not
touched), then prints for every quantity: mean ± SE (sd/√reps), median and the number of
repetitions per seed set, and z = (mean₂ − mean₁)/√(SE₁² + SE₂²) between the first two sets.
A claim "survives" a second seed set when its conclusion holds in both columns; |z| > 2 on a
quantity flags a seed artefact (or a bug) to look at. ``--match`` keeps the labels matching a
regular expression.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def stats(values: list[float]) -> tuple[float, float, float, int]:
    """(mean, SE, median, count) of the finite values."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return math.nan, math.nan, math.nan, 0
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
    return float(v.mean()), se, float(np.median(v)), int(v.size)


def run(script: list[str], offset: int, workdir: Path) -> dict[str, list[float]]:
    """Run one reproduction with a seed offset; return its per-repetition values."""
    raw = workdir / f"raw_{offset}.json"
    cmd = [sys.executable, *script, "--seed-offset", str(offset), "--raw-out", str(raw),
           "--out", str(workdir / f"out_{offset}.json")]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(raw.read_text())


def report(sets: list[dict[str, list[float]]], names: list[str], match: str | None) -> str:
    """A markdown table: one row per quantity, one column per seed set, then z."""
    labels = [k for k in sets[0] if match is None or re.search(match, k)]
    head = "| quantity | " + " | ".join(f"{n}: mean ± SE (median) [reps]" for n in names)
    lines = [head + (" | z |" if len(sets) > 1 else " |"),
             "|---|" + "---|" * (len(sets) + (len(sets) > 1))]
    for k in labels:
        cells, ms = [], []
        for s in sets:
            m, se, med, n = stats(s.get(k, []))
            ms.append((m, se))
            cells.append(f"{m:.4g} ± {se:.2g} ({med:.4g}) [{n}]")
        z = ""
        if len(sets) > 1:
            (m1, s1), (m2, s2) = ms[0], ms[1]
            den = math.hypot(s1, s2)
            z = f" {(m2 - m1) / den:+.2f} |" if den > 0 else " — |"
        lines.append(f"| {k} | " + " | ".join(cells) + " |" + z)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    script: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offsets", type=int, nargs="+", default=[0, 100_000])
    ap.add_argument("--raw", type=Path, nargs="+", default=None,
                    help="summarise saved --raw-out files instead of running a script")
    ap.add_argument("--match", default=None, help="regular expression on the quantity labels")
    args = ap.parse_args(argv)
    if args.raw:
        sets = [json.loads(p.read_text()) for p in args.raw]
        names = [p.stem for p in args.raw]
    elif script:
        with tempfile.TemporaryDirectory() as tmp:
            sets = [run(script, off, Path(tmp)) for off in args.offsets]
        names = [f"offset {off}" for off in args.offsets]
    else:
        ap.error("give a script after '--' or --raw FILES")
    print(report(sets, names, args.match))
    return 0


if __name__ == "__main__":
    sys.exit(main())
