"""Reproduce the DPSC experiment grid (Rho, Cummings & Misra 2023, §4 / spec §5.6) with correct noise.

    python benchmarks/synth_control_reproduction.py            # prints markdown tables
    python benchmarks/synth_control_reproduction.py --seed-offset 100000 --raw-out raw.json

Data: the reference code's simulated design (spec §5.6, "as implemented"): T = T0 + 3, slopes
truncnorm on [7, 9], intercept U(−1, 1), the signal (target + donors) min/max-scaled into [−1, 1],
noise truncnorm on [−0.1, 0.1] (sd 0.1 before truncation), then clipped to [−1, 1] as dpcausal does.
One data set per (T0, n), fixed seeds. No network: the [C] fixture files are not used.

Metric: RMSE of the private forecast against the observed y_post, √(E‖y_out − y_post‖²/h), with the
expectation over the mechanism's noise computed *exactly* by the §5.5 formula for DPSC_out and by
Monte Carlo (500 draws, as in the paper) for DPSC_obj. A Monte Carlo check of the formula (4000 draws
through ``counterfactual_path``, the code path ``run`` uses) is printed for a few cells.

Columns: A = the paper's algorithm with correct sampling (Δ = 4T0√(8+n)/λ, step 2 matrix-l2);
A' = paper Δ with the entrywise step 2; B = tight Δ = √(2T0/λ) with matrix-l2;
C = dpcausal's default (tight Δ, step 2 auto → entrywise-l1 for n ≥ 2); E = DPSC_obj (uncertified);
D = the paper's DPSC_out drawn with the REFERENCE CODE's sampler (spec §3.4, §8.1 bug 1: the ℓ2-Laplace
radius is a signed scalar Laplace(0, a) times a uniform direction, for f_out and for W), paper Δ,
step 2 matrix-l2 — not DP; shown to test whether the paper's figures are consistent with it. Its
per-coordinate noise variance is E r²/d = 2a²/d (correct: (d + 1)a²), so its RMSE is exact by the
same §5.5 formula; a Monte Carlo check through an independent draw of that sampler is printed.

``--seed-offset K`` adds K to every data and Monte Carlo seed (a second draw of the four data sets);
``--raw-out`` writes every cell (for ``benchmarks/reseed.py``; one value per cell: DPSC_out RMSEs are
exact expectations over the noise, so the seed only changes the data).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from dpcausal.commands.synth_control import dpsc as core
from dpcausal.commands.synth_control import plan as sc_plan
from dpcausal.commands.synth_control.estimate import counterfactual_path
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.mechanisms import NoiseGuard

H = 3
GRID = [(10, 10), (10, 100), (100, 10), (100, 100)]
EPSILONS = [2, 4, 10, 20, 40, 100, 200]
LAMBDAS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]


@dataclass(frozen=True)
class Panel:
    x: np.ndarray  # n × T donors, in [−1, 1]
    y: np.ndarray  # T target, in [−1, 1]
    t0: int


def simulate(t0: int, n: int, seed: int) -> Panel:
    """The reference code's generateData2 design (spec §5.6), then clipped to [−1, 1]."""
    rng = np.random.default_rng(seed)
    periods = t0 + H
    slopes = stats.truncnorm.rvs(3, 5, loc=4, scale=1, size=n + 1, random_state=rng)
    intercept = rng.uniform(-1, 1, n + 1)
    t = np.arange(1, periods + 1)
    signal = slopes[:, None] * t[None, :] + intercept[:, None]
    signal = signal - (signal.min() + signal.max()) / 2
    signal = signal / signal.max()
    noise = stats.truncnorm.rvs(-1, 1, loc=0, scale=0.1, size=signal.shape, random_state=rng)
    data = np.clip(signal + noise, -1, 1)
    return Panel(data[1:], data[0], t0)


