"""``two-stage``: the released rule document and applying it to new rows (post-processing)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.common.linear_rule import (
    RULE_FORMAT_VERSION,
    FeatureMap,
    apply_linear_rule,
    load_linear_rule,
)
from dpcausal.commands.common.rule_intervals import RuleNoise, rule_summary
from dpcausal.commands.common.rule_png import plot_rule
from dpcausal.commands.two_stage import center
from dpcausal.commands.two_stage.privacy import OBJECTIVE_STAGE
from dpcausal.commands.two_stage.setup import M_X, TwoStageSetup
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.mechanisms.noise_law import event_norm_quantile, objective_perturbation_bound
from dpcausal.method import Release

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]


def rule_document(spec: TwoStageSpec, setup: TwoStageSetup, theta: FloatArray,
                  plan: PrivacyPlan) -> dict[str, Any]:
    """Everything needed to apply the released rule, and nothing private."""
    ev = plan.event(OBJECTIVE_STAGE)
    sec = spec.two_stage
    return {
        "format_version": RULE_FORMAT_VERSION,
        "command": "two-stage",
        "method": "DP-2ERM (Lee & Chen): weighted ITR regression, objective perturbation",
        "feature_map": setup.fmap.to_dict(),
        "theta": [float(v) for v in theta],
        "coefficients_original_units": setup.fmap.original_units(theta),
        "arms": {"treated": sec.treated, "control": sec.control_label()},
        "decision": "recommend treated when score = x(v)·theta > 0, else control (ties: control)",
        "outcome_direction": sec.outcome_direction,
        "bounds": {"l1_radius": setup.l1_radius, "M_x": M_X, "M_y": setup.m_y,
                   "outcome": [setup.lower, setup.upper] if sec.outcome_direction == "higher"
                   else [-setup.upper, -setup.lower]},
        "outcome_center": center.document(spec, setup, int(plan.details["n_rows"])),
        "privacy": {
            "epsilon": plan.cost.epsilon, "delta": plan.cost.delta,
            "epsilon_stage2": ev.epsilon,
            "guarantee": ("none (calibration: paper)" if not plan.dp_guarantee
                          else plan.guarantee),
            "weights": sec.weights, "sensitivity": sec.sensitivity,
            "calibration": sec.calibration, "noise": sec.noise,
            "gamma": plan.details["gamma"], "noise_scale": ev.noise_scale,
            "neighbouring": "replace-one row, n public",
        },
        "intervals": rule_noise(spec, plan).document(setup.fmap, theta),
    }


def rule_noise(spec: TwoStageSpec, plan: PrivacyPlan) -> RuleNoise:
    """A (1 − α) bound on the noise in aᵀθ (``bound: true``).

    θ minimises ½θᵀPθ + cᵀθ + bᵀθ/n over ‖θ‖₁ ≤ λ₁ with P ⪰ γI, so it lies within ‖b‖/(nγ) of
    θ₀, the minimiser without b (strong convexity), and within 2λ₁ of it in ℓ1 (both lie in the
    ball); ‖b‖ ≤ its (1 − α) quantile with probability 1 − α. The data's own curvature (the
    weighted second moment of x, private) usually makes the noise much smaller than this.
    """
    ev = plan.event(OBJECTIVE_STAGE)
    alpha = spec.accuracy.alpha
    n, gamma = int(plan.details["n_rows"]), float(plan.details["gamma"])
    radius = float(plan.details["l1_radius"])
    law = (f"objective perturbation, strong-convexity bound q(‖b‖)/(nγ), n = {n}, γ = {gamma:.4g}, "
           f"‖b‖ {'~ Gamma' if ev.kind == 'l2_laplace' else '= σ·χ'}(d = {ev.params['dim']}, "
           f"scale {ev.noise_scale:.4g}); ≤ 2λ₁ = {2 * radius:g} in ℓ1")
    per_l2 = objective_perturbation_bound(event_norm_quantile(ev, 1.0 - alpha), n=n,
                                          strong_convexity=gamma)
    note = ("with the default γ = γ_required, which grows as ε falls, this bound does not shrink "
            "with ε; a fixed, larger two_stage.gamma makes it fall like 1/(εγ), and shrinks the rule"
            if spec.two_stage.gamma is None else "")
    return RuleNoise(alpha, law, per_l2, 2.0 * radius, bound=True, note=note)


def rule_release(spec: TwoStageSpec, setup: TwoStageSetup, theta: FloatArray, plan: PrivacyPlan,
                 side: dict[str, pd.DataFrame]) -> Release:
    """The release of a solved θ (post-processing): the rule with its intervals,
    recommendations for ``apply_to``, the summary and the plot."""
    rule = rule_document(spec, setup, theta, plan)
    release = Release(documents={"rule.json": rule})
    release.summary["released_theta_norm"] = float(np.linalg.norm(theta))
    recs = None
    if "apply_to" in side:
        recs = apply_rule(rule, side["apply_to"], spec.two_stage.apply_to)
        release.tables["recommendations"] = recs
        release.summary["apply_to_rows"] = len(recs)
    release.summary.update(rule_summary(rule, recs))
    if spec.two_stage.plot:
        release.figures["rule.png"] = plot_rule(rule, recs, command="two-stage")
    return release


def load_rule(doc: Any, path: Path) -> tuple[FeatureMap, FloatArray, dict[str, Any]]:
    """Validate a two-stage rule document; return its feature map, θ and arms."""
    return load_linear_rule(doc, path, "two-stage")


def apply_rule(doc: dict[str, Any], frame: pd.DataFrame, path: Path | None,
               rule_path: Path | None = None) -> pd.DataFrame:
    """Return ``frame`` plus a ``recommended`` column (post-processing of the released θ)."""
    return apply_linear_rule(doc, frame, path, "two-stage", rule_path)
