"""Oracle probe (issue #19): what carrying the objective-perturbation propensity noise into the ATE
interval would buy, with the noise's variance computed non-privately (an upper limit for any private
version, whose own noise could only widen it).

    python benchmarks/cate_ate_nuisance_probe.py --eps 5 1 --reps 500

Each repetition draws the same data set and noise as ``benchmarks/cate_ate_sim.py`` (same seeds,
the CLI's own plan and release in process) for every setting in ``SETTINGS``, and records:

- the released total interval (as shipped) and whether it covers the true ATE;
- the oracle nuisance-noise variance v = σ_b²‖H⁻¹g‖² + σ_o²‖g‖²: the propensity model θ̃ was the
  minimiser of Σℓ + (Δ/2)‖θ‖² + bᵀθ (b ~ N(0, σ_b²I), truncated) plus output noise N(0, σ_o²I), so
  θ̃ − θ̂₀ ≈ −H⁻¹b + z and τ̂(θ̃) − τ̂(θ̂₀) ≈ gᵀ(−H⁻¹b + z), with H = Σσ(1 − σ)x̃x̃ᵀ + ΔI on the
  nuisance rows at θ̃ and g = ∂τ̂/∂θ at θ̃ on the scored rows (central differences of the release's
  own scores, ê clipped at ζ as there);
- the oracle interval τ̃ ± H(√(w + v), b): the shipped total-interval law (``total_halfwidth``) with
  the normal part's variance w (the release's inflated private variance) plus v, the Laplace part
  unchanged;
- the linearisation check: the realised d = τ̂(θ̃) − τ̂(θ̂₀) (θ̂₀ the same solve with b = 0 and no
  output noise, same data and outcome models, no score noise) against its prediction
  gᵀ(−H⁻¹b̃ + z) from the drawn b̃ and z, and sd(d) against the rms of √v.
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
import numpy.typing as npt
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cate_ate_dgp import SIZES, draw, true_ate
from cate_ate_sim import SHAPES, make_spec, reference_aipw

from dpcausal.commands.cate.ate_estimate import Fitted, Models, fit_models, release_all, score_rows
from dpcausal.commands.cate.ate_interval import total_halfwidth, variance_inflation
from dpcausal.commands.cate.ate_release import build_ate_release
from dpcausal.commands.cate.ate_setup import AteSetup, build_ate_setup, nuisance_learners
from dpcausal.commands.cate.estimate import clip_rows
from dpcausal.commands.cate.method import plan
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.learners.dp_logistic import PropensityModel
from dpcausal.learners.dp_objective import ObjectiveLogistic, solve_perturbed
from dpcausal.mechanisms import NoiseGuard
from dpcausal.mechanisms.objective import ObjectivePerturbation

FloatArray = npt.NDArray[np.float64]
BASE = {"propensity_learner": "objective", "nuisance_share": 0.5}
SETTINGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "a: recommended (variance 0.5, ζ 0.1)": (BASE, {"nuisance": {"propensity_share": 0.8}}),
    "b: variance 0.2": ({**BASE, "variance_share": 0.2}, {"nuisance": {"propensity_share": 0.8}}),
    "c: variance 0.2, ζ 0.125": ({**BASE, "variance_share": 0.2},
                                 {"propensity_clip": 0.125, "nuisance": {"propensity_share": 0.8}}),
    "d1: nuisance 0.4, variance 0.2, ζ 0.125": (
        {**BASE, "nuisance_share": 0.4, "variance_share": 0.2},
        {"propensity_clip": 0.125, "nuisance": {"propensity_share": 0.8}}),
    "d2: nuisance 0.3, variance 0.2, ζ 0.125": (
        {**BASE, "nuisance_share": 0.3, "variance_share": 0.2},
        {"propensity_clip": 0.125, "nuisance": {"propensity_share": 0.8}}),
    "e: nuisance 0.6, variance 0.2, ζ 0.125": (
        {**BASE, "nuisance_share": 0.6, "variance_share": 0.2},
        {"propensity_clip": 0.125, "nuisance": {"propensity_share": 0.8}}),
}
STEP = 1e-5
"""Central-difference step for g = ∂τ̂/∂θ (θ of order 1–10; τ̂ is smooth away from the clip)."""


class RecordingGuard(NoiseGuard):
    """The CLI's guard (same seeded draws, same order) that also keeps the propensity model's
    noise b and its output noise z, for this probe only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.b: FloatArray | None = None
        self.z: FloatArray | None = None

    def objective_noise(self, perturbation: ObjectivePerturbation) -> FloatArray:
        """Draw b as the guard does, and keep it."""
        self.b = super().objective_noise(perturbation)
        return self.b

    def release(self, mechanism: Any, value: Any, **kwargs: Any) -> Any:
        """Release as the guard does; keep the noise of the propensity's output stage."""
        out = super().release(mechanism, value, **kwargs)
        if mechanism.event().stage.endswith("propensity.output"):
            self.z = np.asarray(out, dtype=np.float64) - np.asarray(value, dtype=np.float64)
        return out


