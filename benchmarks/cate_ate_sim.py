"""Coverage and width of cate's ATE interval on simulations with a known ATE (issue #19).

    python benchmarks/cate_ate_sim.py --kind nhefs --eps 1 5 --reps 500
    python benchmarks/cate_ate_sim.py --kind nsw --eps 1 5 --reps 500 --ate '{"propensity": 0.4157}'
    python benchmarks/cate_ate_sim.py --kind nhefs-skewed --eps 5 --reps 500 --ate '{"residual_clip": 24}'

Each repetition draws a fresh data set (``cate_ate_dgp``), runs the CLI's own plan and release
in process (``cate.estimand: ate``; the noise from a test seed, the split and folds secret as in
the CLI) and records whether the released total interval covers the population ATE, its
half-width, and the same for the non-private AIPW a practitioner would compute on the same data
(unpenalised logistic propensity and per-arm least squares on the raw covariates, propensity
clipped at the same ζ, interval ±z·sd(scores)/√n). Prints, per ε: coverage ± its binomial SE,
mean half-width, the ratio of mean half-widths, the estimate's bias and sd, and the same
for the reference.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import special
from sklearn.linear_model import LinearRegression, LogisticRegression

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cate_ate_dgp import (
    NHEFS_BOUNDS,
    NHEFS_COVARIATES,
    NHEFS_OUTCOME,
    NSW_BOUNDS,
    NSW_COVARIATES,
    NSW_OUTCOME,
    SIZES,
    draw,
    true_ate,
)

from dpcausal.commands.cate.method import plan, run
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.mechanisms import NoiseGuard

SHAPES = {"nhefs": (NHEFS_COVARIATES, NHEFS_BOUNDS, NHEFS_OUTCOME, 1e-6),
          "nsw": (NSW_COVARIATES, NSW_BOUNDS, NSW_OUTCOME, 1e-4),
          "nhefs-t3": (NHEFS_COVARIATES, NHEFS_BOUNDS, NHEFS_OUTCOME, 1e-6),
          "nhefs-skewed": (NHEFS_COVARIATES, NHEFS_BOUNDS, NHEFS_OUTCOME, 1e-6)}


def make_spec(kind: str, eps: float, ate: dict[str, Any], cate: dict[str, Any] | None = None
              ) -> CateSpec:
    """The spec a practitioner would write for the simulation ``kind``."""
    cov, bounds, y_bounds, delta = SHAPES[kind]
    return CateSpec.model_validate({
        "data": {"path": f"{kind}.csv",
                 "columns": {"outcome": "Y", "treatment": "A", "covariates": cov}},
        "bounds": {"outcome": list(y_bounds), "covariates": bounds},
        "privacy": {"epsilon": eps, "delta": delta},
        "cate": {"estimand": "ate", "ate": ate, **(cate or {})}})


def release(spec: CateSpec, frame: pd.DataFrame, noise_seed: int) -> dict[str, Any]:
    """ate.json of one in-process release (the CLI's plan and run)."""
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    guard = NoiseGuard(pl, test_seed=noise_seed)
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0), noise=guard)
    guard.check_all_drawn()
    doc: dict[str, Any] = rel.documents["ate.json"]
    return doc


def reference_aipw(frame: pd.DataFrame, cov: list[str], zeta: float, alpha: float,
                   propensity: float | None = None) -> tuple[float, float]:
    """(estimate, half-width) of the standard non-private AIPW: unpenalised logistic propensity
    (or the known one) clipped to [ζ, 1 − ζ], per-arm least squares, ±z·sd/√n."""
    x = frame[cov].to_numpy(dtype=float)
    x = (x - x.mean(axis=0)) / x.std(axis=0)  # the unpenalised fits are affine-invariant; lbfgs
    a = frame["A"].to_numpy(dtype=float)        # converges in a few steps on standardised columns
    y = frame["Y"].to_numpy(dtype=float)
    if propensity is None:
        lr = LogisticRegression(C=np.inf, max_iter=10_000, tol=1e-10).fit(x, a)
        e = np.clip(lr.predict_proba(x)[:, 1], zeta, 1 - zeta)
    else:
        e = np.full(len(a), propensity)
    mu = [LinearRegression().fit(x[a == arm], y[a == arm]).predict(x) for arm in (0, 1)]
    psi = mu[1] - mu[0] + a * (y - mu[1]) / e - (1 - a) * (y - mu[0]) / (1 - e)
    z = float(special.ndtri(1 - alpha / 2))
    return float(psi.mean()), z * float(psi.std(ddof=1)) / math.sqrt(len(psi))


