"""two-stage's privacy plan, from the spec and the public n (no row is read)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.two_stage import center
from dpcausal.commands.two_stage.calibration import calibrate, noise_to_signal
from dpcausal.commands.two_stage.penalty import choose_radius
from dpcausal.commands.two_stage.privacy import mechanism, stability_bounds, stage1_dual
from dpcausal.commands.two_stage.rule import rule_noise
from dpcausal.commands.two_stage.setup import (
    M_X,
    MMD_MAX_ROWS,
    TwoStageSetup,
    build_setup,
    mmd_box,
    refuse_mmd_on_engine,
)
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.errors import DataError, PrivacyError, SpecError, UncertifiedModeError
from dpcausal.learners.rounding import cholesky_completes
from dpcausal.learners.rounding import gamma as rounding_gamma
from dpcausal.mechanisms import ObjectivePerturbation

if TYPE_CHECKING:
    import pandas as pd

STAGE1_FALLBACK = ("uniform weights (w = 1) if the stage-1 program is infeasible or its solve "
                   "fails; the bound in use holds for any weights, so nothing is refused")


def plan(spec: TwoStageSpec, n_rows: int, side: dict[str, pd.DataFrame], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build the plan from the spec and the public n (no row is read)."""
    sec = spec.two_stage
    delta = spec.privacy.delta
    if sec.noise == "gamma" and delta != 0.0:
        raise SpecError("privacy.delta: noise: gamma is pure ε-DP; set privacy.delta to 0 "
                        "(or use two_stage.noise: gaussian)")
    if sec.noise == "gaussian" and delta == 0.0:
        raise SpecError("privacy.delta: noise: gaussian needs privacy.delta > 0 (e.g. 1e-6, "
                        "well below 1/n)")
    if sec.calibration == "paper" and not sec.allow_uncertified:
        raise UncertifiedModeError(
            "two_stage.calibration: 'paper' reproduces the paper's calibration, which leaks "
            "(privacy loss up to ≈1.13ε); set two_stage.allow_uncertified: true to run it as a "
            "reproduction without a DP guarantee, or use calibration: safe"
        )
    refuse_mmd_on_engine(spec)
    if n_rows < 2:
        raise DataError("the data file needs at least 2 rows")
    if sec.weights == "mmd" and n_rows > MMD_MAX_ROWS:
        raise SpecError(
            f"weights: mmd forms an n × n kernel matrix and is limited to {MMD_MAX_ROWS} rows "
            f"(the file has {n_rows}); use weights: ebw or ipw-logit for large files"
        )
    setup = build_setup(spec)
    bounds = stability_bounds(spec, setup, n_rows)
    dim = setup.fmap.dim
    eps_center, eps2 = center.epsilons(spec)  # stage 2 gets ε minus the private centre's share
    choice = choose_radius(explicit=sec.l1_radius, scale=sec.l1_scale, n=n_rows, dim=dim, m_x=M_X,
                           m_y=setup.m_y, m_inf=setup.m_inf, epsilon=eps2,
                           delta=delta, eps_split=sec.eps_split, noise=sec.noise, bounds=bounds,
                           mode=sec.calibration, gamma=sec.gamma)
    setup = dataclasses.replace(setup, l1_radius=choice.radius)
    cal = calibrate(n=n_rows, dim=dim, m_x=M_X, m_inf=setup.m_inf, m_y=setup.m_y,
                    l1_radius=setup.l1_radius,
                    epsilon=eps2, delta=delta, eps_split=sec.eps_split,
                    noise=sec.noise, bounds=bounds, mode=sec.calibration)
    mech = mechanism(spec, cal, dim)  # first: an ε too small for float64 is named as such
    gamma = cal.gamma_required if sec.gamma is None else sec.gamma
    if gamma < cal.gamma_required:
        raise PrivacyError(
            f"two_stage.gamma: {sec.gamma:g} is below γ_required = {cal.gamma_required:.6g} for "
            f"stage 2's ε = {eps2:g} and n = {n_rows}; raise it or omit it (default γ_required)"
        )
    # P = (2/n)H + γI, ‖(2/n)H‖ ≤ 2 (Σw = n, ‖x‖ ≤ 1): a factorisation that could fail on the data
    # would be an exit that depends on it, so a γ too small for float64 is refused here (public)
    slack = 2.0 * rounding_gamma(n_rows + 2)
    if not cholesky_completes(dim, 2.0 + gamma + slack, gamma - slack):
        raise SpecError(f"two_stage.gamma: γ = {gamma:.3g} is too small for a float64 stage-2 solve "
                        f"with {dim} features that cannot fail; raise two_stage.gamma (or lower ε)")
    # the event of the whole mechanism (noise law + Jacobian term), marked as objective
    # perturbation so every accountant composes it by its stated (ε, δ) (mechanisms/registry.py)
    base = ObjectivePerturbation(mech, eps2, delta).event()
    rho = noise_to_signal(cal, n_rows)
    params = {**base.params, "noise": sec.noise, "calibration": sec.calibration,
              "epsilon_noise_term": cal.noise_epsilon, "epsilon_jacobian_term": cal.hessian_epsilon,
              "gamma": gamma, "gamma_required": cal.gamma_required, "zeta": cal.zeta,
              "lambda_H": cal.lambda_h, "stability": bounds.to_dict(), "l_tilde": cal.l_tilde,
              "n": n_rows}
    event = dataclasses.replace(base, params=params)
    events: tuple[PrivacyEvent, ...] = (event,)
    if setup.private_center:
        cmech = center.mechanism(spec, setup, n_rows)
        cev = cmech.event()
        cev = dataclasses.replace(cev, params={
            **cev.params, "what": "mean of the outcome clipped to bounds.outcome",
            "share_of_epsilon": sec.center_share, "clamped_to": [setup.lower, setup.upper],
            "winsorised_at": setup.half_range})
        events = (event, cev)  # in the draw order: b (reads no data) first, then the centre
    details: dict[str, Any] = {
        "weights": sec.weights, "sensitivity": sec.sensitivity, "calibration": sec.calibration,
        "noise": sec.noise, "n_rows": n_rows, "dim": dim, "gamma": gamma,
        "gamma_required": cal.gamma_required, "noise_scale": cal.scale,
        "expected_noise_norm": cal.expected_noise_norm, "noise_to_signal": rho,
        "zeta": cal.zeta, "l1_radius": choice.radius, "l1_choice": choice.to_dict(),
        "outcome_center": _center_details(spec, setup, n_rows, eps_center),
        "W1s_bar": bounds.w1s, "W2aug_bar": bounds.w2aug,
        "stability": bounds.to_dict(),
        # public: whether stage 1 must certify its accuracy (only when the bound in use is
        # method-specific; a clipped-to-universal bound holds for any weights)
        "stage1_certified": (sec.sensitivity == "method" and sec.weights in ("ipw-logit", "ebw")
                             and bounds.method_specific(sec.calibration)),
        # public: what stage 1 does when its solve fails (never a refusal: that would be an output)
        "stage1_fallback": _stage1_fallback(spec, setup, n_rows, bounds.method_specific(
            sec.calibration)),
    }
    if (shrink := choice.warning()) is not None:
        details["warning_shrinkage"] = shrink
    if rho > 1.0:
        details["warning"] = (f"noise-to-signal ratio {rho:.3g} > 1: the released rule is likely "
                              "close to random; raise ε or n, or use a more stable weight method")
    if sec.noise == "gaussian" and delta >= 1.0 / n_rows:
        details["warning_delta"] = (f"δ = {delta:g} ≥ 1/n = {1.0 / n_rows:.3g} is weak (it allows "
                                    "releasing a row outright); prefer δ ≪ 1/n")
    if sec.calibration == "paper":
        details["uncertified"] = "calibration: paper leaks (privacy loss up to ≈1.13ε): no DP guarantee"
    plan = PrivacyPlan(
        command="two-stage",
        events=events,
        neighbouring={"relation": "replace-one", "unit": "row (one individual)", "n_public": True},
        guarantee="pure" if sec.noise == "gamma" else "approximate",
        dp_guarantee=sec.calibration == "safe",
        assumptions={
            "outcome_bounds": list(spec.bounds.outcome or ()),
            "outcome_direction": sec.outcome_direction,
            "outcome_center": "private" if setup.private_center else setup.center,
            "M_y": setup.m_y, "M_x": M_X, "M_inf": setup.m_inf,
            "covariate_bounds": setup.fmap.to_dict()["bounds"],
            "l1_radius": setup.l1_radius,
            "weights": sec.weights, "sensitivity": sec.sensitivity,
            "weight_hyperparameters": _weight_params(spec, setup),
            "stage1_released": False,
            "one_row_per_individual": True,
        },
        details=details,
    )
    accuracy = rule_noise(spec, plan).accuracy(setup.fmap, n_search=True)
    if setup.private_center:
        accuracy = (*accuracy, center.accuracy(spec, setup, n_rows))
    return dataclasses.replace(plan, accuracy=accuracy)


