"""``synth-control``: differentially private synthetic control (DPSC_out; DPSC_obj uncertified).

Rho, Cummings & Misra (AISTATS 2023), Algorithm 2, with the errata of ``specs/synth_control.md``:
exact ridge closed form with (λ/2)I, the tight sensitivity √(2T0/λ) by default, a Gamma(d) radius for
the ℓ2-Laplace noise, and a step 2 that is ε2-DP in both variants. Privacy unit: one donor's whole
series (replace-one donor; n, T, T0 public). The target series is public and not protected.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.errors import DataError, SpecError, UncertifiedModeError
from dpcausal.learners.rounding import cholesky_completes, gamma
from dpcausal.mechanisms import NoiseGuard
from dpcausal.methods import synth_control_core as core
from dpcausal.methods.base import MethodDef, Release, SideInput
from dpcausal.methods.synth_control_panel import (
    OutcomeMap,
    PanelLayout,
    _plain,
    build_layout,
    data_columns,
    structure_columns,
    value_matrix,
)
from dpcausal.methods.synth_control_plot import plot_png
from dpcausal.spec.synth_control import SynthControlSpec

COMMAND = "synth-control"
PAPER = "Rho, Cummings & Misra (AISTATS 2023), Differentially Private Synthetic Control"
NEIGHBOURING = {
    "relation": "replace-one donor",
    "unit": "one donor unit's whole series (all T periods, pre and post)",
    "n_public": True,
    "public": "target series, unit ids, donor count n, periods T and T0, treatment time, bounds",
}


def side_inputs(spec: SynthControlSpec) -> dict[str, SideInput]:
    """The panel's public structure: the unit and time columns of the data file (no outcome).

    Read before the plan, also by ``--dry-run``: the donor count n, T and T0 are public under the
    neighbouring relation (spec §1.3), and the plan's noise scales depend on them.
    """
    assert spec.data.path is not None
    return {"panel": SideInput(spec.data.path, structure_columns(spec),
                               "panel structure (unit and time columns of the data file)")}


def _lambda(spec: SynthControlSpec, t0: int) -> tuple[float, str]:
    lam = spec.synth_control.ridge_lambda
    if lam == "T0":
        return float(t0), "T0 (public rule)"
    return float(lam), "spec"


def _check_lambda(lam: float, n: int, t0: int) -> None:
    """Refuse, before any value is read, a λ so small that the Cholesky solve of the ridge
    (X_preX_preᵀ + (λ/2)I, entries of X in [−1, 1], norm ≤ nT0) could fail on the data: a failed
    factorisation would be an exit that depends on the data (issue #13)."""
    p = min(n, t0)
    slack = gamma(max(n, t0) + 1) * n * t0  # rounding of the computed Gram matrix
    if not cholesky_completes(p, n * t0 + lam / 2.0 + slack, lam / 2.0 - slack):
        raise SpecError(f"synth_control.lambda: {lam:g} is too small for a float64 ridge solve on "
                        f"{n} donors and {t0} pre-periods that cannot fail; raise it (default T0)")


def _check_mode(spec: SynthControlSpec) -> None:
    sec = spec.synth_control
    if sec.method == "obj" and not sec.allow_uncertified:
        raise UncertifiedModeError(
            "synth_control.method: obj (DPSC_obj, objective perturbation) is NOT differentially "
            "private as published: its privacy loss is unbounded in the output (spec §4.6). Use "
            "method: out (the certified default), or set synth_control.allow_uncertified: true to "
            "reproduce the paper with a receipt that says dp_guarantee: false"
        )
    if spec.privacy.delta != 0.0:
        raise SpecError("privacy.delta: synth-control is pure ε-DP (δ = 0); set privacy.delta to 0")


def plan(spec: SynthControlSpec, n_rows: int, side: dict[str, pd.DataFrame], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build the plan from the spec and the panel's public structure (n, T, T0) alone."""
    _check_mode(spec)
    sec = spec.synth_control
    omap = OutcomeMap.from_spec(spec)
    layout = build_layout(spec, side["panel"], spec.data.path)
    n, t0, h = layout.n, layout.t0, layout.h
    lam, lam_rule = _lambda(spec, t0)
    _check_lambda(lam, n, t0)
    eps = spec.privacy.epsilon
    eps1 = sec.epsilon_split * eps
    eps2 = eps - eps1
    step2 = core.choose_step2(sec.step2, n, h)
    post_mech = core.post_mechanism(step2, eps2, n, h)
    post_event = post_mech.event()
    post_event = type(post_event)(**{**post_event.to_dict(), "params": {
        **post_event.params, "variant": step2, "selected_by": sec.step2, "shape": [n, h],
        "variance_ratio_matrix_over_entrywise": core.step2_variance_ratio(n, h)}})
    details: dict[str, Any] = {**layout.to_dict(), "method": sec.method, "lambda": lam,
                               "lambda_rule": lam_rule, "epsilon1": eps1, "epsilon2": eps2,
                               "step2": step2}
    if sec.method == "out":
        delta, which = core.coefficient_sensitivity(sec.sensitivity, n, t0, lam)
        mech = core.coefficient_mechanism(eps1, delta, n)
        ev = mech.event()
        coef_event = type(ev)(**{**ev.to_dict(), "params": {
            **ev.params, "sensitivity_mode": sec.sensitivity, "sensitivity_formula": which,
            "lambda": lam, "T0": t0, "n": n,
            "paper_sensitivity": core.sensitivity_paper(n, t0, lam)}})
        sigma_v2 = core.coefficient_noise_variance(mech)
        rmse = np.sqrt(core.public_error_bound(n, t0, h, lam, sigma_v2,
                                               core.post_noise_variance(post_mech)))
        details.update(sensitivity=sec.sensitivity, sensitivity_value=delta,
                       noise_rmse_bound=float(rmse * omap.unit_scale))
    else:
        params = core.objective_parameters(n, t0, lam, eps1, sec.c)
        coef_event = core.objective_event(params, n, eps1, lam)
        details.update(sensitivity="n/a (uncertified objective perturbation)",
                       objective_branch=params.branch, epsilon0=params.epsilon0,
                       delta_reg=params.delta_reg)
    return PrivacyPlan(
        command=COMMAND,
        events=(coef_event, post_event),
        neighbouring=dict(NEIGHBOURING),
        guarantee="pure",
        dp_guarantee=sec.method == "out",
        assumptions={
            **omap.to_dict(),
            "target_public": True,
            "donor_list": "public: " + ("synth_control.donors" if sec.donors is not None
                                        else "every unit except the target"),
            "panel_structure_public": "unit ids, periods, n, T, T0 (read from the unit/time "
                                      "columns before any outcome value)",
            "composition": "basic sequential over the two steps (the same donors): ε1 + ε2",
        },
        details=details,
    )


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
        coef = core.coefficient_mechanism(eps1, plan.events[0].sensitivity, n)
        f_out = noise.release(coef, core.ridge_coefficients(x[:, :t0], y[:t0], lam))
    else:
        params = core.objective_parameters(n, t0, lam, eps1, sec.c)
        b = noise.objective_noise(core.objective_perturbation(params, n, eps1))
        f_out = core.objective_coefficients(x[:, :t0], y[:t0], lam, params, b)
    post = core.post_mechanism(plan.details["step2"], eps2, n, h)
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
    x, y = omap.forward(x_raw), omap.forward(y_raw)
    del x_raw
    y_out, f_out = counterfactual_path(spec, x, y, layout.t0, plan, noise=noise)
    del x
    counterfactual = omap.inverse(y_out)
    t0 = layout.t0
    effect = y_raw[t0:] - counterfactual
    table = pd.DataFrame({
        "time": [_plain(t) for t in layout.times],
        "period": ["pre"] * t0 + ["post"] * layout.h,
        "observed": y_raw,
        "counterfactual": np.concatenate([np.full(t0, np.nan), counterfactual]),
        "effect": np.concatenate([np.full(t0, np.nan), effect]),
    })
    avg, cum = float(np.mean(effect)), float(np.sum(effect))
    certified = spec.synth_control.method == "out"
    doc = effect_document(spec, layout, plan, avg, cum, certified)
    release = Release(documents={"effect.json": doc}, tables={"counterfactual": table})
    if spec.synth_control.release_weights:
        release.tables["weights"] = pd.DataFrame({
            "unit": [_plain(d) for d in layout.donors], "weight": f_out})
    note = (f"DPSC_out, {plan.details['sensitivity']} Δ, step 2 {plan.details['step2']}"
            if certified else "DPSC_obj: NO DP GUARANTEE")
    release.figures["synth_control.png"] = plot_png(
        table, target=str(_plain(layout.target)), epsilon=spec.privacy.epsilon, title_note=note)
    release.summary.update({
        "average_post_effect": avg, "cumulative_post_effect": cum, "n_donors": layout.n,
        "pre_periods": t0, "post_periods": layout.h, "step2": plan.details["step2"],
        "sensitivity": plan.details["sensitivity"],
    })
    return release


def effect_document(spec: SynthControlSpec, layout: PanelLayout, plan: PrivacyPlan, avg: float,
                    cum: float, certified: bool) -> dict[str, Any]:
    """The small JSON summary of the release (all post-processing of private values + public y)."""
    d = plan.details
    doc: dict[str, Any] = {
        "command": COMMAND,
        "method": (
            "DPSC_out (ridge + ℓ2-Laplace output perturbation, private post donors)" if certified
            else "DPSC_obj (objective perturbation) — UNCERTIFIED, no DP guarantee"),
        "paper": PAPER,
        "target": _plain(layout.target),
        "treatment_time": _plain(spec.synth_control.treatment_time),
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


METHOD = MethodDef(
    command=COMMAND, spec_model=SynthControlSpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan, run=run,
)

__all__ = ["METHOD", "counterfactual_path", "plan", "run"]
