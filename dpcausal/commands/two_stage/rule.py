"""``two-stage``: the released rule document and applying it to new rows (post-processing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.common.linear_rule import (
    RULE_FORMAT_VERSION,
    FeatureMap,
    apply_linear_rule,
    load_linear_rule,
)
from dpcausal.commands.two_stage.setup import M_X, TwoStageSetup
from dpcausal.commands.two_stage.spec import TwoStageSpec

FloatArray = npt.NDArray[np.float64]


def rule_document(spec: TwoStageSpec, setup: TwoStageSetup, theta: FloatArray,
                  plan: PrivacyPlan) -> dict[str, Any]:
    """Everything needed to apply the released rule, and nothing private."""
    ev = plan.events[0]
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
        "privacy": {
            "epsilon": ev.epsilon, "delta": ev.delta,
            "guarantee": ("none (calibration: paper)" if not plan.dp_guarantee
                          else plan.guarantee),
            "weights": sec.weights, "sensitivity": sec.sensitivity,
            "calibration": sec.calibration, "noise": sec.noise,
            "gamma": plan.details["gamma"], "noise_scale": ev.noise_scale,
            "neighbouring": "replace-one row, n public",
        },
    }


def load_rule(doc: Any, path: Path) -> tuple[FeatureMap, FloatArray, dict[str, Any]]:
    """Validate a two-stage rule document; return its feature map, θ and arms."""
    return load_linear_rule(doc, path, "two-stage")


def apply_rule(doc: dict[str, Any], frame: pd.DataFrame, path: Path | None,
               rule_path: Path | None = None) -> pd.DataFrame:
    """Return ``frame`` plus a ``recommended`` column (post-processing of the released θ)."""
    return apply_linear_rule(doc, frame, path, "two-stage", rule_path)
