"""synth-control's privacy plan, from the spec and the panel's public structure (n, T, T0) alone."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from dpcausal.accounting.plan import PredictedAccuracy, PrivacyPlan
from dpcausal.commands.synth_control import dpsc, ridge_penalty
from dpcausal.commands.synth_control.capped_plan import plan_capped
from dpcausal.commands.synth_control.layout import build_layout
from dpcausal.commands.synth_control.panel import OutcomeMap, PanelLayout
from dpcausal.commands.synth_control.setup import (
    COMMAND,
    NEIGHBOURING,
    check_lambda,
    check_mode,
)
from dpcausal.commands.synth_control.spec import SynthControlSpec


def plan(spec: SynthControlSpec, n_rows: int, side: Mapping[str, Any], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build the plan from the spec and the panel's public structure (n, T, T0) alone (``side``:
    the unit and time columns as an Arrow table, the side input "panel")."""
    check_mode(spec)
    sec = spec.synth_control
    omap = OutcomeMap.from_spec(spec)
    layout = build_layout(spec, side["panel"], spec.data.path)
    if sec.method == "capped":
        return plan_capped(spec, layout)
    n, t0, h = layout.n, layout.t0, layout.h
    eps1, eps2 = epsilons(spec)
    step2 = dpsc.choose_step2(sec.step2, n, h)
    penalty = penalty_of(spec, layout)
    lam = penalty.lam
    check_lambda(lam, n, t0)
    post_mech = dpsc.post_mechanism(step2, eps2, n, h)
    post_event = post_mech.event()
    post_event = type(post_event)(**{**post_event.to_dict(), "params": {
        **post_event.params, "variant": step2, "selected_by": sec.step2, "shape": [n, h],
        "variance_ratio_matrix_over_entrywise": dpsc.step2_variance_ratio(n, h)}})
    details: dict[str, Any] = {**layout.to_dict(), "method": sec.method, "lambda": lam,
                               "lambda_rule": penalty.rule, "epsilon1": eps1, "epsilon2": eps2,
                               "step2": step2,
                               "shrinkage_at_bounds": ridge_penalty.shrinkage(lam, t0),
                               "warning_shrinkage": ridge_penalty.shrinkage_warning(penalty, t0)}
    if sec.method == "out":
        sensitivity, which = dpsc.coefficient_sensitivity(sec.sensitivity, n, t0, lam)
        mech = dpsc.coefficient_mechanism(eps1, sensitivity, n)
        ev = mech.event()
        coef_event = type(ev)(**{**ev.to_dict(), "params": {
            **ev.params, "sensitivity_mode": sec.sensitivity, "sensitivity_formula": which,
            "lambda": lam, "T0": t0, "n": n,
            "paper_sensitivity": dpsc.sensitivity_paper(n, t0, lam)}})
        sigma_v2 = dpsc.coefficient_noise_variance(mech)
        rmse = np.sqrt(dpsc.public_error_bound(n, t0, h, lam, sigma_v2,
                                               dpsc.post_noise_variance(post_mech)))
        details.update(sensitivity=sec.sensitivity, sensitivity_value=sensitivity,
                       noise_rmse_bound=float(rmse * omap.unit_scale))
        accuracy = out_accuracy(float(rmse * omap.unit_scale), spec.accuracy.alpha)
    else:
        params = dpsc.objective_parameters(n, t0, lam, eps1, sec.c)
        coef_event = dpsc.objective_event(params, n, eps1, lam)
        accuracy = ()
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
        accuracy=accuracy,
    )


def epsilons(spec: SynthControlSpec) -> tuple[float, float]:
    """(ε1, ε2) of DPSC: the coefficients' share and the post-period donors' rest."""
    eps1 = spec.synth_control.epsilon_split * spec.privacy.epsilon
    return eps1, spec.privacy.epsilon - eps1


def penalty_of(spec: SynthControlSpec, layout: PanelLayout) -> ridge_penalty.PenaltyChoice:
    """DPSC's λ for this spec and panel structure (public inputs only)."""
    sec = spec.synth_control
    eps1, eps2 = epsilons(spec)
    step2 = dpsc.choose_step2(sec.step2, layout.n, layout.h)
    return ridge_penalty.choose(sec.ridge_lambda, sec.sensitivity, step2, layout.n, layout.t0,
                                layout.h, eps1, eps2)


def out_accuracy(rms_bound: float, alpha: float) -> tuple[PredictedAccuracy, ...]:
    """DPSC_out's noise half-widths: Chebyshev from the public per-period variance bound V.

    The noise of the counterfactual at one post period, x_tᵀv + w_tᵀf_reg + w_tᵀv, has variance
    ≤ V (spec §5.5 with ‖x_t‖² ≤ n and ‖f_reg‖² ≤ T0/(2λ)), and so does their average over the
    post periods (Cauchy–Schwarz); P(|noise| > √(V/α)) ≤ α. A bound (coverage ≥ 1 − α): the law of
    a product of two noisy factors has no public closed form.
    """
    hw = rms_bound / math.sqrt(alpha)
    law = f"Chebyshev from the noise RMS bound {rms_bound:.4g}"
    return (PredictedAccuracy("average_post_effect", "outcome units", hw, alpha, "noise", law,
                              bound=True, headline=True),
            PredictedAccuracy("counterfactual", "outcome units", hw, alpha, "noise", law,
                              bound=True))
