"""synth-control in memory: the donor matrices, the noised coefficients and post-period donors, the
counterfactual path and the effect."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.synth_control import dpsc
from dpcausal.commands.synth_control.capped_run import run_capped
from dpcausal.commands.synth_control.layout import build_layout
from dpcausal.commands.synth_control.panel import (
    OutcomeMap,
    PanelLayout,
    plain_value,
    value_matrix,
)
from dpcausal.commands.synth_control.plot import plot_capped_png, plot_png
from dpcausal.commands.synth_control.setup import COMMAND, NEIGHBOURING, PAPER
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import DataError
from dpcausal.intervals import add_interval_columns, interval_record
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release


def _check_same_structure(layout: PanelLayout, plan: PrivacyPlan) -> None:
    d = plan.details
    if (layout.n, layout.t0, layout.h) != (d["n_donors"], d["pre_periods_T0"], d["post_periods_h"]):
        raise DataError("the data file's panel structure changed between planning and reading; "
                        "rerun on a file that is not being written to")


def counterfactual_path(spec: SynthControlSpec, x: np.ndarray, y: np.ndarray, t0: int,
                        plan: PrivacyPlan, *, noise: NoiseGuard
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Private (y_out, f_out) in mapped units from mapped donors x (n × T) and target y (T)."""
    sec = spec.synth_control
    n, periods = x.shape
    h = periods - t0
    lam = float(plan.details["lambda"])
    eps1, eps2 = float(plan.details["epsilon1"]), float(plan.details["epsilon2"])
    if sec.method == "out":
        coef = dpsc.coefficient_mechanism(eps1, plan.events[0].sensitivity, n)
        f_out = noise.release(coef, dpsc.ridge_coefficients(x[:, :t0], y[:t0], lam))
    else:
        params = dpsc.objective_parameters(n, t0, lam, eps1, sec.c)
        b = noise.objective_noise(dpsc.objective_perturbation(params, n, eps1))
        f_out = dpsc.objective_coefficients(x[:, :t0], y[:t0], lam, params, b)
    post = dpsc.post_mechanism(plan.details["step2"], eps2, n, h)
    x_post = np.asarray(noise.release(post, x[:, t0:].ravel())).reshape(n, h)
    return x_post.T @ f_out, f_out


