"""Every command beside the non-private peer a user would run, at 10⁴, 10⁵ and 10⁶ rows (issue #24).

    nice -n 19 python benchmarks/peers.py                      # 3 sizes × 5 commands, 3 pairs each
    python benchmarks/peers.py --sizes 10000 --pairs 2         # a quick look

For each command and size it writes, in a temporary directory, a Parquet file of that many rows
(the shipped sample file of the command's example spec resampled with replacement; synth-control: a
factor-model panel of 100 periods and n/100 units) and the example spec pointed at it (no ledger,
no figure, no ``apply_to``; cate with ``features: rff``, the only kernel path that reaches 10⁶).
Then it runs, A B A B … with the order alternating pair by pair, two whole processes under
``/usr/bin/time -v``:

* ours: ``dpcausal <command> --spec S --quiet`` (start-up, plan, read, fit, noise, write the
  release and its receipt);
* the peer: a standalone script importing only numpy, pandas and scikit-learn that reads the same
  Parquet columns and fits the non-private model of the same family, writing its result as JSON:
  owl — ``LogisticRegression(sample_weight=outcome weight)``; two-stage — the same with the inverse
  known-propensity weights; select-policy — ``Ridge`` per arm and ``LogisticRegression`` on half the
  rows, then every policy's doubly robust value on the other half, vectorised in numpy; cate — the
  same nuisances, DR pseudo-outcomes, then ``RBFSampler`` + ``Ridge`` evaluated on the spec's 101
  grid points (the number of features: below); synth-control — the panel pivoted wide and a
  ``Ridge`` of the target's pre-period on every donor (ridge synthetic control).

cate's peer has as many features as ours (``--cate-peer-components``, default 2·``rff_dim`` =
1,000; issue 24). Ours draws ``rff_dim`` = 500 frequencies and uses cos AND sin of each: 1,000
features, so a 1,000-weight ridge whose Gram is 1,000 × 1,000; scikit-learn's
``RBFSampler(n_components=k)`` draws k frequencies with random phases and uses one cosine of each:
k features. Until issue 24 the peer used ``n_components=500`` ("500 features, as ours"), i.e. half
our feature dimension and a quarter of our Gram work per row: a cheaper model, not the same one.
Both are Monte-Carlo approximations of the same Gaussian kernel; the matched peer fits a model of
the same size as ours (``--cate-peer-components 500`` runs the former one).

Printed: a Markdown table with, per cell, each side's median CPU (user + sys) and wall seconds and
the median (min–max) of the pair-by-pair ratios ours / peer. The objectives differ in their details
(privacy clipping, losses, solvers), so this compares cost for the same task, not answers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from owl_speed import cpu_seconds, load_average  # noqa: E402  (/usr/bin/time -v parsing)

PERIODS = 100
"""synth-control panels: periods per unit (n rows = units × PERIODS)."""

PEER_HEAD = """
import json, sys
import numpy as np, pandas as pd
a = json.loads(sys.argv[1])
df = pd.read_parquet(a["data"], columns=a["columns"])
"""

DR_NUISANCES = """
from sklearn.linear_model import LogisticRegression, Ridge
x = np.clip(df[a["covs"]].to_numpy(float), *a["cov_bounds"])
y = np.clip(df[a["y"]].to_numpy(float), *a["y_bounds"])
t = df[a["t"]].to_numpy() == 1
perm = np.random.default_rng(0).permutation(len(df))
tr, sc = perm[: len(df) // 2], perm[len(df) // 2:]
mu = [Ridge(alpha=1.0).fit(x[tr][t[tr] == arm], y[tr][t[tr] == arm]) for arm in (0, 1)]
ps = LogisticRegression(max_iter=1000).fit(x[tr], t[tr])
xs, ys, ts = x[sc], y[sc], t[sc]
mu0, mu1 = mu[0].predict(xs), mu[1].predict(xs)
"""
"""The doubly robust peers' nuisances: ridge per arm and a logistic propensity on half the rows."""

PEERS = {
    "owl": """
from sklearn.linear_model import LogisticRegression
x = np.clip(df[a["covs"]].to_numpy(float), *a["cov_bounds"])
w = (np.clip(df[a["y"]].to_numpy(float), *a["y_bounds"]) - a["y_bounds"][0]) / 0.5
clf = LogisticRegression(max_iter=1000).fit(x, df[a["t"]].to_numpy(), sample_weight=w)
result = clf.coef_.ravel().tolist()
""",
    "two-stage": """
from sklearn.linear_model import LogisticRegression
x = np.clip(df[a["covs"]].to_numpy(float), *a["cov_bounds"])
e = 1 / (1 + np.exp(-(0.05 + 0.3 * x[:, 0] - 0.5 * x[:, 1])))
t = df[a["t"]].to_numpy() == 1
w = (np.clip(df[a["y"]].to_numpy(float), *a["y_bounds"]) - a["y_bounds"][0]) / np.where(t, e, 1 - e)
clf = LogisticRegression(max_iter=1000).fit(x, t, sample_weight=w)
result = clf.coef_.ravel().tolist()
""",
    "select-policy": DR_NUISANCES + """
e1 = np.clip(ps.predict_proba(xs)[:, 1], 0.1, 0.9)
col = {c: j for j, c in enumerate(a["covs"])}
decisions = []
for p in a["policies"]:
    if p["type"] == "constant":
        d = np.full(len(xs), p["treat"])
    elif p["type"] == "threshold":
        v = xs[:, col[p["covariate"]]]
        d = v >= p["threshold"] if p["op"] == ">=" else v < p["threshold"]
    else:
        s = sum(xs[:, col[c]] * w for c, w in p["weights"].items()) + p["intercept"]
        d = s >= 0
    decisions.append(d)
pi = np.column_stack(decisions)
m = np.where(pi, mu1[:, None], mu0[:, None])
e = np.where(pi, e1[:, None], 1 - e1[:, None])
psi = m + (ts[:, None] == pi) / e * (ys[:, None] - m)
result = int(np.argmax(psi.mean(axis=0)))
""",
    "cate": DR_NUISANCES + """
from sklearn.kernel_approximation import RBFSampler
e = np.clip(ps.predict_proba(xs)[:, 1], 0.05, 0.95)
pseudo = mu1 - mu0 + ts / e * (ys - mu1) - (1 - ts) / (1 - e) * (ys - mu0)
rff = RBFSampler(gamma=0.5 / a["bandwidth"] ** 2, n_components=a["components"],
                 random_state=0).fit(xs)
final = Ridge(alpha=1.0).fit(rff.transform(xs), pseudo)
grid = np.full((101, x.shape[1]), 0.5)
grid[:, 0] = np.linspace(*a["cov_bounds"], 101)
result = final.predict(rff.transform(grid)).tolist()
""",
    "synth-control": """
from sklearn.linear_model import Ridge
wide = df.pivot(index="time", columns="unit", values="value")
pre = wide.index < a["t0"]
donors = wide.drop(columns="target").to_numpy()
model = Ridge(alpha=1.0, fit_intercept=False).fit(donors[pre], wide["target"].to_numpy()[pre])
result = model.predict(donors[~pre]).tolist()
""",
}

PEER_TAIL = """
with open(a["out"], "w") as f:
    json.dump({"result": result}, f)
"""


def _example(command: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "configs" / f"{command.replace('-', '_')}.yaml").read_text())


