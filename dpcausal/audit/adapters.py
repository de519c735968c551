"""How ``audit privacy`` drives each shipped command (one adapter per command)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.neighbours import Pair, RowDomain, row_neighbours
from dpcausal.audit.privacy import AuditAdapter
from dpcausal.methods import (
    cate,
    cate_audit,
    owl,
    select_policy,
    select_policy_audit,
    synth_control,
    synth_control_audit,
    two_stage,
    two_stage_audit_adapter,
)
from dpcausal.methods.base import Release
from dpcausal.spec.owl import OwlSpec, PropensityColumn

FloatArray = npt.NDArray[np.float64]


def _owl_domain(spec: OwlSpec) -> RowDomain:
    owl.build_setup(spec)  # refuses missing bounds first, with the usual message
    cols = spec.data.columns
    numeric: dict[str, tuple[float, float]] = {
        c: spec.bounds.covariate(c) for c in cols.covariates  # type: ignore[misc]
    }
    assert cols.outcome is not None
    assert cols.treatment is not None
    assert spec.bounds.outcome
    numeric[cols.outcome] = spec.bounds.outcome
    if isinstance(spec.owl.propensity, PropensityColumn):
        floor = spec.owl.propensity.floor
        numeric[spec.owl.propensity.column] = (floor, 1.0 - floor)
    return RowDomain(numeric, {cols.treatment: [spec.owl.treated, spec.owl.control_label()]})


def _owl_synthesize(spec: OwlSpec, n: int, rng: np.random.Generator) -> pd.DataFrame:
    return _owl_domain(spec).synthesize(n, rng)


def _owl_neighbours(spec: OwlSpec, frame: pd.DataFrame, rng: np.random.Generator,
                    k: int) -> Iterator[Pair]:
    return row_neighbours(frame, _owl_domain(spec), rng, k)


def _owl_pre_noise(spec: OwlSpec, frame: pd.DataFrame, plan: PrivacyPlan,
                   side: dict[str, Any]) -> dict[str, FloatArray]:
    setup = owl.build_setup(spec)
    data = owl.prepare(spec, setup, frame, spec.data.path)
    return {"owl.theta": owl.fit_nonprivate(setup, data, float(plan.details["gamma"]))}


def _owl_output(release: Release) -> FloatArray:
    return np.asarray(release.documents["rule.json"]["theta"], dtype=np.float64)


ADAPTERS: dict[str, AuditAdapter] = {
    "owl": AuditAdapter(owl.METHOD, "owl", _owl_synthesize, _owl_neighbours, _owl_pre_noise,
                        _owl_output),
    "synth_control": AuditAdapter(synth_control.METHOD, "synth_control",
                                  *synth_control_audit.FUNCTIONS),
    "select_policy": AuditAdapter(select_policy.METHOD, "select_policy", *select_policy_audit.FUNCTIONS),
    "cate": AuditAdapter(cate.METHOD, "cate", *cate_audit.FUNCTIONS,
                         audit_spec=lambda spec: spec.model_copy(
                             update={"cate": spec.cate.model_copy(update={"plot": False})})),
    "two_stage": AuditAdapter(two_stage.METHOD, "two_stage", *two_stage_audit_adapter.FUNCTIONS),
}
"""Spec section name → adapter. A command is auditable once it has an adapter here."""
