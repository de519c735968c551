"""synth-control ``method: capped`` on panels shaped like the classic studies (issue #18, #16, #17).

    nice -n 19 python benchmarks/synth_control_estimand.py            # markdown tables
    nice -n 19 python benchmarks/synth_control_estimand.py --reps 200 --seed 1 --json out.json

Panels: ``benchmarks/synth_control_panels.py`` (Basque-, West-Germany-, Texas- and California-
shaped, 4 matching donors). Each repetition draws a new panel and one release of each estimator.

The releases use the production code: the clipped panel, the donor choice and the noiseless values
come from ``dpcausal.commands.synth_control.capped`` (``prepare``, ``nearest``,
``released_values``), the noise from the very mechanism objects the plan builds
(``capped_plan.mechanisms_of``), drawn with a seeded generator. DPSC_out ("today's" default:
λ = T0, tight Δ, step 2 auto, ε1 = ε2 = ε/2) is scored by its exact expected squared error over the
noise (spec §5.5, ``dpsc.expected_sq_error``) at the plan's noise scales.

Reported (mean ± standard error over the repetitions, or medians):
1. ε = 5, replace-one donor: the share of releases whose average post effect is within the
   target's post-period spread (the standard deviation of its observed post values) of the
   non-private estimate of the same estimator; and the path's RMSE over the post periods, in
   spreads, beside DPSC_out's.
2. ε = 10⁹: the released average effect against two standard non-private estimators on the same
   panel — the capped-simplex least-squares fit (w ≥ 0, Σw = 1, w ≤ 1/k, by cvxpy) and the simplex
   synthetic control (Abadie: no cap) — and against the true effect, in spreads.
3. DPSC_out at ε = 10⁹: the default ``lambda: total`` against cross-validated ridge (scikit-learn
   RidgeCV) and the former λ = T0, against the true effect.
4. ``privacy_unit: individual`` at ε = 1 with realistic public contribution bounds and minimum cell
   populations: the share of releases within 5 % of the spread of the non-private estimate.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import cvxpy as cp
import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from synth_control_panels import SHAPES, Panel, Shape, simulate

from dpcausal.commands.synth_control import capped, dpsc
from dpcausal.commands.synth_control.capped_plan import mechanisms_of, scales_of
from dpcausal.commands.synth_control.layout import build_layout
from dpcausal.commands.synth_control.method import METHOD
from dpcausal.commands.synth_control.panel import OutcomeMap
from dpcausal.commands.synth_control.spec import SynthControlSpec

INDIVIDUAL = {  # (contribution, minimum population): public bounds a curator could defend
    "basque": (1000.0, 300_000.0),        # ≤ $1M a year per person (thousand $), ≥ 300k people
    "germany": (1_000_000.0, 3_000_000.0),  # ≤ $1M per person, ≥ 3M people per country
    "texas": (1.0, 1.0),                  # counts: one person is one prisoner
    "california": (3650.0, 400_000.0),    # ≤ 10 packs a day per person, ≥ 400k per state
}


def structure(shape: Shape) -> pd.DataFrame:
    units = ["T", *[f"D{i}" for i in range(shape.n)]]
    periods = shape.t0 + shape.h
    return pd.DataFrame({"unit": np.repeat(units, periods), "time": np.tile(np.arange(periods),
                                                                             shape.n + 1)})


def spec_for(shape: Shape, epsilon: float, **section: Any) -> SynthControlSpec:
    return SynthControlSpec.model_validate({
        "data": {"path": "panel.csv", "columns": {"unit": "unit", "time": "time", "outcome": "y"}},
        "bounds": {"outcome": [shape.lo, shape.hi]}, "privacy": {"epsilon": epsilon},
        "synth_control": {"target": "T", "treatment_time": shape.t0, **section}})


def capped_release(spec: SynthControlSpec, layout: Any, panel: Panel,
                   rng: np.random.Generator) -> dict[str, Any]:
    """One release (noised values) and the same estimator without noise."""
    sec = spec.synth_control
    mechs = mechanisms_of(spec, layout)
    prep = capped.prepare(panel.x, panel.y, scales_of(spec, layout), panel.t0)
    slices = capped.block_slices(layout.h, sec.releases.path_blocks)
    exact = capped.released_values(prep, capped.nearest(prep.d, sec.k), sec.k, panel.t0, slices)
    chosen = (capped.nearest(prep.d, sec.k) if mechs.choice is None
              else mechs.choice.release(-prep.d, rng=rng))
    vals = capped.released_values(prep, chosen, sec.k, panel.t0, slices)
    mean_y = float(np.mean(panel.y[panel.t0:]))
    avg = mean_y - float(mechs.average.release(vals[capped.STAGE_AVERAGE], rng=rng)[0])
    out = {"avg": avg, "avg_exact": mean_y - float(exact[capped.STAGE_AVERAGE][0])}
    if mechs.path is not None:
        path = mechs.path.release(vals[capped.STAGE_PATH], rng=rng)
        per = np.concatenate([np.full(s.stop - s.start, path[i]) for i, s in enumerate(slices)])
        cf_exact = capped.counterfactual(prep.xc, capped.nearest(prep.d, sec.k), sec.k)[panel.t0:]
        out["path_rmse"] = float(np.sqrt(np.mean((per - cf_exact) ** 2)))
        out["path_rmse_truth"] = float(np.sqrt(np.mean((per - panel.y0[panel.t0:]) ** 2)))
    return out


def dpsc_out_rmse(shape: Shape, panel: Panel, epsilon: float, lam: str) -> tuple[float, float]:
    """DPSC_out's exact RMSE over the noise against its own non-private path, and against the
    true untreated path (bias² + noise), outcome units."""
    spec = spec_for(shape, epsilon, **{"lambda": lam})
    frame = structure(shape)
    plan = METHOD.plan(spec, len(frame), {"panel": frame}, rng=np.random.default_rng(0))
    omap = OutcomeMap.from_spec(spec)
    x, y = omap.forward(panel.x), omap.forward(panel.y)
    lam = float(plan.details["lambda"])
    f_reg = dpsc.ridge_coefficients(x[:, :panel.t0], y[:panel.t0], lam)
    coef = dpsc.coefficient_mechanism(plan.details["epsilon1"], plan.events[0].sensitivity, shape.n)
    post = dpsc.post_mechanism(plan.details["step2"], plan.details["epsilon2"], shape.n, shape.h)
    sq = dpsc.expected_sq_error(x[:, panel.t0:], f_reg, dpsc.coefficient_noise_variance(coef),
                                dpsc.post_noise_variance(post))
    bias = omap.inverse(x[:, panel.t0:].T @ f_reg) - panel.y0[panel.t0:]
    noise = math.sqrt(sq / shape.h) * omap.unit_scale
    return noise, math.sqrt(noise**2 + float(np.mean(bias**2)))


def dpsc_effect(shape: Shape, panel: Panel, lam: float) -> float:
    """DPSC's non-private average effect at λ (the ridge of the mapped panel, mapped back)."""
    omap = OutcomeMap.from_spec(spec_for(shape, 1.0))
    x, y = omap.forward(panel.x), omap.forward(panel.y)
    f = dpsc.ridge_coefficients(x[:, :panel.t0], y[:panel.t0], lam)
    return float(np.mean(panel.y[panel.t0:] - omap.inverse(x[:, panel.t0:].T @ f)))