def _resampled(doc: dict[str, Any], n: int, path: Path) -> None:
    """The example's sample file resampled with replacement to n rows, as Parquet."""
    frame = pd.read_csv(REPO / doc["data"]["path"])
    rows = np.random.default_rng(n).integers(0, len(frame), n)
    frame.iloc[rows].reset_index(drop=True).to_parquet(path)


def _panel(n: int, path: Path) -> None:
    """A factor-model panel of n rows: n // PERIODS − 1 donors and the target, PERIODS periods."""
    rng = np.random.default_rng(n)
    units = n // PERIODS
    t = np.linspace(0, 1, PERIODS)
    factors = np.vstack([np.ones(PERIODS), t, np.sin(6 * t)])
    load = rng.uniform([30, -10, -5], [70, 10, 5], size=(units, 3))
    vals = np.clip(load @ factors + rng.normal(0, 1.0, (units, PERIODS)), 0, 100)
    names = ["target", *[f"d{i:05d}" for i in range(units - 1)]]
    pd.DataFrame({"unit": np.repeat(names, PERIODS), "time": np.tile(np.arange(PERIODS), units),
                  "value": vals.ravel()}).to_parquet(path)


def _library(covs: list[str]) -> list[dict[str, Any]]:
    """A public 20-policy library over the first covariates (the peer evaluates it in numpy)."""
    out: list[dict[str, Any]] = [{"name": "all", "type": "constant", "treat": True},
                                 {"name": "none", "type": "constant", "treat": False}]
    for c in covs[:8]:
        out += [{"name": f"{c}-hi", "type": "threshold", "covariate": c, "op": ">=",
                 "threshold": 0.0},
                {"name": f"{c}-lo", "type": "threshold", "covariate": c, "op": "<",
                 "threshold": 0.0}]
    out += [{"name": f"lin{k}", "type": "linear", "intercept": 0.0,
             "weights": {c: float(w) for c, w in
                         zip(covs, np.linspace(-1, 1, len(covs))[::s], strict=True)}}
            for k, s in enumerate((1, -1))]
    return out


