"""cate's privacy plan, from the spec, the public row count and the public query file."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import Guarantee, PredictedAccuracy, PrivacyPlan
from dpcausal.commands.cate.privacy import (
    arm_nuisance_learners,
    certified_gamma,
    function_mechanism,
    nuisance_learners,
    point_noise_sd,
    queries_mechanism,
    split_alternative,
)
from dpcausal.commands.cate.queries import query_count, query_points
from dpcausal.commands.cate.release import estimand, noise_law
from dpcausal.commands.cate.setup import (
    NUISANCE_PART,
    SECOND_PART,
    CateSetup,
    build_setup,
    noise_factor,
)
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common import row_split
from dpcausal.errors import SpecError
from dpcausal.learners.penalty import shrinkage_warnings
from dpcausal.mechanisms.noise_law import gaussian_halfwidth


def _tag(event: PrivacyEvent, partition: str) -> PrivacyEvent:
    return dataclasses.replace(event, partition=partition)


def _with_params(event: PrivacyEvent, extra: dict[str, Any]) -> PrivacyEvent:
    return dataclasses.replace(event, params={**event.params, **extra})


def plan(spec: CateSpec, n_rows: int, side: dict[str, Any], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build the plan from the spec, the public row count and the public query file."""
    setup = build_setup(spec, n_rows)
    sec = spec.cate
    if spec.engine is not None and sec.features != "rff":
        raise SpecError(
            f"cate.features: '{sec.features}' (the exact n × n kernel ridge) has no engine path; "
            "set cate.features: rff (random Fourier features, any n) to run on an engine, or "
            "remove the spec's engine section and --engine to run in memory")
    row_split.refuse_on_engine(sec.split, spec.engine, "cate.split")
    if sec.multi_arm and spec.engine is not None:
        raise SpecError("cate.arms: K ≥ 3 arms run in memory only for now; remove the engine "
                        "section (and --engine)", field="engine")
    d = query_count(spec, setup, side)
    prop, out = (arm_nuisance_learners(spec, setup) if sec.multi_arm
                 else nuisance_learners(spec, setup))
    for field, problem in (("propensity_l2", prop.problem()), ("outcome_l2", out.problem())):
        if problem is not None:  # public settings only: refused before any row is read
            raise SpecError(f"cate.nuisance.{field}: {problem}; raise it")
    # the solves' public accuracy (learners/rounding.py), already inside the sensitivities
    events = [_with_params(_tag(prop.mechanism().event(), NUISANCE_PART),
                           {"solver_distance_to_minimiser": prop.accuracy.distance,
                            "solver_stop_tol": prop.accuracy.stop_tol}),
              _with_params(_tag(out.mechanism().event(), NUISANCE_PART),
                           {"solver_error_per_arm": out.solve_error,
                            "centred_outcome_bound": out.half_range})]
    query_source: dict[str, Any] = (
        {"file": str(sec.queries), "rows": d, "sha256_of_covariates_csv": hashlib.sha256(
            query_points(spec, setup, side)[list(setup.covariates)].to_csv(index=False).encode()
        ).hexdigest()}
        if sec.queries is not None else {"grid": sec.grid.model_dump() if sec.grid else None,
                                         "rows": d})
    details: dict[str, Any] = {"mode": sec.mode, "learner": sec.learner, "queries": d,
                               "n_nuisance_half": setup.n_nuisance, "n_second_half": setup.n,
                               "composition": "the two nuisance mechanisms (first half) and the "
                                              "second stage (second half) read disjoint rows of a "
                                              "data-independent split: total = max, not sum"}
    acc = setup.accuracy
    details["second_stage_solver"] = (
        f"within {acc.target:.3g} of the exact minimiser (RKHS norm; solver error and float64 "
        f"rounding, a public bound) whether Newton certifies or the public {acc.steps}-step "
        "fallback runs; never refuses after the data is read" + (
            f"; the sensitivity includes its slack tau/lambda0 = {acc.tol / setup.lam0:.3g}"
            if sec.mode == "function" else ""))
    penalties = {"propensity": setup.propensity_l2, "outcome": setup.outcome_l2,
                 "second_stage": setup.ridge_choice}
    warnings = shrinkage_warnings(penalties, details)
    if sec.mode == "function":
        mech = function_mechanism(spec, setup)
        ev = mech.event()
        ev = dataclasses.replace(ev, params={
            **ev.params, "sensitivity_formula": sec.sensitivity_formula,
            "corrected_rkhs_sensitivity": setup.rkhs_sensitivity,
            "formula_factor": noise_factor(spec, setup), "lipschitz_L_w": setup.lipschitz_w,
            "ridge_lambda0": setup.lam0, "n": setup.n,
            "sigma_classic": mech.sigma_classic, "sigma_analytic": mech.sigma_analytic,
            "query_rounding_allowance": setup.query_rounding})
        if sec.features == "rff":
            ev = dataclasses.replace(ev, params={
                **ev.params, "kernel": "random Fourier features of the Gaussian kernel",
                "rff_pairs_m": sec.rff_dim, "rff_seed": sec.rff_seed,
                "covariance": "sigma^2 * I on the 2m feature weights"})
        if sec.multi_arm:
            ev = _with_params(ev, _contrast_params(spec, setup))
        events.append(_tag(_with_params(ev, _solver_params(setup)), SECOND_PART))
        details["noise_sd_per_point"] = mech.sigma
        if sec.multi_arm:
            details.update(_contrast_details(spec, setup, mech.sigma))
        if mech.sigma > setup.delta_y:
            warnings.append(f"the per-point noise sd {mech.sigma:.3g} exceeds the outcome range "
                            f"{setup.delta_y:g}: the release will be mostly noise (raise ε, n or "
                            "cate.ridge)")
        guarantee: Guarantee = "approximate"
    else:
        gamma = certified_gamma(setup, d) if sec.gamma_method == "certified" else None
        qm = queries_mechanism(spec, setup, d, gamma)
        events.append(_tag(_with_params(qm.event(), _solver_params(setup)), SECOND_PART))
        if gamma is not None:
            details["noise_sd_per_query"] = qm.sigma
        if spec.privacy.epsilon > 1.0:
            warnings.append("queries mode: Thm 1's constants come from small-ε smooth-sensitivity "
                            "results; ε > 1 is outside their usual range")
        guarantee = "asymptotic"
    if sec.learner == "dr":
        warnings.append(f"DR-learner: pseudo-outcomes scale like 1/κ = {1 / setup.kappa:g}; "
                        "expect much more noise than the R-learner")
    if warnings:
        details["warning"] = " | ".join(warnings)
    sd = point_noise_sd(spec, setup, d)
    accuracy = () if sd is None else (PredictedAccuracy(
        "cate", "outcome units", gaussian_halfwidth(sd, spec.accuracy.alpha), spec.accuracy.alpha,
        "noise", noise_law(spec, sd), headline=True,
        note="a larger ε, more rows, or a larger cate.ridge (more shrinkage)"),)
    return PrivacyPlan(
        command="cate",
        events=tuple(events),
        neighbouring={"relation": "replace-one", "unit": "row (one individual)", "n_public": True,
                      "row_order": row_split.row_order(sec.split),
                      "composition": "parallel over the split into D~ (nuisances) and D "
                                     "(second stage): total (ε, δ); sequential would be (2ε, 2δ)"},
        guarantee=guarantee,
        dp_guarantee=True,
        assumptions={
            "outcome_bounds": list(setup.y_bounds),
            "covariate_bounds": {c: list(setup.box_bounds(c)) for c in setup.covariates},
            "treatment_values": ({"arms": list(sec.labels()), "control": sec.control_label()}
                                 if sec.multi_arm else
                                 {"treated": sec.treated, "control": sec.control_label()}),
            "outcome_direction": sec.outcome_direction,
            "estimand": estimand(spec),
            "queries": query_source,
            "features": sec.features,
            "split": {**sec.split.receipt(), "first_half_fraction": sec.first_half_fraction},
            "nuisance": {"propensity": "DP l2-logistic, Gaussian output perturbation",
                         "outcome": "DP ridge per arm, joint Gaussian output perturbation",
                         "propensity_l2": prop.l2,
                         "outcome_l2": out.l2,
                         "propensity_share": sec.nuisance.propensity_share},
            "penalties": {k: c.to_dict() for k, c in penalties.items() if c is not None},
            **setup.public_dict(),
            "one_row_per_individual": True,
        },
        details=details,
        accuracy=accuracy,
    )


