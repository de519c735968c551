"""cate's ATE outputs: the intervals (post-processing of the released sums and public scales),
ate.csv, ate.json and the summary."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.cate.ate_interval import total_halfwidth, variance_inflation
from dpcausal.commands.cate.ate_scores import NuisanceRanges
from dpcausal.commands.cate.ate_setup import AteSetup
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]
DENOMINATOR_ALPHA = 1.0 / 20.0
"""Share of α given to the noise of a released denominator (group sizes, Σ ê(1 − ê)); the rest
covers the numerator's noise and the sampling error (a union bound)."""


@dataclass(frozen=True)
class Releases:
    """The released (noised) statistics and the units their noise was calibrated to."""

    n: int
    big_u: float
    big_v: float
    tau: float
    q_total: float | None
    groups: tuple[FloatArray, FloatArray, FloatArray | None] | None
    units: dict[str, float]
    v_bounds: tuple[float, float]
    e_max: float
    models: list[dict[str, Any]]
    ranges: NuisanceRanges


@dataclass(frozen=True)
class Interval:
    """One released effect with its noise and total half-widths (around the unclamped value)."""

    name: str
    estimate: float
    noise_h: float
    total_h: float
    size: float
    law: str
    k: float


def _overall(spec: CateSpec, setup: AteSetup, rel: Releases) -> Interval:
    ate = spec.cate.ate_spec
    b_eps = setup.budget
    denom = rel.units.get("denominator")
    alpha = spec.accuracy.alpha * (1.0 - DENOMINATOR_ALPHA) if denom else spec.accuracy.alpha
    b = rel.units["estimate"] / (b_eps.estimate * rel.big_v)
    extra = 0.0
    if denom:
        extra = (abs(rel.tau) * denom / (b_eps.denominator * rel.big_v)
                 * math.log(1.0 / (spec.accuracy.alpha * DENOMINATOR_ALPHA)))
    noise_h = b * math.log(1.0 / alpha) + extra
    k = 0.0
    if ate.variance == "private":
        assert rel.q_total is not None
        beta = rel.units["variance"] / (b_eps.variance * rel.big_v ** 2)
        k = variance_inflation(b, beta, alpha)
        w = max(rel.q_total / rel.big_v ** 2 + k * beta, 0.0)
    else:
        assert ate.sd_bound is not None
        w = ate.sd_bound ** 2 * rel.n / rel.big_v ** 2
    total_h = total_halfwidth(math.sqrt(w), b, alpha) + extra
    law = f"Laplace({b:.4g})" + (" + a Laplace denominator term" if denom else "")
    return Interval("all", rel.tau, noise_h, total_h, float(rel.n), law, k)


def _groups(spec: CateSpec, setup: AteSetup, rel: Releases) -> list[Interval]:
    ate = spec.cate.ate_spec
    if rel.groups is None:
        return []
    sums, sizes, gq = rel.groups
    two_m = 2.0 * setup.overlap
    bud = setup.budget
    alpha = spec.accuracy.alpha * (1.0 - DENOMINATOR_ALPHA)
    out = []
    for i, g in enumerate(ate.groups):
        w_g = float(sizes[i])
        d = float(sums[i]) / w_g
        b = two_m * rel.units["groups.sums"] / (bud.group_sums * w_g)
        extra = (abs(d) * two_m * rel.units["groups.sizes"] / (bud.group_sizes * w_g)
                 * math.log(1.0 / (spec.accuracy.alpha * DENOMINATOR_ALPHA)))
        k = 0.0
        if gq is not None:
            beta = two_m * rel.units["groups.variance"] / (bud.group_variance * w_g * w_g)
            k = variance_inflation(b, beta, alpha)
            w = max(float(gq[i]) / (w_g * w_g) + k * beta, 0.0)
        else:
            assert ate.sd_bound is not None
            w = ate.sd_bound ** 2 / (w_g * rel.v_bounds[0])
        out.append(Interval(g.name, rel.tau + d, b * math.log(1.0 / alpha) + extra,
                            total_halfwidth(math.sqrt(w), b, alpha) + extra, w_g,
                            f"Laplace({b:.4g}) + a Laplace size term", k))
    return out