def setup(command: str, n: int, tmp: Path,
          cate_components: int | None = None) -> tuple[Path, dict[str, Any]]:
    """Write the data and the spec of one cell; return the spec path and the peer's arguments."""
    doc = _example(command)
    section = command.replace("-", "_")
    data = tmp / "data.parquet"
    doc.pop("ledger", None)
    doc["output"] = {"dir": str(tmp / "ours")}
    doc[section]["plot"] = False
    doc[section].pop("apply_to", None)
    cols = doc["data"]["columns"]
    if command == "synth-control":
        _panel(n, data)
        doc["data"] = {"path": str(data), "columns": {"unit": "unit", "time": "time",
                                                       "outcome": "value"}}
        doc["bounds"] = {"outcome": [0.0, 100.0]}
        doc[section].update(target="target", treatment_time=70)
        peer = {"columns": ["unit", "time", "value"], "t0": 70}
    else:
        _resampled(doc, n, data)
        doc["data"]["path"] = str(data)
        peer = {"columns": [*cols["covariates"], cols["outcome"], cols["treatment"]],
                "covs": cols["covariates"], "y": cols["outcome"], "t": cols["treatment"],
                "y_bounds": doc["bounds"]["outcome"], "cov_bounds": doc["bounds"]["covariates"]}
    if command == "select-policy":
        library = tmp / "library.yaml"
        peer["policies"] = _library(cols["covariates"])
        library.write_text(yaml.safe_dump({"name": "bench", "policies": peer["policies"]}))
        doc[section]["library"] = {"path": str(library)}
    if command == "cate":
        doc[section]["features"] = "rff"
        doc["privacy"]["delta"] = min(doc["privacy"]["delta"], 0.1 / n)  # δ < 1/n at every size
        peer["bandwidth"] = doc[section]["bandwidth"]
        features = 2 * int(doc[section].get("rff_dim", 500))  # cos and sin of each frequency
        peer["components"] = features if cate_components is None else cate_components
    spec = tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    peer.update(data=str(data), out=str(tmp / "peer.json"))
    return spec, peer


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU user + sys) seconds of one whole process under /usr/bin/time -v."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} … failed ({proc.returncode}):\n"
                         f"{proc.stderr[-2000:]}")
    return wall, cpu_seconds(proc.stderr)


def cell(command: str, n: int, pairs: int,
         cate_components: int | None = None) -> dict[str, list[float]]:
    """Interleaved pairs of one (command, size): walls and CPUs of each side."""
    runs: dict[str, list[float]] = {k: [] for k in ("ours_wall", "ours_cpu", "peer_wall",
                                                    "peer_cpu")}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        spec, peer = setup(command, n, tmp, cate_components)
        script = tmp / "peer.py"
        script.write_text(PEER_HEAD + PEERS[command] + PEER_TAIL)
        sides: dict[str, Callable[[], tuple[float, float]]] = {
            "ours": lambda: timed(["dpcausal", command, "--spec", str(spec), "--quiet"]),
            "peer": lambda: timed([sys.executable, str(script), json.dumps(peer)]),
        }
        sides["ours"]()  # warm-up: file caches, byte-compiled modules
        sides["peer"]()
        for k in range(pairs):
            for side in (("ours", "peer") if k % 2 == 0 else ("peer", "ours")):
                wall, cpu = sides[side]()
                runs[f"{side}_wall"].append(wall)
                runs[f"{side}_cpu"].append(cpu)
    return runs


def _ratio(ours: list[float], peer: list[float]) -> str:
    r = [a / b for a, b in zip(ours, peer, strict=True)]
    return f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--commands", nargs="+", default=list(PEERS), choices=list(PEERS))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--cate-peer-components", type=int, default=None,
                    help="RBFSampler features of cate's peer (default: 2·rff_dim, ours)")
    args = ap.parse_args()
    print(f"load average at start {load_average()} on {os.cpu_count()} cores; {args.pairs} "
          "interleaved pairs per cell after one warm-up each")
    print("| command | rows | ours CPU s | peer CPU s | ours wall s | peer wall s | CPU ratio "
          "median (min–max) | wall ratio median (min–max) |")
    print("|---|---|---|---|---|---|---|---|")
    for command in args.commands:
        for n in args.sizes:
            r = cell(command, n, args.pairs, args.cate_peer_components)
            med = {k: statistics.median(v) for k, v in r.items()}
            print(f"| {command} | {n:,} | {med['ours_cpu']:.2f} | {med['peer_cpu']:.2f} | "
                  f"{med['ours_wall']:.2f} | {med['peer_wall']:.2f} | "
                  f"{_ratio(r['ours_cpu'], r['peer_cpu'])} | "
                  f"{_ratio(r['ours_wall'], r['peer_wall'])} |", flush=True)
    print(f"load average at end {load_average()}")


if __name__ == "__main__":
    main()