def _contrast_details(spec: CateSpec, setup: CateSetup, sigma: float) -> dict[str, Any]:
    """The dry run's lines for K ≥ 3 arms: each contrast (one path of the joint release) and the
    rejected per-contrast split with its larger noise (docs/proofs/cate.md §10)."""
    sec = spec.cate
    arms = sec.contrast_arms()
    r = len(arms)
    split = split_alternative(spec, setup).sigma
    out: dict[str, Any] = {
        f"contrast {i + 1}": f"arm {k!r} vs control {sec.control_label()!r}: one path of "
                             f"cate.second_stage.function, noise sd {sigma:.4g} at each point"
        for i, k in enumerate(arms)}
    out["contrasts_release"] = (
        f"the {r} contrasts jointly: one Gaussian-process mechanism with {r} independent paths at "
        f"sensitivity sqrt({r})·Δ_H (a control row enters every contrast), full (ε, δ); noise "
        f"sd {sigma:.4g} per point, against {split:.4g} for {r} separate releases at "
        f"(ε/{r}, δ/{r}) and Δ_H (never smaller: docs/proofs/cate.md §10)")
    return out


def _contrast_params(spec: CateSpec, setup: CateSetup) -> dict[str, Any]:
    """The receipt's record of the K-arm joint release: the contrasts (one path each, in order),
    the sensitivity's composition and the rejected split's noise (docs/proofs/cate.md §10)."""
    sec = spec.cate
    r = len(sec.contrast_arms())
    return {"contrasts": [{"path": i + 1, "arm": k, "control": sec.control_label()}
                          for i, k in enumerate(sec.contrast_arms())],
            "sensitivity_is": f"formula_factor * sqrt({r}) * corrected_rkhs_sensitivity (the "
                              "per-contrast bound; one row can enter every contrast)",
            "joint_release": f"one draw, {r} independent paths, full (epsilon, delta); never "
                             f"noisier than {r} releases at (epsilon/{r}, delta/{r})",
            "sigma_if_split_per_contrast": split_alternative(spec, setup).sigma}


def _solver_params(setup: CateSetup) -> dict[str, Any]:
    """The second-stage solve's public accuracy (rff_accuracy.py, krr_accuracy.py): whichever way
    it ends (certificate or the guaranteed fallback) it is within the distance bound of the exact
    minimiser, rounding included; the solver slack is inside the sensitivity (function mode)."""
    acc = setup.accuracy
    how = ("projected gradient descent on the feature weights" if setup.rff_accuracy is not None
           else "gradient descent in the RKHS from g = 0")
    return {"solver_grad_tol": acc.tol, "solver_distance_bound": acc.target,
            "solver_fallback": f"{how}, step 2/(L+2*lambda0), {acc.steps} passes (public), "
                               "when Newton does not certify",
            "solver_fallback_steps": acc.steps}

