"""The privacy plan of ``cate`` with ``estimand: ate``, and its predicted half-widths, from the spec
and the public row count alone."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PredictedAccuracy, PrivacyPlan
from dpcausal.commands.cate.ate_interval import total_halfwidth, variance_inflation
from dpcausal.commands.cate.ate_release import DENOMINATOR_ALPHA
from dpcausal.commands.cate.ate_setup import (
    SPLIT,
    AteSetup,
    build_ate_setup,
    nuisance_learners,
    public_units,
    unit_mechanisms,
)
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common import row_split
from dpcausal.errors import SpecError
from dpcausal.learners.dp_means import OutcomeMeans
from dpcausal.learners.dp_objective import ObjectiveLogistic
from dpcausal.learners.penalty import shrinkage_warnings

UNITS = {
    "estimate": "R = sup u - inf u over the domain given the released nuisance models",
    "denominator": "sup v - inf v, v = e(1-e), given the released propensity model",
    "variance": "E^2, E = max |u - tau v| over the domain at the released estimate tau",
    "groups.sums": "E (l1 sensitivity 2m per unit, m = the most groups a row can be in)",
    "groups.sizes": "sup v (l1 sensitivity 2m per unit)",
    "groups.variance": "E^2 (l1 sensitivity 2m per unit)",
}
"""What each score-stage mechanism's unit is (its sensitivity is 1 or 2m per unit)."""


def _fold_parts(setup: AteSetup) -> list[tuple[int | None, str | None]]:
    if setup.rows == "crossfit":
        return [(k, f"{SPLIT}/fold{k + 1}") for k in range(len(setup.n_nuisance))]
    return [(None, f"{SPLIT}/nuisance" if setup.rows == "split" else None)]


def nuisance_events(setup: AteSetup) -> list[PrivacyEvent]:
    """The DP nuisance models' events, tagged with their part of the rows (split, crossfit)."""
    events: list[PrivacyEvent] = []
    for fold, part in _fold_parts(setup):
        prop, out = nuisance_learners(setup, fold)
        for field, learner in (("propensity_l2", prop), ("outcome_l2", out)):
            if learner is None:
                continue
            if isinstance(learner, OutcomeMeans):
                for mech in learner.mechanisms():
                    ev = mech.event()
                    events.append(dataclasses.replace(ev, partition=part, params={
                        **ev.params, "model": learner.description, "rows": learner.m}))
                continue
            problem = learner.problem()
            if isinstance(learner, ObjectiveLogistic):
                if problem is not None:  # public settings only
                    raise SpecError(f"cate.ate.propensity_learner: {problem} (raise privacy."
                                    "epsilon, nuisance_share or cate.nuisance.propensity_share)",
                                    field="cate.ate.propensity_learner")
                for ev in (learner.objective().event(), learner.output().event()):
                    events.append(dataclasses.replace(ev, partition=part, params={
                        **ev.params, "model": "propensity, objective perturbation",
                        "l2": learner.l2, "rows": learner.m}))
                continue
            if problem is not None:  # public settings only: refused before any row is read
                raise SpecError(f"cate.nuisance.{field}: {problem}; raise it",
                                field=f"cate.nuisance.{field}")
            ev = learner.mechanism().event()
            events.append(dataclasses.replace(ev, partition=part, params={
                **ev.params, "l2": learner.l2, "rows": learner.m}))
    return events


def score_events(setup: AteSetup) -> list[PrivacyEvent]:
    """The score stage's per-unit Laplace events (on the scored rows)."""
    part = f"{SPLIT}/scored" if setup.rows == "split" else None
    mechs = unit_mechanisms(setup)
    out = []
    for name, mech in (("estimate", mechs.estimate), ("denominator", mechs.denominator),
                       ("variance", mechs.variance), ("groups.sums", mechs.group_sums),
                       ("groups.sizes", mechs.group_sizes),
                       ("groups.variance", mechs.group_variance)):
        if mech is None:
            continue
        ev = mech.event()
        out.append(dataclasses.replace(ev, partition=part, params={
            **ev.params, "scale_is": f"per unit of {UNITS[name]} (the unit is released in "
                                     "ate.json: 'units')", "rows": setup.n_scored}))
    return out