def _tau_hat(spec: CateSpec, setup: AteSetup, outcome: Any, prop: PropensityModel,
             x: FloatArray, a: FloatArray, y: FloatArray) -> float:
    """The mean score (no score noise) with propensity ``prop`` and the released outcome models,
    through the release's own scoring (rows: all)."""
    mods = Models(prop, outcome)
    fitted = Fitted([mods], [(np.arange(len(a)), [mods])], [])
    return float(np.mean(score_rows(spec, setup, fitted, x, a, y).u))


def _g_and_h(spec: CateSpec, setup: AteSetup, outcome: Any, prop: PropensityModel,
             theta: FloatArray, x: FloatArray, a: FloatArray, y: FloatArray, penalty: float
             ) -> tuple[FloatArray, FloatArray]:
    """g = ∂τ̂/∂θ on the scored rows (central differences of the release's scores, ê clipped at
    ζ as there) and H = Σσ(1 − σ)x̃x̃ᵀ + ΔI on the nuisance rows (all rows), both at ``theta``."""
    xt = prop.features.transform(x)
    p = expit(xt @ theta)
    hess = (xt * (p * (1 - p))[:, None]).T @ xt + penalty * np.eye(len(theta))
    g = np.empty_like(theta)
    for j in range(len(theta)):
        step = np.zeros_like(theta)
        step[j] = STEP
        hi = _tau_hat(spec, setup, outcome, PropensityModel(prop.features, theta + step, prop.clip),
                      x, a, y)
        lo = _tau_hat(spec, setup, outcome, PropensityModel(prop.features, theta - step, prop.clip),
                      x, a, y)
        g[j] = (hi - lo) / (2 * STEP)
    return g, hess


def one(spec: CateSpec, frame: Any, noise_seed: int) -> dict[str, float]:
    """One release (the CLI's plan and run, as cate_ate_sim.release) and its oracle terms."""
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    guard = RecordingGuard(pl, test_seed=noise_seed)
    setup = build_ate_setup(spec, len(frame))
    assert setup.rows == "all"
    x, a, y = clip_rows(spec, setup, frame)
    fitted = fit_models(spec, setup, x, a, y, guard)
    rel = release_all(spec, setup, score_rows(spec, setup, fitted, x, a, y), guard)
    doc = build_ate_release(spec, setup, pl, rel).documents["ate.json"]
    guard.check_all_drawn()
    learner = nuisance_learners(setup)[0]
    assert isinstance(learner, ObjectiveLogistic)
    assert guard.b is not None
    assert guard.z is not None
    prop = fitted.fits[0].propensity
    outcome = fitted.fits[0].outcome
    assert prop is not None
    theta = np.asarray(prop.theta, dtype=np.float64)
    xt = prop.features.transform(x)
    g, hess = _g_and_h(spec, setup, outcome, prop, theta, x, a, y, learner.penalty)
    hg = np.linalg.solve(hess, g)
    sigma_b, sigma_o = learner.sigma, learner.output().sigma
    v = sigma_b**2 * float(hg @ hg) + sigma_o**2 * float(g @ g)
    # the linearisation check: the same solve without b and z
    b = guard.b
    norm = float(np.linalg.norm(b))
    if norm > learner.b_bound:  # as ObjectiveLogistic.fit truncates
        b = b * (learner.b_bound / norm)
    theta0 = solve_perturbed(xt, a, np.zeros_like(theta), learner.accuracy)
    tau_rel = _tau_hat(spec, setup, outcome, prop, x, a, y)
    tau0 = _tau_hat(spec, setup, outcome, PropensityModel(prop.features, theta0, prop.clip),
                    x, a, y)
    g0, hess0 = _g_and_h(spec, setup, outcome, prop, theta0, x, a, y, learner.penalty)
    hg0 = np.linalg.solve(hess0, g0)
    v0 = sigma_b**2 * float(hg0 @ hg0) + sigma_o**2 * float(g0 @ g0)
    # the shipped interval's parts (ate_release._overall, no released denominator here)
    alpha = spec.accuracy.alpha
    bud = setup.budget
    scale = rel.units["estimate"] / (bud.estimate * rel.big_v)
    assert rel.q_total is not None
    beta = rel.units["variance"] / (bud.variance * rel.big_v ** 2)
    k = variance_inflation(scale, beta, alpha)
    w = max(rel.q_total / rel.big_v ** 2 + k * beta, 0.0)
    h_old = total_halfwidth(math.sqrt(w), scale, alpha)
    t = doc["total_interval"]
    assert abs((t["hi"] - t["lo"]) / 2 - h_old) < 1e-9 * max(1.0, h_old)
    return {"est": doc["estimate"], "h_old": h_old,
            "h_new": total_halfwidth(math.sqrt(w + v), scale, alpha),
            "h_new0": total_halfwidth(math.sqrt(w + v0), scale, alpha),
            "sd_v": math.sqrt(v), "sd_v0": math.sqrt(v0), "d_real": tau_rel - tau0,
            "d_pred": float(g @ (-np.linalg.solve(hess, b) + guard.z)),
            "w": w, "lap_b": scale, "g_norm": float(np.linalg.norm(g)),
            "hg_norm": float(np.linalg.norm(hg)),
            "h_eig_min": float(np.linalg.eigvalsh(hess)[0]), "sigma_b": sigma_b,
            "sigma_o": sigma_o}