def mechanisms(panel: Panel, eps: float, lam: float, sensitivity: str,
               step2: str) -> tuple[float, float]:
    """(σ_v², σ_W²) of DPSC_out at ε1 = ε2 = ε/2."""
    n = panel.x.shape[0]
    delta, _ = core.coefficient_sensitivity(sensitivity, n, panel.t0, lam)  # type: ignore[arg-type]
    coef = core.coefficient_mechanism(eps / 2, delta, n)
    kind = core.choose_step2(step2, n, H)  # type: ignore[arg-type]
    post = core.post_mechanism(kind, eps / 2, n, H)
    return core.coefficient_noise_variance(coef), core.post_noise_variance(post)


def rmse_out(panel: Panel, eps: float, lam: float, sensitivity: str, step2: str) -> float:
    """Exact RMSE vs observed y_post (§5.5 formula + the non-private bias)."""
    t0 = panel.t0
    f = core.ridge_coefficients(panel.x[:, :t0], panel.y[:t0], lam)
    bias = float(np.sum((panel.x[:, t0:].T @ f - panel.y[t0:]) ** 2))
    sv, sw = mechanisms(panel, eps, lam, sensitivity, step2)
    return math.sqrt((bias + core.expected_sq_error(panel.x[:, t0:], f, sv, sw)) / H)


def rmse_reference_sampler(panel: Panel, eps: float, lam: float) -> float:
    """Exact RMSE of column D: paper Δ, matrix-l2 step 2, both drawn by the reference sampler."""
    n, t0 = panel.x.shape[0], panel.t0
    f = core.ridge_coefficients(panel.x[:, :t0], panel.y[:t0], lam)
    bias = float(np.sum((panel.x[:, t0:].T @ f - panel.y[t0:]) ** 2))
    a = core.sensitivity_paper(n, t0, lam) / (eps / 2)
    b = 2.0 * math.sqrt(H) / (eps / 2)
    sv, sw = 2.0 * a * a / n, 2.0 * b * b / (n * H)  # E r² / d for r ~ Laplace(0, scale)
    return math.sqrt((bias + core.expected_sq_error(panel.x[:, t0:], f, sv, sw)) / H)


def reference_laplace(scale: float, dim: int, rng: np.random.Generator) -> np.ndarray:
    """The reference code's ``laplace_sample``: signed scalar Laplace radius × uniform direction."""
    g = rng.standard_normal(dim)
    return rng.laplace(0.0, scale) * g / np.linalg.norm(g)


def mc_reference(panel: Panel, eps: float, draws: int, rng: np.random.Generator
                 ) -> tuple[float, float, float]:
    """(formula RMSE of D, Monte Carlo RMSE of D, MC standard error of the MSE) at λ = T0."""
    n, t0 = panel.x.shape[0], panel.t0
    lam = float(t0)
    f = core.ridge_coefficients(panel.x[:, :t0], panel.y[:t0], lam)
    a = core.sensitivity_paper(n, t0, lam) / (eps / 2)
    b = 2.0 * math.sqrt(H) / (eps / 2)
    sq = np.empty(draws)
    for k in range(draws):
        f_out = f + reference_laplace(a, n, rng)
        xp = panel.x[:, t0:] + reference_laplace(b, n * H, rng).reshape(n, H)
        sq[k] = np.sum((xp.T @ f_out - panel.y[t0:]) ** 2) / H
    return (rmse_reference_sampler(panel, eps, lam), math.sqrt(sq.mean()),
            sq.std(ddof=1) / math.sqrt(draws))


def rmse_nonprivate(panel: Panel, lam: float) -> float:
    t0 = panel.t0
    f = core.ridge_coefficients(panel.x[:, :t0], panel.y[:t0], lam)
    return math.sqrt(float(np.mean((panel.x[:, t0:].T @ f - panel.y[t0:]) ** 2)))