def _center_details(spec: TwoStageSpec, setup: TwoStageSetup, n: int,
                    eps_center: float) -> dict[str, Any]:
    """The plan's record of the outcome centre (public: its source, and for a private centre its
    share of ε, sensitivity, Laplace scale and winsorising bound)."""
    if not setup.private_center:
        source = "midpoint" if spec.two_stage.outcome_center == "midpoint" else "public"
        value = -setup.center if spec.two_stage.outcome_direction == "lower" else setup.center
        return {"source": source, "value": value, "epsilon": 0.0}
    mech = center.mechanism(spec, setup, n)
    return {"source": "private", "epsilon": eps_center, "share": spec.two_stage.center_share,
            "sensitivity": mech.l1_sensitivity, "laplace_scale": mech.scale,
            "winsorised_at": setup.half_range,
            "rule": "c = clamp(mean of clip(y, L, U) + Laplace(Δ/ε_c), L, U); stage 2 fits "
                    "2·clip(y − c, ±(U − L)/2)·ã with ε − ε_c"}


def _stage1_fallback(spec: TwoStageSpec, setup: TwoStageSetup, n: int, specific: bool) -> str:
    """What stage 1 does when its solve fails (public; never a refusal: that would be an output)."""
    if not specific:
        return STAGE1_FALLBACK
    dual = stage1_dual(spec, setup, n)
    if dual is None:
        return "none needed (closed form)"
    return (f"if the dual does not certify: projected gradient descent, {dual.steps} steps, within "
            "the planned solver slack by proof (the same sensitivity)")


def _weight_params(spec: TwoStageSpec, setup: TwoStageSetup) -> dict[str, Any]:
    sec = spec.two_stage
    name = sec.weights.replace("-", "_")
    section = getattr(sec, name, None) if name != "uniform" else None
    out: dict[str, Any] = section.model_dump(mode="json") if section is not None else {}
    if setup.u_range is not None:
        out["inverse_propensity_range"] = list(setup.u_range)
    if sec.weights == "mmd" and sec.mmd is not None:
        out["box_effective"] = mmd_box(sec.mmd)
    return out
