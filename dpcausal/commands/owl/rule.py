"""owl's release: the rule document (and recommendations for ``owl.apply_to``), and applying a
saved rule to new rows (post-processing)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.common.arms import label_matches
from dpcausal.commands.common.linear_rule import (
    RULE_FORMAT_VERSION,
    FeatureMap,
    apply_linear_rule,
    load_linear_rule,
)
from dpcausal.commands.common.rule_intervals import RuleNoise, rule_summary
from dpcausal.commands.common.rule_png import plot_rule
from dpcausal.commands.owl.setup import OwlSetup
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.mechanisms.noise_law import event_halfwidth, law_label
from dpcausal.method import Release

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]


def recommend(fmap: FeatureMap, theta: FloatArray, x: FloatArray) -> npt.NDArray[np.bool_]:
    """True where the rule recommends the treated arm (score > 0; a tie goes to control)."""
    return np.asarray(fmap.transform(x) @ theta > 0.0)


def rule_document(spec: OwlSpec, setup: OwlSetup, theta: FloatArray, plan: PrivacyPlan,
                  selected_lambda: float | None = None) -> dict[str, Any]:
    """Everything needed to apply the released rule, and nothing private (``selected_lambda``:
    λ* of ``lambda: auto``, itself a DP output)."""
    ev = plan.event("owl.theta")
    selection = {} if selected_lambda is None else {
        "selected_lambda": selected_lambda,
        "theta_is": "lambda* x theta_hat(lambda*) (the rule at lambda*, scaled; same sign)"}
    return {
        "format_version": RULE_FORMAT_VERSION,
        "command": "owl",
        "method": "DP-wERM output perturbation (Giddens et al. 2023), Huber hinge, C = 0",
        "feature_map": setup.fmap.to_dict(),
        "theta": [float(t) for t in theta],
        "coefficients_original_units": setup.fmap.original_units(theta),
        "arms": {"treated": spec.owl.treated, "control": spec.owl.control_label()},
        "decision": "recommend treated when score = v(x)·theta > 0, else control (ties: control)",
        "outcome_direction": spec.owl.outcome_direction,
        "privacy": {
            "epsilon": plan.cost.epsilon, "delta": 0.0,
            "guarantee": plan.guarantee if plan.dp_guarantee else "none",
            "dp_guarantee": plan.dp_guarantee,
            "sensitivity": ev.sensitivity, "gamma": plan.details["gamma"],
            "gamma_source": plan.details["gamma_source"]["source"], **selection,
            "weight_bound_W": setup.weight_bound,
            "neighbouring": "replace-one row",
        },
        "intervals": rule_noise(ev, spec.accuracy.alpha).document(setup.fmap, theta),
    }


def rule_noise(event: PrivacyEvent, alpha: float) -> RuleNoise:
    """The noise on aᵀθ: θ + b with b ℓ2-Laplace, so aᵀb has the law of ‖a‖·R·u₁ (exact)."""
    return RuleNoise(alpha, law_label(event), event_halfwidth(event, alpha))


def load_rule(doc: Any, path: Path) -> tuple[FeatureMap, FloatArray, dict[str, Any]]:
    """Validate an owl rule document; return its feature map, θ and arms."""
    return load_linear_rule(doc, path, "owl")


def apply_rule(doc: dict[str, Any], frame: pd.DataFrame, path: Path | None,
               rule_path: Path | None = None) -> pd.DataFrame:
    """Return ``frame`` plus a ``recommended`` column holding each row's arm label."""
    return apply_linear_rule(doc, frame, path, "owl", rule_path)


def build_release(spec: OwlSpec, setup: OwlSetup, theta: FloatArray, plan: PrivacyPlan,
                  side: dict[str, pd.DataFrame], facts: dict[str, Any] | None = None, *,
                  selected_lambda: float | None = None) -> Release:
    """rule.json from the released θ (with its noise intervals), recommendations for ``apply_to``,
    the summary (``facts``: public facts of the run, e.g. the engine) and rule.png."""
    rule = rule_document(spec, setup, theta, plan, selected_lambda)
    release = Release(documents={"rule.json": rule})
    summary: dict[str, Any] = {"released_theta_norm": float(np.linalg.norm(theta)), **(facts or {})}
    recs = None
    if "apply_to" in side:
        recs = apply_rule(rule, side["apply_to"], spec.owl.apply_to)
        release.tables["recommendations"] = recs
        summary["apply_to_rows"] = len(recs)
        summary["apply_to_share_treated"] = float(
            label_matches(recs["recommended"], spec.owl.treated).mean()
        )
    summary.update(rule_summary(rule, recs))
    if spec.owl.plot:
        release.figures["rule.png"] = plot_rule(rule, recs, command="owl")
    release.summary.update(summary)
    return release


def apply_defaults(spec: OwlSpec) -> tuple[Path | None, Path | None, Path | None]:
    """What a ``--spec`` given with ``--apply`` supplies: the rows to score (``owl.apply_to``), the
    output directory, and the training file (refused as rows to score)."""
    return spec.owl.apply_to, spec.output.dir, spec.data.path