def rmse_obj(panel: Panel, eps: float, lam: float, draws: int, rng: np.random.Generator) -> float:
    """Monte Carlo RMSE of DPSC_obj (correct sampler, Δ applied, c = T0(1 + √(16n − 15)))."""
    n, t0 = panel.x.shape[0], panel.t0
    params = core.objective_parameters(n, t0, lam, eps / 2)
    post = core.post_mechanism("matrix-l2", eps / 2, n, H)
    sq = []
    for _ in range(draws):
        b = core.objective_perturbation(params, n, eps / 2).sample(rng=rng)
        f = core.objective_coefficients(panel.x[:, :t0], panel.y[:t0], lam, params, b)
        xp = post.release(panel.x[:, t0:].ravel(), rng=rng).reshape(n, H)
        sq.append(float(np.sum((xp.T @ f - panel.y[t0:]) ** 2)))
    return math.sqrt(float(np.mean(sq)) / H)


def plan_for(panel: Panel, eps: float, sensitivity: str, step2: str) -> tuple[SynthControlSpec, object]:
    n, periods = panel.x.shape
    units = ["T", *[f"D{i}" for i in range(n)]]
    frame = pd.DataFrame({"unit": np.repeat(units, periods), "time": np.tile(np.arange(periods), n + 1)})
    spec = SynthControlSpec.model_validate({
        "data": {"path": "p.csv", "columns": {"unit": "unit", "time": "time", "outcome": "y"}},
        "bounds": {"outcome": [-1.0, 1.0]}, "privacy": {"epsilon": eps},
        "synth_control": {"target": "T", "treatment_time": panel.t0, "sensitivity": sensitivity,
                          "step2": step2}})
    return spec, sc_plan.plan(spec, len(frame), {"panel": frame}, rng=np.random.default_rng(0))


def mc_check(panel: Panel, eps: float, sensitivity: str, step2: str, draws: int,
             rng: np.random.Generator) -> tuple[float, float, float]:
    """(formula RMSE, Monte Carlo RMSE through counterfactual_path, MC standard error of the MSE)."""
    spec, plan = plan_for(panel, eps, sensitivity, step2)
    sq = np.array([
        np.sum((counterfactual_path(spec, panel.x, panel.y, panel.t0, plan,  # type: ignore[arg-type]
                                       noise=NoiseGuard(plan, test_seed=int(rng.integers(2**62))))[0]
                - panel.y[panel.t0:]) ** 2) / H
        for _ in range(draws)])
    return (rmse_out(panel, eps, float(panel.t0), sensitivity, step2), math.sqrt(sq.mean()),
            sq.std(ddof=1) / math.sqrt(draws))


def fmt(v: float) -> str:
    if v >= 1000:
        return f"{v:,.0f}".replace(",", " ")
    if v >= 100:
        return f"{v:.1f}"
    return f"{v:.3g}" if v < 1 else f"{v:.2f}"


