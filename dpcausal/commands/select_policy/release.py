"""select-policy's release: the chosen policy and the public calibration (``selection.json``), the
summary, and the picture (``selection.png``)."""

from __future__ import annotations

from typing import Any

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.select_policy.accuracy import gap_record, value_bounds
from dpcausal.commands.select_policy.picture import plot_selection
from dpcausal.commands.select_policy.setup import STAGE_CHOICE, Setup
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.method import Release

SELECTION_FORMAT_VERSION = 1


def selection_document(spec: SelectPolicySpec, setup: Setup, k: int, plan: PrivacyPlan,
                       value_doc: dict[str, Any] | None) -> dict[str, Any]:
    """The chosen policy and the public calibration; never utilities, probabilities or fits."""
    sec = spec.select_policy
    ev = plan.event(STAGE_CHOICE)
    doc: dict[str, Any] = {
        "format_version": SELECTION_FORMAT_VERSION,
        "command": "select-policy",
        "selected": {"index": k, **setup.library.policies[k]},
        "actions": ({"treated": sec.treated, "control": sec.control_label(),
                     "policy_output": "true/1 = treated, false/0 = control"} if sec.arms is None
                    else {"arms": list(sec.labels()), "experimental_multi_arm": True,
                          "policy_output": "the label of the recommended arm"}),
        "library": {"sha256": setup.library.sha256, "size": setup.library.size,
                    **setup.library.source},
        "regime": setup.regime,
        "privacy": {
            "epsilon": ev.epsilon, "delta": 0.0, "guarantee": "pure",
            "mechanism": "exponential, P(pi) ∝ exp(eps U(pi) / (2 Delta))",
            "sensitivity": setup.utility_sensitivity, "gumbel_scale": ev.noise_scale,
            "certificate": setup.certificate.to_dict() if setup.certificate else None,
            "learners": setup.learners, "neighbouring": plan.neighbouring,
            "N": setup.n_total, "m": setup.m, "n": setup.n,
        },
    }
    doc["accuracy"] = gap_record(setup, epsilon=ev.epsilon, alpha=spec.accuracy.alpha)
    if value_doc is not None:
        doc["value_release"] = value_doc
    return doc


def build_release(spec: SelectPolicySpec, setup: Setup, doc: dict[str, Any],
                  value_doc: dict[str, Any] | None, facts: dict[str, Any] | None = None) -> Release:
    """selection.json, the summary (``facts``: public facts of the run, e.g. the engine) and, with
    ``select_policy.plot``, selection.png (drawn from the document and public bounds only)."""
    summary: dict[str, Any] = {"selected_policy": doc["selected"]["name"],
                               "library_size": setup.library.size,
                               "utility_sensitivity": setup.utility_sensitivity, **(facts or {})}
    summary["value_gap"] = doc["accuracy"]["value_gap"]
    if value_doc is not None:
        summary["released_value"] = {k: value_doc[k] for k in ("estimate", "interval", "clamped")
                                     if k in value_doc}
    release = Release(documents={"selection.json": doc}, summary=summary)
    if spec.select_policy.plot:
        release.figures["selection.png"] = plot_selection(doc, value_bounds(setup))
    return release