def simulate(kind: str, eps: float, reps: int, ate: dict[str, Any], seed: int,
             cate: dict[str, Any] | None = None) -> dict[str, list[float]]:
    """Per-repetition records of the release and the reference."""
    spec = make_spec(kind, eps, ate, cate)
    truth = true_ate(kind)
    cov = SHAPES[kind][0]
    out: dict[str, list[float]] = {k: [] for k in ("est", "lo", "hi", "noise_h", "ref_est",
                                                   "ref_h")}
    for r in range(reps):
        frame = draw(kind, SIZES[kind], np.random.default_rng(seed + r))
        doc = release(spec, frame, noise_seed=seed + 10**6 + r)
        t = doc["total_interval"]
        out["est"].append(doc["estimate"])
        out["lo"].append(t["lo"])
        out["hi"].append(t["hi"])
        out["noise_h"].append((doc["interval"]["hi"] - doc["interval"]["lo"]) / 2)
        est, h = reference_aipw(frame, cov, spec.cate.kappa, spec.accuracy.alpha,
                                ate.get("propensity"))
        out["ref_est"].append(est)
        out["ref_h"].append(h)
    out["truth"] = [truth]
    return out


def score_noise_sd(rec: dict[str, list[float]], alpha: float = 0.05) -> float:
    """The sd of the score stage's Laplace noise, sqrt(mean 2b²), from the noise-only intervals
    (b·ln(1/α) for the ATE without a released denominator): the part of the estimate's spread
    the interval models as privacy noise, next to the sampling sd and the nuisance models'
    noise (which the interval does not model)."""
    b = np.asarray(rec["noise_h"]) / math.log(1.0 / alpha)
    return float(math.sqrt(np.mean(2.0 * b * b)))


def summary(rec: dict[str, list[float]]) -> dict[str, float]:
    """Coverage (and its SE), mean half-width, ratio, bias, sd, for the release and reference."""
    truth = rec["truth"][0]
    est, lo, hi = (np.asarray(rec[k]) for k in ("est", "lo", "hi"))
    ref, ref_h = np.asarray(rec["ref_est"]), np.asarray(rec["ref_h"])
    n = len(est)
    cover = float(np.mean((lo <= truth) & (truth <= hi)))
    ref_cover = float(np.mean(np.abs(ref - truth) <= ref_h))
    half = (hi - lo) / 2
    return {"reps": n, "coverage": cover, "coverage_se": math.sqrt(cover * (1 - cover) / n),
            "halfwidth": float(half.mean()), "halfwidth_se": float(half.std(ddof=1) / math.sqrt(n)),
            "ref_halfwidth": float(ref_h.mean()), "ratio": float(half.mean() / ref_h.mean()),
            "bias": float(est.mean() - truth), "sd": float(est.std(ddof=1)),
            "score_noise_sd": score_noise_sd(rec),
            "ref_coverage": ref_cover, "ref_bias": float(ref.mean() - truth),
            "ref_sd": float(ref.std(ddof=1)),
            "mean_abs_diff_vs_ref": float(np.mean(np.abs(est - ref))),
            "max_abs_diff_vs_ref": float(np.max(np.abs(est - ref)))}


def main() -> None:
    """Run the simulation and print (and optionally save) the summaries."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=sorted(SHAPES), default="nhefs")
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 5.0])
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--ate", type=json.loads, default={}, help="the cate.ate section (JSON)")
    ap.add_argument("--cate", type=json.loads, default={},
                    help="other cate fields (JSON), e.g. the nuisance section")
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--raw-out", type=Path, default=None)
    args = ap.parse_args()
    raw: dict[str, Any] = {}
    for eps in args.eps:
        t0 = time.time()
        rec = simulate(args.kind, eps, args.reps, args.ate, 20261126 + args.seed_offset,
                       args.cate)
        s = summary(rec)
        raw[f"eps={eps:g}"] = rec
        print(f"{args.kind} ε={eps:g} {json.dumps(args.ate)} {json.dumps(args.cate)}: " + ", ".join(
            f"{k} {v:.4g}" for k, v in s.items()) + f" ({time.time() - t0:.0f} s)", flush=True)
    if args.raw_out is not None:
        args.raw_out.write_text(json.dumps(raw))


if __name__ == "__main__":
    main()
