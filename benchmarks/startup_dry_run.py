"""Start-up of every release command: ``dpcausal <command> --spec configs/<command>.yaml --dry-run``
on the sample data, whole processes, interleaved (issue 24).

    python benchmarks/startup_dry_run.py [--reps 20] [--before DIR] [--commands owl cate ...]

Run it from the repository root. The children run in a temporary directory holding links to
``configs/`` and ``sample_data/`` and no ``dpcausal/`` (``python -m`` puts the current directory
first on ``sys.path``, ahead of ``PYTHONPATH``): "after" is the installed (editable) package, and
with ``--before DIR`` "before" is the tree in DIR put on ``PYTHONPATH`` (e.g. ``git archive
<commit> dpcausal | tar -x -C DIR``), run right after "after" for each command. Each repetition
runs every command once, in turn, after one warm-up run of each that writes the bytecode caches. Wall time is measured around the child; CPU time (user + system) from
``os.wait4``. Prints a Markdown table: median and interquartile range [q1, q3] of each, and with
``--before`` the median of the paired after/before CPU ratios.

Bytecode caching is on in the children (``PYTHONDONTWRITEBYTECODE`` is removed from their
environment): with it off every run compiles dpcausal's ~150 modules again (~0.1 CPU-s), which a
user's installed copy never does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = ("select-policy", "cate", "synth-control", "owl", "two-stage")


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one child process; raises if it fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(q1, median, q3)."""
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def fmt(xs: list[float]) -> str:
    q1, med, q3 = quartiles(xs)
    return f"{med:.3f} [{q1:.3f}, {q3:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--before", type=Path, default=None)
    ap.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=COMMANDS)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    variants = {"after": env}
    if args.before is not None:
        variants["before"] = {**env, "PYTHONPATH": str(args.before.resolve())}
    results: dict[tuple[str, str], tuple[list[float], list[float]]] = {
        (c, v): ([], []) for c in args.commands for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("configs", "sample_data"):
            (Path(tmp) / name).symlink_to(Path(name).resolve())
        os.chdir(tmp)

        def argv(command: str) -> list[str]:
            return [sys.executable, "-m", "dpcausal", command, "--spec",
                    f"configs/{command.replace('-', '_')}.yaml", "--dry-run", "--quiet",
                    "--ledger", str(Path(tmp) / "ledger.jsonl")]

        for command in args.commands:  # warm-up: bytecode caches, file cache
            for venv in variants.values():
                run(argv(command), venv)
        load = os.getloadavg()[0]
        for rep in range(args.reps):
            for command in args.commands:
                for name, venv in variants.items():
                    wall, cpu = run(argv(command), venv)
                    results[command, name][0].append(wall)
                    results[command, name][1].append(cpu)
            print(f"repetition {rep + 1}: " + ", ".join(
                f"{c} {results[c, 'after'][1][-1]:.2f}" for c in args.commands), file=sys.stderr,
                flush=True)
    print(f"{args.reps} interleaved repetitions; 1-minute load average {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end\n")
    head = "| command | variant | wall s, median [q1, q3] | CPU s, median [q1, q3] |"
    if args.before is not None:
        head += " after/before CPU (paired median) |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for command in args.commands:
        for name in variants:
            wall, cpu = results[command, name]
            row = f"| {command} | {name} | {fmt(wall)} | {fmt(cpu)} |"
            if args.before is not None:
                ratio = ""
                if name == "after":
                    ratios = [a / b for a, b in zip(cpu, results[command, "before"][1],
                                                    strict=True)]
                    ratio = f"**{statistics.median(ratios):.2f}**"
                row += f" {ratio} |"
            print(row)


if __name__ == "__main__":
    main()