def summarise(recs: list[dict[str, float]], truth: float, ref_h: float) -> dict[str, float]:
    """Coverage ± SE and width ratios of the shipped and the oracle interval, and the checks."""
    col = {k: np.array([r[k] for r in recs]) for k in recs[0]}
    n = len(recs)
    err = np.abs(col["est"] - truth)
    out: dict[str, float] = {"reps": n}
    for name in ("old", "new", "new0"):
        cov = float(np.mean(err <= col[f"h_{name}"]))
        out[f"cov_{name}"] = cov
        out[f"se_{name}"] = math.sqrt(cov * (1 - cov) / n)
        out[f"ratio_{name}"] = float(col[f"h_{name}"].mean()) / ref_h
    out["bias"] = float(col["est"].mean() - truth)
    out["sd"] = float(col["est"].std(ddof=1))
    out["rms_sd_v"] = math.sqrt(float(np.mean(col["sd_v"] ** 2)))
    out["rms_sd_v0"] = math.sqrt(float(np.mean(col["sd_v0"] ** 2)))
    for key in ("v", "v0"):
        z = col["d_real"] / col[f"sd_{key}"]
        out[f"sd_d_real_over_sqrt_{key}"] = float(z.std(ddof=1))
        out[f"tail_d_real_{key}"] = float(np.mean(np.abs(z) > 1.96))
    out["sd_d_real"] = float(col["d_real"].std(ddof=1))
    out["mean_d_real"] = float(col["d_real"].mean())
    out["sd_d_pred"] = float(col["d_pred"].std(ddof=1))
    out["corr"] = float(np.corrcoef(col["d_real"], col["d_pred"])[0, 1])
    out["sd_lin_err"] = float((col["d_real"] - col["d_pred"]).std(ddof=1))
    out["rms_sqrt_w"] = math.sqrt(float(np.mean(col["w"])))
    out["mean_lap_b"] = float(col["lap_b"].mean())
    for key in ("g_norm", "hg_norm", "h_eig_min", "sigma_b", "sigma_o"):
        out[f"median_{key}"] = float(np.median(col[key]))
    return out


def main() -> None:
    """Run every setting on the same data sets and noise seeds; print one line per (ε, setting)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eps", type=float, nargs="+", default=[5.0, 1.0])
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--settings", nargs="+", default=sorted(SETTINGS),
                    help="keys of SETTINGS (prefix before the colon)")
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--raw-out", type=Path, default=None)
    args = ap.parse_args()
    chosen = [k for k in SETTINGS if k.split(":")[0] in {s.split(":")[0] for s in args.settings}]
    truth = true_ate("nhefs")
    seed = 20261126 + args.seed_offset
    raw: dict[str, Any] = {}
    for eps in args.eps:
        t0 = time.time()
        specs = {k: make_spec("nhefs", eps, *SETTINGS[k]) for k in chosen}
        recs: dict[str, list[dict[str, float]]] = {k: [] for k in chosen}
        ref_h: dict[str, list[float]] = {k: [] for k in chosen}
        for r in range(args.reps):
            frame = draw("nhefs", SIZES["nhefs"], np.random.default_rng(seed + r))
            refs: dict[float, float] = {}
            for k, spec in specs.items():
                recs[k].append(one(spec, frame, seed + 10**6 + r))
                if spec.cate.kappa not in refs:
                    refs[spec.cate.kappa] = reference_aipw(frame, SHAPES["nhefs"][0],
                                                           spec.cate.kappa, spec.accuracy.alpha)[1]
                ref_h[k].append(refs[spec.cate.kappa])
        for k in chosen:
            s = summarise(recs[k], truth, float(np.mean(ref_h[k])))
            raw[f"eps={eps:g} {k}"] = recs[k]
            print(f"ε={eps:g} [{k}]: " + ", ".join(f"{n} {v:.4g}" for n, v in s.items())
                  + f" ({time.time() - t0:.0f} s)", flush=True)
    if args.raw_out is not None:
        args.raw_out.write_text(json.dumps(raw))


if __name__ == "__main__":
    main()