def predicted(spec: CateSpec, setup: AteSetup) -> tuple[PredictedAccuracy, ...]:
    """The predicted half-widths (the dry run's accuracy table, ``accuracy.max_halfwidth`` and
    the planner): the noise's at the public worst case of the nuisance models (a bound: the
    release's own sensitivities are never larger), and the total one at the spec's
    ``planning_sd`` or ``sd_bound`` when given (a prediction at that sd, not a bound)."""
    ate = spec.cate.ate_spec
    alpha = spec.accuracy.alpha
    b = setup.budget
    units = public_units(setup, ate.propensity)
    n = setup.n_scored
    weight = n * units["v_min"]
    noise_b = units["estimate"] / (b.estimate * weight)
    name = "ate" if setup.weights == "clipped" else "ato"
    noise_h = noise_b * math.log(1.0 / alpha)
    law = f"Laplace of scale {noise_b:.4g} at the worst-case nuisance models"
    if setup.weights == "overlap":  # the released denominator's noise, union-bounded at α/20
        noise_h = noise_b * math.log(1.0 / (alpha * (1.0 - DENOMINATOR_ALPHA)))
        y_lo, y_hi = setup.y_bounds
        noise_h += ((y_hi - y_lo) * units["denominator"] / (b.denominator * weight)
                    * math.log(1.0 / (alpha * DENOMINATOR_ALPHA)))
        law += " + the denominator's Laplace term (union bound, at |ATO| = the outcome range)"
    out = [PredictedAccuracy(name, "outcome units", noise_h, alpha, "noise", law, bound=True,
                             headline=True,
                             note="a larger ε, more rows, a larger propensity_clip, or "
                                  "weights: overlap")]
    sd = ate.sd_bound if ate.variance == "bound" else ate.planning_sd
    if sd is not None:
        beta = (units["e_max"] ** 2 / (b.variance * weight * weight)
                if ate.variance == "private" else 0.0)
        k = variance_inflation(noise_b, beta, alpha) if beta > 0 else 0.0
        s2 = sd * sd / n
        out.append(PredictedAccuracy(
            f"{name}_total", "outcome units",
            total_halfwidth(math.sqrt(s2 + k * beta), noise_b, alpha), alpha, "total",
            f"normal sampling error at sd {sd:g} per row (cate.ate."
            f"{'sd_bound' if ate.variance == 'bound' else 'planning_sd'}) + the noise",
            bound=False))
        out.append(PredictedAccuracy(
            f"{name}_sampling_only", "outcome units", total_halfwidth(math.sqrt(s2), 0.0, alpha),
            alpha, "total", f"the non-private interval at sd {sd:g} per row (for comparison)",
            bound=False, n_search=True))
    return tuple(out)