def cv_ridge_effect(shape: Shape, panel: Panel) -> float:
    """Cross-validated ridge SC (scikit-learn RidgeCV, efficient leave-one-out over the
    pre-periods, λ ∈ T0·{0.01, …, 100}, no intercept, on the same mapped panel)."""
    from sklearn.linear_model import RidgeCV

    omap = OutcomeMap.from_spec(spec_for(shape, 1.0))
    x, y = omap.forward(panel.x), omap.forward(panel.y)
    grid = np.array([0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0]) * panel.t0
    fit = RidgeCV(alphas=grid / 2, fit_intercept=False).fit(x[:, :panel.t0].T, y[:panel.t0])
    return float(np.mean(panel.y[panel.t0:] - omap.inverse(x[:, panel.t0:].T @ fit.coef_)))


def fit_weights(panel: Panel, cap: float | None) -> np.ndarray:
    """Least squares on the pre-period over the simplex (capped at ``cap`` if given)."""
    n = panel.x.shape[0]
    w = cp.Variable(n)
    cons = [w >= 0, cp.sum(w) == 1] + ([w <= cap] if cap is not None else [])
    scale = float(np.max(np.abs(panel.x))) or 1.0
    obj = cp.sum_squares((panel.y[:panel.t0] - panel.x[:, :panel.t0].T @ w) / scale)
    with warnings.catch_warnings():  # "may be inaccurate": the reference fit, well within 1e-6
        warnings.simplefilter("ignore", UserWarning)
        cp.Problem(cp.Minimize(obj), cons).solve(solver=cp.CLARABEL)
    return np.clip(np.asarray(w.value, dtype=np.float64), 0.0, None)