def _record(iv: Interval, level: float, bounds: tuple[float, float],
            residual_clip: float | None) -> dict[str, Any]:
    """The JSON form of one released effect (the output convention of the interval infra:
    estimate, interval (noise), total_interval, clamped only when clamping moved the value)."""
    assumes = ("the nuisance models' remaining bias is negligible (one of the two close to the "
               "truth); the confounding left by shrunk or noisy DP nuisance models is not in the "
               "interval (docs/proofs/cate_ate.md §5.1)")
    if residual_clip is not None:
        assumes += (f"; residuals clipped to [-{residual_clip:g}, {residual_clip:g}] "
                    "(cate.ate.residual_clip): the outcome model close to right and the residuals "
                    "beyond the clip rare or symmetric, else a bias not in the interval")
    lo_b, hi_b = bounds
    est = min(max(iv.estimate, lo_b), hi_b)

    def rng(h: float) -> tuple[float, float]:
        return max(iv.estimate - h, lo_b), min(iv.estimate + h, hi_b)

    n_lo, n_hi = rng(iv.noise_h)
    t_lo, t_hi = rng(iv.total_h)
    out: dict[str, Any] = {
        "estimate": est,
        "interval": {"lo": n_lo, "hi": n_hi, "level": level, "kind": "noise", "law": iv.law,
                     "bound": True},
        "total_interval": {"lo": t_lo, "hi": t_hi, "level": level, "kind": "total",
                           "law": "normal sampling error (CLT) + the noise, the private "
                                  "variance's own noise integrated (inflation k = "
                                  f"{iv.k:.3g})", "bound": False,
                           "assumes": assumes},
    }
    if est != iv.estimate:
        out["clamped"] = {"bounds": [lo_b, hi_b], "unclamped": iv.estimate}
    return out


def _effect(spec: CateSpec, name: str) -> str:
    """What the released number means (``cate.outcome_direction``)."""
    avg = "E" if name == "ate" else "E_overlap"
    if spec.cate.outcome_direction == "higher":
        return f"{avg}[Y(treated) - Y(control)]"
    return (f"{avg}[Y(control) - Y(treated)] (outcome_direction lower: positive where the "
            "treatment lowers the outcome)")


def build_ate_release(spec: CateSpec, setup: AteSetup, plan: PrivacyPlan, rel: Releases
                      ) -> Release:
    """ate.json, ate.csv and the summary from the released statistics (no data)."""
    level = 1.0 - spec.accuracy.alpha
    dy = setup.y_bounds[1] - setup.y_bounds[0]
    bounds = (-dy, dy)
    name = "ate" if setup.weights == "clipped" else "ato"
    ivs = [_overall(spec, setup, rel), *_groups(spec, setup, rel)]
    if spec.cate.outcome_direction == "lower":
        # the release on −Y (negated bounds): every step is odd in Y and every noise law and
        # half-width symmetric, so it is the sign flip of this one (post-processing)
        ivs = [dataclasses.replace(iv, estimate=-iv.estimate) for iv in ivs]
    records = [_record(iv, level, bounds, setup.residual_clip) for iv in ivs]
    table = pd.DataFrame({
        "group": [iv.name for iv in ivs],
        name: [r["estimate"] for r in records],
        f"{name}_noise_lo": [r["interval"]["lo"] for r in records],
        f"{name}_noise_hi": [r["interval"]["hi"] for r in records],
        f"{name}_total_lo": [r["total_interval"]["lo"] for r in records],
        f"{name}_total_hi": [r["total_interval"]["hi"] for r in records],
        f"{name}_clamped": ["clamped" in r for r in records],
        "size": [iv.size for iv in ivs],
    })
    doc: dict[str, Any] = {
        "format_version": 1, "command": "cate", "estimand": name.upper(),
        "effect": _effect(spec, name),
        "weights": setup.weights, "residual_clip": setup.residual_clip,
        "alpha": spec.accuracy.alpha, "n": rel.n,
        **records[0],
        "groups": [{"name": iv.name, "size": iv.size, **r}
                   for iv, r in zip(ivs[1:], records[1:], strict=True)],
        "size_note": "overall: the public number of scored rows; groups: their noisy sizes "
                     + ("(counts)" if setup.weights == "clipped" else "(sums of e(1-e))"),
        "interval_kinds": {"interval": "the privacy noise only (a bound: the noise laws at the "
                                       "released scales, union over a denominator's noise)",
                           "total_interval": "sampling error and privacy noise; asymptotic "
                                             "(normal approximation) and valid when the nuisance "
                                             "models' product error is small (double "
                                             "robustness)"},
        "units": rel.units,
        "nuisance_models": {
            "outcome_model": setup.outcome, "propensity_learner": setup.propensity_learner,
            "features": "x~ = (1, s(x) - 1/2)/sqrt(1 + q/4) * (1 - 8u), s(x) = (clip(x, lo, hi) - "
                        "lo)/(hi - lo); propensity = clip(sigmoid(theta . x~), kappa, 1 - kappa); "
                        "outcome_a = clip(center + theta_a . x~, y_lo, y_hi); crossfit: a row is "
                        "scored by the average of the other folds' models",
            "fits": rel.models,
            "ranges_over_box": {"propensity": list(rel.ranges.e), "outcome_0": list(rel.ranges.mu0),
                                "outcome_1": list(rel.ranges.mu1)}},
        "events": [e.to_dict() for e in plan.events],
    }
    release = Release(tables={"ate": table}, documents={"ate.json": doc})
    release.summary.update({
        "estimand": name.upper(), "effect": doc["effect"], name: records[0],
        "alpha": spec.accuracy.alpha, "n": rel.n, "groups": len(ivs) - 1,
    })
    return release
