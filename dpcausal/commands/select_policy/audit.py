"""What ``audit privacy`` needs to drive ``select-policy``: its :data:`ADAPTER`.

Neighbouring relation (spec select_policy §2.1): replace one record; N, m, n are public. The
generators below replace one row in place (never reorder, add or drop rows) and the gray-box
utilities of D and D′ use the same split — for the default ``kind: random`` one fixed permutation
(:func:`dpcausal.commands.common.row_split.for_audit`), which for in-place pairs is the coupling
that bounds the random split's loss — so the replaced row stays in its block. The black-box runs on D and D′
use that split too (the adapter's ``coupled_spec``), so they are compared under the same coupling.

Mechanism inputs (``pre_noise``): the exponential mechanism's utility vector U(π) over the library
(``select_policy.choice``) and, with ``value_release``, the Laplace input U(π̂)/n given each possible
choice π̂ — one row per policy; :func:`dpcausal.audit.estimators.event_loss` takes the worst row,
since the value step runs on the row of the policy that was released.

The adversarial neighbour of the learned regime is the rare-region *anchor* pair of spec §3.5 /
App. F: one nuisance-block row at a corner of the covariate box (the rare region) with Y at the top
of the range in D and at the bottom in D′, and every scoring-block row in that corner's
neighbourhood with the other arm (spec App. F). Under a flexible learner (1-NN, a fully grown
tree) every one of the n scoring summands moves by the full μ range; the certified ridge/logistic
learners move them by at most ρ*, which Δ_cert covers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.neighbours import Pair, RowDomain, replace_one
from dpcausal.audit.privacy import AuditAdapter
from dpcausal.commands.common import row_split
from dpcausal.commands.select_policy.estimate import compute_utilities
from dpcausal.commands.select_policy.method import METHOD
from dpcausal.commands.select_policy.setup import (
    STAGE_CHOICE,
    STAGE_VALUE,
    build_setup,
    feature_map,
    split_indices,
)
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.errors import MissingBoundsError, SpecError
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]
NEIGHBOURHOOD = 0.01
"""Scoring rows of the anchor pair lie within this fraction of each covariate's range of the corner."""


def _covariate_bounds(spec: SelectPolicySpec) -> dict[str, tuple[float, float]]:
    names = list(spec.data.columns.covariates)
    if spec.select_policy.regime != "fixed":
        fmap = feature_map(spec)  # refuses missing bounds with the command's own message
        return {c: (float(lo), float(hi)) for c, lo, hi in zip(names, fmap.lower, fmap.upper,
                                                                  strict=True)}
    missing = [c for c in names if spec.bounds.covariate(c) is None]
    if missing:
        raise MissingBoundsError(
            f"bounds.covariates has no bound for {', '.join(missing)}: audit privacy draws "
            "synthetic covariates and corner rows inside bounds.covariates; add them per column "
            "or give one [lo, hi] for all")
    return {c: tuple(map(float, spec.bounds.covariate(c))) for c in names}  # type: ignore[misc,arg-type]


def _outcome_columns(spec: SelectPolicySpec) -> tuple[str, str, tuple[float, float]]:
    """(outcome, treatment, outcome bounds) of the learned and frozen regimes; refuses what is
    missing with the command's messages."""
    cols = spec.data.columns
    if cols.outcome is None or cols.treatment is None:
        raise SpecError("data.columns: select-policy needs both 'outcome' and 'treatment' "
                        "columns (or regime: fixed with select_policy.fixed_scores)")
    if spec.bounds.outcome is None:
        raise MissingBoundsError(
            "bounds.outcome is missing: select-policy clips Y to public bounds [lo, hi] (they "
            "bound every DR score and Δ); add e.g. bounds: {outcome: [0, 1]}")
    lo, hi = spec.bounds.outcome
    return cols.outcome, cols.treatment, (float(lo), float(hi))