RAW: dict[str, list[float]] = {}  # "table/cell/column" -> [value] (reseed.py)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed-offset", type=int, default=0, help="added to every seed")
    ap.add_argument("--raw-out", type=Path, default=None, help="every cell's value (JSON)")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables here")
    args = ap.parse_args()
    off = args.seed_offset
    t_start = time.perf_counter()
    rng = np.random.default_rng(20231 + off)
    panels = {(t0, n): simulate(t0, n, seed=1000 * t0 + n + off) for t0, n in GRID}
    text: list[str] = []

    def out(line: str) -> None:
        text.append(line)
        sys.stdout.write(line)
        sys.stdout.flush()

    out(f"### ε sweep (λ = T0, ε1 = ε2 = ε/2; RMSE vs observed y_post, mapped units; seed offset {off})\n\n")
    out("| T0, n | non-private | ε | A paper | A' paper+entrywise | B tight+matrix | "
        "C default (tight+auto) | D paper, reference sampler (not DP) | "
        "E obj (MC, uncertified) | A/B | A/C | A/D |\n")
    out("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for (t0, n), panel in panels.items():
        lam = float(t0)
        for eps in EPSILONS:
            a = rmse_out(panel, eps, lam, "paper", "matrix-l2")
            a2 = rmse_out(panel, eps, lam, "paper", "entrywise-l1")
            b = rmse_out(panel, eps, lam, "tight", "matrix-l2")
            c = rmse_out(panel, eps, lam, "tight", "auto")
            d = rmse_reference_sampler(panel, eps, lam)
            e = rmse_obj(panel, eps, lam, 500, rng)
            for col, v in (("A", a), ("A'", a2), ("B", b), ("C", c), ("D", d), ("E", e)):
                RAW[f"eps/T0={t0},n={n}/eps={eps}/{col}"] = [v]
            npv = fmt(rmse_nonprivate(panel, lam)) if eps == EPSILONS[0] else ""
            out(f"| {t0}, {n} | {npv} | {eps} | {fmt(a)} | {fmt(a2)} | {fmt(b)} | {fmt(c)} | "
                f"{fmt(d)} | {fmt(e)} | {a / b:.1f}× | {a / c:.1f}× | {a / d:.0f}× |\n")
    out("\n### λ sweep (ε1 = ε2 = 50): argmin λ over {1, 2, 5, …, 5000} and the RMSE there\n\n")
    out("| T0, n | non-private argmin (RMSE) | A paper argmin (RMSE) | B tight+matrix argmin (RMSE) "
        "| C default argmin (RMSE) | D reference sampler argmin (RMSE) | C at λ = T0 |\n"
        "|---|---|---|---|---|---|---|\n")
    for (t0, n), panel in panels.items():
        cells = []
        for name, fn in (("non-private", lambda lam, p=panel: rmse_nonprivate(p, lam)),
                         ("A", lambda lam, p=panel: rmse_out(p, 100.0, lam, "paper", "matrix-l2")),
                         ("B", lambda lam, p=panel: rmse_out(p, 100.0, lam, "tight", "matrix-l2")),
                         ("C", lambda lam, p=panel: rmse_out(p, 100.0, lam, "tight", "auto")),
                         ("D", lambda lam, p=panel: rmse_reference_sampler(p, 100.0, lam))):
            vals = [fn(float(lam)) for lam in LAMBDAS]
            k = int(np.argmin(vals))
            RAW[f"lambda/T0={t0},n={n}/{name}/argmin"] = [float(LAMBDAS[k])]
            cells.append(f"{LAMBDAS[k]} ({fmt(vals[k])})")
        at_t0 = rmse_out(panel, 100.0, float(t0), "tight", "auto")
        out(f"| {t0}, {n} | " + " | ".join(cells) + f" | {fmt(at_t0)} |\n")
    out("\n### Monte Carlo check of the exact formula (4000 draws through counterfactual_path)\n\n")
    out("| T0, n | ε | Δ | step 2 | formula RMSE | Monte Carlo RMSE | MSE deviation / s.e. |\n")
    out("|---|---|---|---|---|---|---|\n")
    for (t0, n), eps, sens, step2 in [((10, 10), 100, "paper", "matrix-l2"),
                                      ((10, 10), 10, "tight", "auto"),
                                      ((10, 100), 100, "tight", "matrix-l2"),
                                      ((100, 10), 20, "tight", "auto")]:
        form, mc, se = mc_check(panels[(t0, n)], eps, sens, step2, 4000, rng)
        out(f"| {t0}, {n} | {eps} | {sens} | {step2} | {fmt(form)} | {fmt(mc)} | "
            f"{(mc**2 - form**2) / se:+.2f} |\n")
    for (t0, n), eps in [((10, 10), 10), ((10, 100), 10)]:
        form, mc, se = mc_reference(panels[(t0, n)], eps, 4000, rng)
        out(f"| {t0}, {n} | {eps} | paper | D: reference sampler | {fmt(form)} | {fmt(mc)} | "
            f"{(mc**2 - form**2) / se:+.2f} |\n")
    out(f"\n(total time {time.perf_counter() - t_start:.0f} s)\n")
    if args.raw_out is not None:
        args.raw_out.write_text(json.dumps(RAW) + "\n")
    if args.out is not None:
        args.out.write_text("".join(text))


if __name__ == "__main__":
    main()
