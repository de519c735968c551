"""Per-release overhead of the PostgreSQL ledger against the file ledger (issue 15).

    nice -n 19 python benchmarks/ledger_overhead.py                       # the defaults below
    nice -n 19 python benchmarks/ledger_overhead.py --history 10 1000 --reps 40 --cli-reps 12

Starts a throwaway PostgreSQL cluster (``cli_tests/pg_server.py``: initdb + pg_ctl in a temporary
directory, fsync off, every commit still waiting for its WAL write) that listens on a Unix socket
and on 127.0.0.1 at a free port, so the database is reached both ways a job would.

1. **Ledger operations of one release, in-process**: a new ``Ledger(location)``, ``state()`` (the
   plan check before any row is read: connect, read and verify the whole ledger) and ``charge()``
   (connect, lock, read and verify again, re-check the cap, append, commit), on a ledger already
   holding H releases (``--history``; each store gets the same copy, made with ``ledger import``,
   and grows by ``--reps`` during the run). Stores interleaved: file, socket, TCP, file, ...
2. **The whole CLI**: ``python -m dpcausal owl --spec configs/owl.yaml --quiet --ledger L --out D``
   (a copy of the example spec whose budget allows every run), ``--cli-reps`` interleaved rounds,
   on 10-release ledgers. Interpreter start-up, imports and the fit dominate both.
3. **The driver's import**, which only a database ledger pays: ``python -c "import dpcausal.cli"``
   against ``python -c "import dpcausal.cli, psycopg"``, ``--cli-reps`` interleaved rounds.

Reported: median, 10th-90th percentile and min-max of the per-release wall time, and the median
difference to the file ledger. The machine is shared (2 cores): the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli_tests.pg_server import Cluster, bin_dir  # noqa: E402
from dpcausal.accounting.budget import Budget  # noqa: E402
from dpcausal.accounting.events import PrivacyEvent  # noqa: E402
from dpcausal.accounting.ledger import Ledger  # noqa: E402
from dpcausal.accounting.ledger_copy import copy_ledger  # noqa: E402
from dpcausal.accounting.plan import PrivacyPlan  # noqa: E402
from dpcausal.accounting.receipt import build_receipt  # noqa: E402

CAP = Budget(1e9)
STORES = ("file", "pg-socket", "pg-tcp")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_release(location: str) -> float:
    """Seconds for what a release does to its ledger: plan check, then the charge."""
    ev = PrivacyEvent("laplace", "bench", 0.001, 0.0, 1.0, "l1", 1000.0)
    plan = PrivacyPlan("bench", (ev,), {"relation": "replace-one"}, "pure", True)
    receipt = build_receipt(plan, spec_sha256="0" * 64, outputs={"out.csv": "0" * 64},
                            seeded_noise=False, dataset="bench")
    start = time.perf_counter()
    ledger = Ledger(location)
    Ledger.check(ledger.state("bench", plan.cost, CAP))
    ledger.charge(receipt, dataset="bench", spec_cap=CAP, requested=plan.cost)
    return time.perf_counter() - start


def make_history(path: Path, releases: int) -> None:
    """A file ledger holding ``releases`` releases (charged through the real policy)."""
    Ledger(path).init(dataset="bench", cap=CAP)
    for _ in range(releases):
        one_release(str(path))


def new_database(cluster: Cluster, name: str) -> None:
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def stores_with_history(cluster: Cluster, work: Path, history: int, tag: str) -> dict[str, str]:
    """Three copies of one ledger of ``history`` releases: a file and two databases."""
    src = work / f"src-{tag}.jsonl"
    make_history(src, history)
    os.environ["DPCAUSAL_LEDGER_KEY_FILE"] = str(src) + ".key"  # the databases share its key
    out = {"file": str(work / f"file-{tag}.jsonl")}
    copy_ledger(src, out["file"])
    for store, tcp in (("pg-socket", False), ("pg-tcp", True)):
        name = f"bench_{store.replace('-', '_')}_{tag}"
        new_database(cluster, name)
        out[store] = cluster.url(name, tcp=tcp)
        copy_ledger(src, out[store])
    return out


def interleaved(locations: dict[str, str], reps: int,
                measure: Callable[[str, str], float]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {s: [] for s in locations}
    for _ in range(reps):
        for store, loc in locations.items():
            times[store].append(measure(store, loc))
    return times


def child_cpu() -> float:
    """CPU seconds (user + system) of every child process that has ended so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def report(title: str, times: dict[str, list[float]]) -> None:
    print(f"\n{title}  (load average {os.getloadavg()[0]:.1f})")
    print("| ledger | median | p10–p90 | min–max | median − file |")
    print("|---|---|---|---|---|")
    base = float(np.median(times["file"]))
    for store, t in times.items():
        a = np.asarray(t) * 1000
        p10, p90 = np.percentile(a, [10, 90])
        print(f"| {store} | {np.median(a):.1f} ms | {p10:.1f}–{p90:.1f} ms | "
              f"{a.min():.1f}–{a.max():.1f} ms | {np.median(a) - base * 1000:+.1f} ms |")


def cli_spec(work: Path) -> Path:
    doc = yaml.safe_load((REPO / "configs" / "owl.yaml").read_text())  # run from REPO
    doc["ledger"] = {"path": "unused.jsonl", "dataset": "bench", "budget": {"epsilon": 1e9}}
    path = work / "owl-bench.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--history", type=int, nargs="*", default=[10, 1000])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--cli-reps", type=int, default=12)
    args = parser.parse_args()
    bins = bin_dir()
    if bins is None:
        sys.exit("no PostgreSQL binaries (initdb): apt-get install postgresql")
    work = Path(tempfile.mkdtemp(prefix="dpcausal-ledger-bench-"))
    cluster = Cluster(bins)
    try:
        cluster.start(tcp_port=free_port())
        for history in args.history:
            locations = stores_with_history(cluster, work, history, f"ops{history}")
            times = interleaved(locations, args.reps, lambda _, loc: one_release(loc))
            report(f"ledger operations of one release, history {history} releases, "
                   f"{args.reps} releases per store", times)
        if args.cli_reps:
            spec = cli_spec(work)
            locations = stores_with_history(cluster, work, 10, "cli")
            env = {**os.environ, "CI": "true"}

            cpu: dict[str, list[float]] = {s: [] for s in locations}

            def run_cli(store: str, loc: str) -> float:
                start, cpu0 = time.perf_counter(), child_cpu()
                subprocess.run([sys.executable, "-m", "dpcausal", "owl", "--spec", str(spec),
                                "--quiet", "--ledger", loc, "--out", str(work / f"out-{store}")],
                               check=True, env=env, cwd=REPO)
                cpu[store].append(child_cpu() - cpu0)
                return time.perf_counter() - start

            report(f"whole CLI release (dpcausal owl on configs/owl.yaml's data), wall time, "
                   f"{args.cli_reps} runs per store", interleaved(locations, args.cli_reps, run_cli))
            report("the same runs, CPU time (user + system) of the dpcausal process", cpu)

            def run_import(_: str, modules: str) -> float:
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", f"import {modules}"], check=True, cwd=REPO)
                return time.perf_counter() - start

            report(f"import only, {args.cli_reps} runs each (file: without the driver)",
                   interleaved({"file": "dpcausal.cli", "pg (psycopg)": "dpcausal.cli, psycopg"},
                               args.cli_reps, run_import))
    finally:
        cluster.remove()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