def run(spec: SynthControlSpec, frame: pd.DataFrame, plan: PrivacyPlan,
        side: dict[str, pd.DataFrame], *, rng: np.random.Generator,
        noise: NoiseGuard) -> Release:
    """Map and clip the panel, release the counterfactual path, the effect and the plot."""
    path = spec.data.path
    layout = build_layout(spec, frame, path)
    _check_same_structure(layout, plan)
    omap = OutcomeMap.from_spec(spec)
    x_raw, y_raw = value_matrix(spec, layout, frame, path)
    if spec.synth_control.method == "capped":
        return run_capped(spec, layout, x_raw, y_raw, plan, noise=noise)
    x, y = omap.forward(x_raw), omap.forward(y_raw)
    del x_raw
    y_out, f_out = counterfactual_path(spec, x, y, layout.t0, plan, noise=noise)
    del x
    counterfactual = omap.inverse(y_out)
    t0 = layout.t0
    certified = spec.synth_control.method == "out"
    table = pd.DataFrame({
        "time": [plain_value(t) for t in layout.times],
        "period": ["pre"] * t0 + ["post"] * layout.h,
        "observed": y_raw,
        "counterfactual": np.concatenate([np.full(t0, np.nan), counterfactual]),
    })
    mean_y = float(np.mean(y_raw[t0:]))
    raw_avg = mean_y - float(np.mean(counterfactual))
    bounds = (omap.lo, omap.hi)
    acc = plan.predicted()
    if certified and acc is not None:  # DPSC_out: Chebyshev bounds from the public variance
        hw = acc.halfwidth
        table = add_interval_columns(table, "counterfactual", hw, bounds=bounds)
        obs = table["observed"].to_numpy(dtype=np.float64)
        table["effect"] = obs - table["counterfactual"]
        table["effect_noise_lo"] = obs - table["counterfactual_noise_hi"]
        table["effect_noise_hi"] = obs - table["counterfactual_noise_lo"]
        avg: Any = interval_record(raw_avg, hw, alpha=acc.alpha, law=acc.law, bound=True,
                                   bounds=(mean_y - omap.hi, mean_y - omap.lo))
    else:
        table["effect"] = table["observed"] - table["counterfactual"]
        avg = raw_avg
    effect = table["effect"].to_numpy(dtype=np.float64)[t0:]
    cum: Any = float(np.sum(effect))
    if isinstance(avg, dict):  # the sum of h noises: h times the average's Chebyshev bound
        assert acc is not None
        cum = interval_record(layout.h * avg["estimate"], layout.h * acc.halfwidth,
                              alpha=acc.alpha, law=acc.law, bound=True)
    doc = effect_document(spec, layout, plan, avg, cum, certified)
    release = Release(documents={"effect.json": doc}, tables={"counterfactual": table})
    if spec.synth_control.release_weights:
        release.tables["weights"] = pd.DataFrame({
            "unit": [plain_value(d) for d in layout.donors], "weight": f_out})
    target = str(plain_value(layout.target))
    if spec.synth_control.plot and isinstance(avg, dict):
        release.figures["synth_control.png"] = plot_capped_png(
            table, target=target, epsilon=spec.privacy.epsilon, average=avg, bounds=bounds,
            level=1.0 - acc.alpha if acc is not None else 0.95,
            title=f"DPSC_out (the paper's method), {plan.details['sensitivity']} Δ")
    elif spec.synth_control.plot:
        release.figures["synth_control.png"] = plot_png(
            table, target=target, epsilon=spec.privacy.epsilon,
            title_note="DPSC_obj: NO DP GUARANTEE")
    release.summary.update({
        "average_post_effect": avg["estimate"] if isinstance(avg, dict) else avg,
        "cumulative_post_effect": cum["estimate"] if isinstance(cum, dict) else cum,
        "n_donors": layout.n,
        "pre_periods": t0, "post_periods": layout.h, "step2": plan.details["step2"],
        "sensitivity": plan.details["sensitivity"],
    })
    return release


def effect_document(spec: SynthControlSpec, layout: PanelLayout, plan: PrivacyPlan, avg: Any,
                    cum: Any, certified: bool) -> dict[str, Any]:
    """The small JSON summary of the release (all post-processing of private values + public y)."""
    d = plan.details
    doc: dict[str, Any] = {
        "command": COMMAND,
        "method": (
            "DPSC_out (ridge + ℓ2-Laplace output perturbation, private post donors)" if certified
            else "DPSC_obj (objective perturbation) — UNCERTIFIED, no DP guarantee"),
        "paper": PAPER,
        "target": plain_value(layout.target),
        "treatment_time": plain_value(spec.synth_control.treatment_time),
        "n_donors": layout.n, "pre_periods": layout.t0, "post_periods": layout.h,
        "average_post_effect": avg,
        "cumulative_post_effect": cum,
        "effect_definition": "observed target − private counterfactual, averaged over post periods",
        "privacy": {
            "epsilon": spec.privacy.epsilon, "epsilon1": d["epsilon1"], "epsilon2": d["epsilon2"],
            "delta": 0.0, "dp_guarantee": certified, "lambda": d["lambda"],
            "sensitivity": d["sensitivity"], "step2": d["step2"],
            "neighbouring": f"{NEIGHBOURING['relation']} ({NEIGHBOURING['unit']})",
        },
    }
    if "noise_rmse_bound" in d:
        doc["noise_rmse_bound_per_period"] = d["noise_rmse_bound"]
        doc["noise_rmse_bound_note"] = ("public bound on the RMS privacy noise per post period, "
                                        "original units (spec §5.5/§5.7); excludes model bias")
    return doc