def ate_plan(spec: CateSpec, n_rows: int, side: dict[str, Any], *,
             rng: np.random.Generator) -> PrivacyPlan:
    """Build the plan from the spec and the public row count."""
    setup = build_ate_setup(spec, n_rows)
    sec = spec.cate
    ate = sec.ate_spec
    if spec.engine is not None:
        raise SpecError("cate.estimand: ate runs in memory only; remove the spec's engine section "
                        "and --engine", field="engine")
    events = nuisance_events(setup) + score_events(setup)
    accuracy = predicted(spec, setup)
    details: dict[str, Any] = {
        "estimand": "ATE" if setup.weights == "clipped" else "ATO (overlap weights)",
        "nuisance_rows": setup.rows, "rows_fitting_nuisances": list(setup.n_nuisance),
        "rows_scored": setup.n_scored, "groups": len(ate.groups),
        "outcome_model": setup.outcome, "propensity_learner": setup.propensity_learner,
    }
    if setup.propensity_learner == "objective":
        details["note_propensity"] = (
            "objective perturbation: the propensity model is barely shrunk but carries noise "
            "that the total interval does not include (benchmarks/RESULTS.md, issue #19)")
    if setup.residual_clip is not None:
        details["note_residual_clip"] = (
            f"every residual Y - mu_a(X) in the scores is clipped to [-{setup.residual_clip:g}, "
            f"{setup.residual_clip:g}] (cate.ate.residual_clip): less noise, but the interval "
            "assumes the outcome model is close to right and the residuals beyond that are rare "
            "or symmetric (double robustness is lost: a far-off outcome model or a one-sided "
            "tail biases the estimate, and the interval does not include that bias)"
            + ("; with outcome_model: pooled mu_0 = mu_1 = the pooled DP mean, so r bounds the "
               "outcome's own spread around it" if setup.outcome == "pooled" else ""))
    if ate.groups:
        details["note_groups"] = ("a group's half-width grows like 1/(its size), which is private: "
                                  "it is not predicted; its released size is in ate.csv")
    hint = ("; for observational data consider configs/cate_ate_observational.yaml: "
            "propensity_learner: objective, outcome_model: pooled and, with a public outcome sd "
            "s, residual_clip: 3 s, nuisance_share: 0.65, variance_share: 0.2, "
            "cate.nuisance.propensity_share: 0.95, cate.propensity_clip: 0.1 (covered 94-95% "
            "there at epsilon 1 and 5, at 1.4x the non-private width at epsilon 5)") if (
        setup.propensity_learner == "output") else ""
    warnings = shrinkage_warnings(
        {"propensity": setup.propensity_l2, "outcome": setup.outcome_l2}, details,
        ", and the doubly robust correction relies on the other model; the total interval does "
        "not include the confounding this can leave (on an NHEFS-shaped observational "
        "simulation it covered 80% at a nominal 95%: benchmarks/RESULTS.md)" + hint)
    if warnings:
        details["warning"] = " | ".join(warnings)
    composition = {"all": "the nuisance models and the score releases read every row: their ε "
                          "and δ add up",
                   "split": "the nuisance models (first part) and the score releases (second "
                            "part) read disjoint parts of a data-independent split: total = max",
                   "crossfit": "each fold's nuisance models read only that fold (total over "
                               "folds = max); the score releases read every row (added)"}
    return PrivacyPlan(
        command="cate",
        events=tuple(events),
        neighbouring={"relation": "replace-one", "unit": "row (one individual)", "n_public": True,
                      "row_order": row_split.row_order(sec.split),
                      "composition": composition[setup.rows]},
        guarantee="approximate" if any(ev.delta > 0 for ev in events) else "pure",
        dp_guarantee=True,
        assumptions={
            "estimand": "ate", "weights": setup.weights,
            "outcome_bounds": list(setup.y_bounds),
            "covariate_bounds": {c: [float(setup.box.lo[i]), float(setup.box.hi[i])]
                                 for i, c in enumerate(setup.covariates)},
            "treatment_values": [0, 1],
            "propensity_clip": setup.kappa if ate.propensity is None else None,
            "public_propensity": ate.propensity,
            "outcome_model": setup.outcome, "propensity_learner": setup.propensity_learner,
            "split": {**sec.split.receipt(), "first_half_fraction": sec.first_half_fraction}
            if setup.rows == "split" else ({**sec.split.receipt(), "folds": ate.folds}
                                           if setup.rows == "crossfit" else None),
            "nuisance_features": "x~ = (1, s(x) - 1/2)/sqrt(1 + q/4), s = box-scaled covariates",
            "penalties": {k: c.to_dict() for k, c in (("propensity", setup.propensity_l2),
                                                     ("outcome", setup.outcome_l2))
                          if c is not None},
            "variance": ate.variance, "sd_bound": ate.sd_bound, "interval_level": 1 - spec.accuracy.alpha,
            "groups": [g.model_dump() for g in ate.groups], "group_overlap_m": setup.overlap,
            "one_row_per_individual": True,
            **({"residual_clip": setup.residual_clip} if setup.residual_clip is not None else {}),
        },
        details=details,
        accuracy=accuracy,
    )