def _domain(spec: SelectPolicySpec) -> RowDomain:
    """What one row may be: covariates in their bounds; Y in bounds.outcome and A one of the two
    arms (or, regime fixed, each score column in [−B, B])."""
    sec = spec.select_policy
    numeric = _covariate_bounds(spec)
    fs = sec.fixed_scores
    if sec.regime == "fixed" and fs is not None:  # the spec model requires the scores there
        numeric[fs.treated] = (-fs.bound, fs.bound)
        numeric[fs.control] = (-fs.bound, fs.bound)
        return RowDomain(numeric, {})
    outcome, treatment, y_bounds = _outcome_columns(spec)
    numeric[outcome] = y_bounds
    return RowDomain(numeric, {treatment: list(sec.labels())})


def audit_spec(spec: SelectPolicySpec) -> SelectPolicySpec:
    """``spec`` with the split the gray-box computation conditions on
    (:func:`~dpcausal.commands.common.row_split.for_audit`)."""
    sec = spec.select_policy
    return spec.model_copy(update={"select_policy": sec.model_copy(
        update={"split": row_split.for_audit(sec.split)})})


def synthesize(spec: SelectPolicySpec, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """``n`` rows drawn uniformly inside the public bounds (both arms equally likely)."""
    return _domain(spec).synthesize(n, rng)


def _opposite_corners(domain: RowDomain, rng: np.random.Generator) -> tuple[dict[str, Any],
                                                                             dict[str, Any]]:
    """A row at a random corner and the row at the opposite corner, labels changed."""
    a = domain.corner_row(rng)
    b = {c: (lo + hi - a[c]) for c, (lo, hi) in domain.numeric.items()}
    for c, labels in domain.categorical.items():
        i = list(labels).index(a[c])
        b[c] = labels[(i + 1) % len(labels)]
    return a, b


def anchor_pair(spec: SelectPolicySpec, frame: pd.DataFrame, rng: np.random.Generator,
                anchor_treated: bool) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The rare-region anchor pair of spec §3.5 (learned regime), around ``frame``.

    D: one nuisance-block row (chosen at random among the public split's nuisance rows) set to a
    random corner x₀ of the covariate box, arm a, Y = ȳ; every scoring-block row moved to within
    ``NEIGHBOURHOOD`` of x₀ with the other arm and Y at the middle of the outcome range (so the
    policies that recommend that arm keep middling utilities and the selection probabilities
    visibly flip between D and D′ — which the black-box test needs). D′: the same with the
    anchor's Y = y̲. D and D′ differ in the anchor row only, which stays at its index (hence in
    its block).
    """
    sec = spec.select_policy
    outcome, treatment, (y_lo, y_hi) = _outcome_columns(spec)
    n_rows = len(frame)
    m = int(np.floor(sec.train_fraction * n_rows))
    tr, sc = split_indices(audit_spec(spec), n_rows, m)
    bounds = _covariate_bounds(spec)
    names = list(bounds)
    lo = np.array([bounds[c][0] for c in names])
    hi = np.array([bounds[c][1] for c in names])
    upper = rng.uniform(size=len(names)) < 0.5
    corner = np.where(upper, hi, lo)
    inward = np.where(upper, -1.0, 1.0)
    first, second = sec.labels()[:2]  # treated and control (K arms: the first two)
    arm, other = (first, second) if anchor_treated else (second, first)
    base = frame.copy()
    pos = base.index[sc]
    near = corner + inward * rng.uniform(0.0, NEIGHBOURHOOD, (len(sc), len(names))) * (hi - lo)
    for j, c in enumerate(names):
        base[c] = base[c].astype(np.float64)
        base.loc[pos, c] = near[:, j]
    if not isinstance(other, bool | int | float) or not pd.api.types.is_numeric_dtype(
            base[treatment]):
        base[treatment] = base[treatment].astype(object)
    base.loc[pos, treatment] = other
    base[outcome] = base[outcome].astype(np.float64)
    base.loc[pos, outcome] = 0.5 * (y_lo + y_hi)
    j = int(tr[int(rng.integers(len(tr)))])
    row: dict[str, object] = {c: float(v) for c, v in zip(names, corner, strict=True)}
    row[treatment] = arm
    d = replace_one(base, j, {**row, outcome: y_hi})
    dp = replace_one(base, j, {**row, outcome: y_lo})
    side = "upper" if upper.all() else "a"
    return (f"anchor row {j} (arm {arm!r}) at {side} corner of the covariates, Y top vs bottom; "
            f"{len(sc)} scoring rows in its neighbourhood with arm {other!r}", d, dp)


def neighbours(spec: SelectPolicySpec, frame: pd.DataFrame, rng: np.random.Generator,
               k: int) -> Iterator[Pair]:
    """``k`` replace-one-row pairs around ``frame``, cycling through four kinds.

    A row replaced by a random corner of the bounds; a row replaced by a random row; a planted
    pair (one row at a corner in D, the opposite corner with the other arm in D′); and, in the
    learned regime, the rare-region anchor pair (:func:`anchor_pair`, alternating the anchor's
    arm) — elsewhere a row at the upper corner with the arm flipped. In the learned regime the
    replaced row alternates between the nuisance block and the scoring block (groups of four).
    """
    sec = spec.select_policy
    domain = _domain(spec)
    n_rows = len(frame)
    if sec.regime == "learned":
        m = int(np.floor(sec.train_fraction * n_rows))
        blocks = list(split_indices(audit_spec(spec), n_rows, m))
        names: tuple[str, ...] = ("nuisance", "scoring")
    else:
        blocks, names = [np.arange(n_rows)], ("scoring",)
    for i in range(k):
        b = (i // 4) % len(blocks)
        idx = int(blocks[b][int(rng.integers(len(blocks[b])))])
        where = f"{names[b]} row {idx}"
        kind = i % 4
        if kind == 0:
            yield f"{where} -> corner of the bounds", None, replace_one(frame, idx,
                                                                        domain.corner_row(rng))
        elif kind == 1:
            yield f"{where} -> random row in the bounds", None, replace_one(frame, idx,
                                                                            domain.random_row(rng))
        elif kind == 2:
            a, c = _opposite_corners(domain, rng)
            yield (f"{where} planted at a corner vs the opposite corner, labels changed",
                   replace_one(frame, idx, a), replace_one(frame, idx, c))
        elif sec.regime == "learned":
            yield anchor_pair(spec, frame, rng, anchor_treated=(i // 4) % 2 == 0)
        else:
            a, c = domain.extreme_pair(rng)
            yield (f"{where} planted at the upper corner, labels flipped",
                   replace_one(frame, idx, a), replace_one(frame, idx, c))


def pre_noise(spec: SelectPolicySpec, frame: pd.DataFrame, plan: PrivacyPlan,
              side: dict[str, Any]) -> dict[str, FloatArray]:
    """U(π) for every policy (the exponential mechanism's utilities) and, with value_release, the
    Laplace input U(π̂)/n for each possible choice π̂ (one row per policy)."""
    setup = build_setup(spec, len(frame), side)
    u = np.asarray(compute_utilities(audit_spec(spec), setup, frame, side), dtype=np.float64)
    out = {STAGE_CHOICE: u}
    if spec.select_policy.value_release is not None:
        out[STAGE_VALUE] = (u / setup.n)[:, None]
    return out


def output_vector(release: Release) -> FloatArray:
    """The chosen policy as a one-hot vector over the library (then the released value, if any)."""
    doc = release.documents["selection.json"]
    onehot = np.zeros(int(doc["library"]["size"]))
    onehot[int(doc["selected"]["index"])] = 1.0
    if "value_release" in doc:
        return np.append(onehot, float(doc["value_release"]["estimate"]))
    return onehot


def without_plot(spec: SelectPolicySpec) -> SelectPolicySpec:
    """The audited spec: no figure (post-processing only, the released numbers are unchanged)."""
    return spec.model_copy(update={"select_policy": spec.select_policy.model_copy(
        update={"plot": False})})


ADAPTER = AuditAdapter(METHOD, "select_policy", synthesize, neighbours, pre_noise, output_vector,
                       audit_spec=without_plot, coupled_spec=audit_spec)
"""select-policy's audit adapter (listed in :data:`dpcausal.commands.COMMANDS`)."""
"""(synthesize, neighbours, pre_noise, output_vector), in AuditAdapter's order."""