def effect_of(panel: Panel, w: np.ndarray) -> float:
    return float(np.mean(panel.y[panel.t0:] - w @ panel.x[:, panel.t0:]))


def mean_se(values: list[float]) -> str:
    a = np.asarray(values, dtype=np.float64)
    return f"{a.mean():.3f} ± {a.std(ddof=1) / math.sqrt(len(a)):.3f}"


CONFIGS = {  # name → (method: capped settings)
    "k=4": {"k": 4},
    "k=4, average only": {"k": 4, "releases": {"path": False}},
    "k=8, average only": {"k": 8, "releases": {"path": False}},
    "k=4, band 0.2": {"k": 4, "band": 0.2},
    "k=4, band 0.1": {"k": 4, "band": 0.1},
    "k=4, band 0.1, 4 path blocks": {"k": 4, "band": 0.1, "releases": {"path_blocks": 4}},
}


def run(reps: int, seed: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for s_i, (name, shape) in enumerate(SHAPES.items()):
        rng = np.random.default_rng(seed * 1000 + s_i)
        frame = structure(shape)
        specs = {c: spec_for(shape, 5.0, method="capped", **sec) for c, sec in CONFIGS.items()}
        layouts = {c: build_layout(sp, frame, None) for c, sp in specs.items()}
        huge = spec_for(shape, 1e9, method="capped", k=4)
        contribution, population = INDIVIDUAL[name]
        ind = spec_for(shape, 1.0, method="capped", k=4, privacy_unit="individual",
                       individual={"contribution": contribution, "population": population})
        row: dict[str, list[float]] = {}
        for _ in range(reps):
            panel = simulate(shape, rng)
            spread = panel.spread
            for c, sp in specs.items():
                rel = capped_release(sp, layouts[c], panel, rng)
                err = abs(rel["avg"] - rel["avg_exact"]) / spread
                row.setdefault(f"{c}: within", []).append(float(err <= 1.0))
                row.setdefault(f"{c}: |err|", []).append(err)
                row.setdefault(f"{c}: path rmse", []).append(rel.get("path_rmse", math.nan) / spread)
                row.setdefault(f"{c}: path rmse truth", []).append(
                    rel.get("path_rmse_truth", math.nan) / spread)
                row.setdefault(f"{c}: |exact - truth|", []).append(
                    abs(rel["avg_exact"] - panel.true_effect) / spread)
            for lam in ("T0", "total"):
                noise, truth = dpsc_out_rmse(shape, panel, 5.0, lam)
                row.setdefault(f"dpsc_out {lam} path rmse", []).append(noise / spread)
                row.setdefault(f"dpsc_out {lam} path rmse truth", []).append(truth / spread)
            rel = capped_release(huge, build_layout(huge, frame, None), panel, rng)
            k = huge.synth_control.k
            ls = effect_of(panel, fit_weights(panel, 1.0 / k))
            simplex = effect_of(panel, fit_weights(panel, None))
            row.setdefault("huge vs capped LS", []).append(abs(rel["avg"] - ls) / spread)
            row.setdefault("huge vs simplex SC", []).append(abs(rel["avg"] - simplex) / spread)
            row.setdefault("huge vs truth", []).append(abs(rel["avg"] - panel.true_effect) / spread)
            row.setdefault("capped LS vs truth", []).append(abs(ls - panel.true_effect) / spread)
            row.setdefault("simplex SC vs truth", []).append(
                abs(simplex - panel.true_effect) / spread)
            plan = METHOD.plan(spec_for(shape, 1e9), len(frame), {"panel": frame},
                               rng=np.random.default_rng(0))
            total = dpsc_effect(shape, panel, float(plan.details["lambda"]))
            cv = cv_ridge_effect(shape, panel)
            row.setdefault("dpsc total 1e9 vs cv ridge", []).append(abs(total - cv) / spread)
            row.setdefault("dpsc total 1e9 vs truth", []).append(
                abs(total - panel.true_effect) / spread)
            row.setdefault("dpsc T0 1e9 vs truth", []).append(
                abs(dpsc_effect(shape, panel, float(shape.t0)) - panel.true_effect) / spread)
            rel = capped_release(ind, build_layout(ind, frame, None), panel, rng)
            err = abs(rel["avg"] - rel["avg_exact"]) / spread
            row.setdefault("individual eps=1 within 5%", []).append(float(err <= 0.05))
            row.setdefault("individual eps=1 |err|", []).append(err)
            row.setdefault("spread / range", []).append(spread / (shape.hi - shape.lo))
        results[name] = row
    return results


def tables(results: dict[str, Any], reps: int) -> str:
    lines = [f"repetitions per shape: {reps} (one new panel and one release each)", ""]
    lines += ["| shape (spread/range) | setting | within 1 spread of non-private (share ± SE) "
              "| median abs error / spread | non-private vs true effect / spread (median) "
              "| path RMSE / spread: vs non-private, vs true path (medians) |",
              "|---|---|---|---|---|---|"]
    for name, row in results.items():
        for c in CONFIGS:
            path = float(np.median(row[f"{c}: path rmse"]))
            truth = float(np.median(row[f"{c}: path rmse truth"]))
            shown = "—" if math.isnan(path) else f"{path:.3g}, {truth:.3g}"
            lines.append(
                f"| {name} ({np.median(row['spread / range']):.3f}) | {c} "
                f"| {mean_se(row[f'{c}: within'])} | {np.median(row[f'{c}: |err|']):.3g} "
                f"| {np.median(row[f'{c}: |exact - truth|']):.3g} | {shown} |")
        for lam in ("T0", "total"):
            lines.append(
                f"| {name} | DPSC_out, lambda: {lam} | | | "
                f"| {np.median(row[f'dpsc_out {lam} path rmse']):.4g}, "
                f"{np.median(row[f'dpsc_out {lam} path rmse truth']):.4g} |")
    lines += ["", "| shape | ε = 10⁹ vs capped LS (median, p90) | vs simplex SC (median, p90) "
              "| release vs truth (median) | capped LS vs truth | simplex SC vs truth "
              "| individual ε = 1: within 5 % (share ± SE) | median abs error / spread |",
              "|---|---|---|---|---|---|---|---|"]
    for name, row in results.items():
        def mp(key: str, row: dict[str, list[float]] = row) -> str:
            a = np.asarray(row[key])
            return f"{np.median(a):.3f}, {np.quantile(a, 0.9):.3f}"
        lines.append(
            f"| {name} | {mp('huge vs capped LS')} | {mp('huge vs simplex SC')} "
            f"| {np.median(row['huge vs truth']):.3f} | {np.median(row['capped LS vs truth']):.3f} "
            f"| {np.median(row['simplex SC vs truth']):.3f} "
            f"| {mean_se(row['individual eps=1 within 5%'])} "
            f"| {np.median(row['individual eps=1 |err|']):.2g} |")
    lines += ["", "| shape | DPSC_out ε = 10⁹, lambda: total vs CV ridge (median, p90) "
              "| lambda: total vs true effect | lambda: T0 vs true effect |", "|---|---|---|---|"]
    for name, row in results.items():
        a = np.asarray(row["dpsc total 1e9 vs cv ridge"])
        lines.append(f"| {name} | {np.median(a):.3f}, {np.quantile(a, 0.9):.3f} "
                     f"| {np.median(row['dpsc total 1e9 vs truth']):.3f} "
                     f"| {np.median(row['dpsc T0 1e9 vs truth']):.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    results = run(args.reps, args.seed)
    print(tables(results, args.reps))
    if args.json is not None:
        args.json.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
