"""How ``audit privacy`` drives each shipped command (one adapter per command)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.neighbours import Pair, RowDomain, quiet_pair, row_neighbours
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
    """Every fourth pair the quiet planted pair (:func:`_owl_quiet_pair`), else ``row_neighbours``."""
    generic = row_neighbours(frame, _owl_domain(spec), rng, k - k // 4)
    for i in range(k):
        if i % 4 == 3:
            idx = int(rng.integers(len(frame)))
            d, dp = _owl_quiet_pair(spec, frame, idx)
            yield (f"row {idx} planted at full weight and ‖v‖ = 1, arm flipped, every other row at "
                   "the least weight", d, dp)
        else:
            yield next(generic)


def _owl_quiet_pair(spec: OwlSpec, frame: pd.DataFrame, idx: int) -> tuple[pd.DataFrame,
                                                                         pd.DataFrame]:
    """The pair that attains Δ = (2W + 2τ)/γ up to the background's pull.

    The planted row has ‖v‖ = 1 (the corner of largest feature norm), the largest weight W (the
    outcome that maps to U, the received arm at the propensity floor) and its arm flipped, so its
    gradient changes by 2W·v; every other row has the least weight η/π (outcome at the end that
    maps to L), so the objective is curved by γ alone and θ̂ moves by ≈ 2W/γ.
    """
    sec = spec.owl
    cols = spec.data.columns
    assert cols.outcome is not None
    assert cols.treatment is not None
    assert spec.bounds.outcome is not None
    lo, hi = spec.bounds.outcome
    heavy, light = (hi, lo) if sec.outcome_direction == "higher" else (lo, hi)
    row: dict[str, Any] = {}
    for c in cols.covariates:
        c_lo, c_hi = spec.bounds.covariate(c)  # type: ignore[misc]
        row[c] = c_lo if sec.scaling == "maxabs" and abs(c_lo) > abs(c_hi) else c_hi
    a = {**row, cols.outcome: heavy, cols.treatment: sec.treated}
    b = {**row, cols.outcome: heavy, cols.treatment: sec.control_label()}
    if isinstance(sec.propensity, PropensityColumn):  # received-arm propensity at the floor
        a[sec.propensity.column] = sec.propensity.floor
        b[sec.propensity.column] = 1.0 - sec.propensity.floor
    return quiet_pair(frame, idx, {cols.outcome: light}, a, b)


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
    "select_policy": AuditAdapter(select_policy.METHOD, "select_policy", *select_policy_audit.FUNCTIONS,
                                  coupled_spec=select_policy_audit.audit_spec),
    "cate": AuditAdapter(cate.METHOD, "cate", *cate_audit.FUNCTIONS,
                         audit_spec=lambda spec: spec.model_copy(
                             update={"cate": spec.cate.model_copy(update={"plot": False})}),
                         coupled_spec=cate_audit.audit_spec),
    "two_stage": AuditAdapter(two_stage.METHOD, "two_stage", *two_stage_audit_adapter.FUNCTIONS),
}
"""Spec section name → adapter. A command is auditable once it has an adapter here."""
