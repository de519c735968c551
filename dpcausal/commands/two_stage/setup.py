"""``two-stage``: the public setup (feature map, outcome bounds, propensity range) and row mapping."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpcausal.commands.common.arms import treated_mask
from dpcausal.commands.common.columns import ArmColumns
from dpcausal.commands.common.linear_rule import FeatureMap
from dpcausal.commands.two_stage.spec import MmdSection, TwoStageSpec
from dpcausal.errors import MissingBoundsError, SpecError
from dpcausal.frames import numeric_column, numeric_columns, same_file
from dpcausal.method import SideInput

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]
M_X = 1.0
"""Every mapped feature row has ‖x‖₂ ≤ 1 (FeatureMap divides by √dim after clipping)."""


@dataclass(frozen=True)
class TwoStageSetup:
    """Every public constant of one run, derived from the spec alone."""

    columns: ArmColumns
    fmap: FeatureMap
    lower: float
    upper: float
    l1_radius: float
    """λ₁ (score units): the spec's ``l1_radius``, else the plan's choice (``with_radius``); NaN
    in a setup built without it (columns and feature map only)."""
    u_range: tuple[float, float] | None  # ipw-known: [u_lo, u_hi] of 1/π over the public domain
    center: float = math.nan
    """Outcome centre c (in the fitting direction): the public ``outcome_center`` (a number, or
    the bounds' midpoint), or with ``outcome_center: private`` the released private centre, NaN
    until it is drawn (:mod:`dpcausal.commands.two_stage.center`)."""
    private_center: bool = False
    """``outcome_center: private``: y − c is winsorised at ±(U − L)/2 (M_y = (U − L)/2 for every c)."""
    center_unclamped: float = math.nan
    """The private centre as the Laplace mechanism released it, before clamping to [L, U] (its
    noise interval is computed around it, :mod:`dpcausal.intervals`)."""

    @property
    def m_inf(self) -> float:
        """M_∞ ≥ ‖x‖_∞ for every stage-2 feature row: the feature map's row scale (1 − 8u)/√d
        (each clipped, scaled coordinate lies in [−1, 1] before the product, and rounding the
        product of a number of magnitude ≤ 1 with the float scale cannot exceed the scale)."""
        return self.fmap.row_scale

    @property
    def half_range(self) -> float:
        """(U − L)/2 as a float: the winsorising bound of a private centre."""
        return 0.5 * (self.upper - self.lower)

    @property
    def m_y(self) -> float:
        """|y − center| ≤ M_y for the computed floats. Private centre: y − c is clipped to
        ±half_range, so M_y = half_range exactly, whatever c is. Public centre: (U − L)/2 in
        real arithmetic at the midpoint, and, since rounding is monotone, fl(y − c) lies between
        fl(L − c) and fl(U − c) for every y in [L, U], so the larger of |fl(L − c)| and
        fl(U − c) bounds it exactly."""
        if self.private_center:
            return self.half_range
        return max(self.upper - self.center, self.center - self.lower)


@dataclass(frozen=True)
class Prepared:
    """Mapped rows of one table (never released)."""

    x: FloatArray  # stage-2 features, ‖x‖ ≤ 1
    raw: FloatArray  # clipped raw covariates
    a: npt.NDArray[np.bool_]  # True = treated
    y: FloatArray  # outcome in the fitting direction, clipped to [L, U]
    t: FloatArray  # 2·(y − center)·ã (winsorised for a private centre; NaN until it is released)
    fmap: FeatureMap

    @functools.cached_property
    def scaled(self) -> FloatArray:
        """The clipped, scaled covariates (stage-1 features of ipw-logit, ebw and mmd), made when
        first asked for: the other weights never need this n × p array (issue 24)."""
        return self.fmap.scale_clipped(self.raw)

    def centred(self, setup: TwoStageSetup) -> Prepared:
        """The rows with the targets of ``setup``'s centre (after a private centre is released)."""
        return dataclasses.replace(self, t=targets(setup, self.y, self.a))


def targets(setup: TwoStageSetup, y: FloatArray, treated: npt.NDArray[np.bool_]) -> FloatArray:
    """t = 2·(y − c)·ã for outcomes y already clipped to [L, U]: with a private centre y − c is
    winsorised at ±(U − L)/2 (so |t| ≤ 2M_y whatever c is); NaN while the centre is unknown."""
    if setup.private_center:
        yc = np.clip(y - setup.center, -setup.half_range, setup.half_range)
    else:
        yc = y - setup.center
    return 2.0 * yc * np.where(treated, 1.0, -1.0)


def build_setup(spec: TwoStageSpec) -> TwoStageSetup:
    """Derive the public constants; refuse when a bound the sensitivity needs is missing."""
    sec = spec.two_stage
    cols = spec.data.columns
    if not cols.covariates:
        raise SpecError("data.columns.covariates: two-stage needs at least one covariate column")
    if cols.outcome is None or cols.treatment is None:
        raise SpecError("data.columns: two-stage needs both 'outcome' and 'treatment' columns")
    if spec.bounds.outcome is None:
        raise MissingBoundsError(
            "bounds.outcome is missing: two-stage needs public outcome bounds [lo, hi] (ζ depends on "
            "them; they are never taken from the data); add e.g. bounds: {outcome: [-20, 20]}"
        )
    missing = [c for c in cols.covariates if spec.bounds.covariate(c) is None]
    if missing:
        raise MissingBoundsError(
            f"bounds.covariates has no bound for {', '.join(missing)}: two-stage needs public bounds "
            "for every covariate; add them per column or give one [lo, hi] for all"
        )
    columns = ArmColumns.from_spec(spec, "two-stage")
    bnds = np.array(columns.covariate_bounds, dtype=np.float64)
    fmap = FeatureMap(columns.covariates, bnds[:, 0], bnds[:, 1], sec.scaling, sec.intercept)
    lo, hi = columns.outcome_bounds
    if sec.outcome_direction == "lower":
        lo, hi = -hi, -lo
    u_range = None
    if sec.weights == "ipw-known":
        if sec.ipw_known is None:
            raise MissingBoundsError(
                "weights: ipw-known needs two_stage.ipw_known: {intercept: c0, coefficients: "
                "{x1: c1, ...}} — the PUBLIC propensity model (never fitted on this data)"
            )
        unknown = sorted(set(sec.ipw_known.coefficients) - set(cols.covariates))
        if unknown:
            raise SpecError(
                f"two_stage.ipw_known.coefficients: {', '.join(unknown)} not in "
                "data.columns.covariates; name covariates of the spec"
            )
        s_lo, s_hi = score_range(spec, bnds)
        u_lo = min(1.0 + math.exp(-s_hi), 1.0 + math.exp(s_lo))
        u_hi = max(1.0 + math.exp(-s_lo), 1.0 + math.exp(s_hi))
        u_range = (u_lo, u_hi)
    if sec.weights == "ipw-rct" and sec.ipw_rct is None:
        raise MissingBoundsError(
            "weights: ipw-rct needs two_stage.ipw_rct: {p_treated: P} — the design probability"
        )
    if not lo < hi:
        raise SpecError("bounds.outcome: two-stage needs lo < hi (a public range of the outcome)")
    center = 0.5 * (lo + hi)
    oc = sec.outcome_center
    if oc == "private":
        center = math.nan  # released by the run (dpcausal/commands/two_stage/center.py)
    elif not isinstance(oc, str):
        c = -oc if sec.outcome_direction == "lower" else oc
        if not lo < c < hi:
            raise SpecError(f"two_stage.outcome_center: {oc:g} must lie strictly inside "
                            "bounds.outcome (a public guess of the typical outcome)")
        center = c
    radius = math.nan if sec.l1_radius is None else float(sec.l1_radius)
    return TwoStageSetup(columns, fmap, lo, hi, radius, u_range, center, oc == "private")


def with_center(setup: TwoStageSetup, center: float, *, unclamped: float | None = None
                ) -> TwoStageSetup:
    """The setup with the released private centre (fitting direction; ``unclamped``: the
    mechanism's output before clamping, default ``center``)."""
    raw = center if unclamped is None else unclamped
    return dataclasses.replace(setup, center=float(center), center_unclamped=float(raw))


def with_radius(setup: TwoStageSetup, plan_details: dict[str, object]) -> TwoStageSetup:
    """The setup with the plan's λ₁ (the rule's choice when the spec gives no l1_radius)."""
    return dataclasses.replace(setup, l1_radius=float(plan_details["l1_radius"]))  # type: ignore[arg-type]


def coef_vector(spec: TwoStageSpec) -> FloatArray:
    known = spec.two_stage.ipw_known
    assert known is not None
    return np.array([known.coefficients.get(c, 0.0) for c in spec.data.columns.covariates])


def score_range(spec: TwoStageSpec, bnds: FloatArray) -> tuple[float, float]:
    """Exact range of c₀ + Σ c_j x_j over the public covariate box."""
    known = spec.two_stage.ipw_known
    assert known is not None
    coef = coef_vector(spec)
    lo_terms = np.minimum(coef * bnds[:, 0], coef * bnds[:, 1])
    hi_terms = np.maximum(coef * bnds[:, 0], coef * bnds[:, 1])
    return known.intercept + float(lo_terms.sum()), known.intercept + float(hi_terms.sum())


def prepare(spec: TwoStageSpec, setup: TwoStageSetup, frame: pd.DataFrame,
            path: Path | None) -> Prepared:
    """Validate and map the table: clip to the public bounds, features, ±1 arms, targets t."""
    cols = setup.columns
    sec = spec.two_stage
    columns = numeric_columns(frame, list(cols.covariates), path)  # checked, not copied
    y = numeric_column(frame, cols.outcome, path)
    if sec.outcome_direction == "lower":
        y = -y
    treated = treated_mask(frame[cols.treatment], sec, path=path, column=cols.treatment,
                           command="two-stage")
    # the clipped covariates (C-ordered, as column_stack's) and the features mapped from them, in
    # one pass of cache-sized row blocks: the same values as clip → transform (issue 24)
    raw, x = setup.fmap.clip_transform_columns(columns)
    np.clip(y, setup.lower, setup.upper, out=y)  # y is this function's own copy
    return Prepared(x, raw, treated, y, targets(setup, y, treated), setup.fmap)


MMD_MAX_ROWS = 5000
"""The MMD program forms the n × n kernel matrix; larger n is refused before any row is read."""


def data_columns(spec: TwoStageSpec) -> list[str]:
    """Columns two-stage reads from the sensitive file."""
    cols = spec.data.columns
    return [c for c in (*cols.covariates, cols.outcome, cols.treatment) if c is not None]


def side_inputs(spec: TwoStageSpec) -> dict[str, SideInput]:
    """The rows to score, if the spec names them."""
    sec = spec.two_stage
    if sec.apply_to is None:
        return {}
    if spec.data.path is not None and same_file(sec.apply_to, spec.data.path):
        raise SpecError(
            f"two_stage.apply_to: {sec.apply_to} is the training data; recommendations for the "
            "training rows are functions of their own sensitive covariates and are not covered by "
            "the guarantee. Apply the rule to other rows"
        )
    return {"apply_to": SideInput(sec.apply_to, None, "two_stage.apply_to file")}


def mmd_box(sec: MmdSection) -> float:
    """R_MMD: the spec's, else max(5, ⌈1/κ⌉ + 1)."""
    return sec.box if sec.box is not None else max(5.0, math.ceil(1.0 / sec.min_arm_fraction) + 1)


def refuse_mmd_on_engine(spec: TwoStageSpec) -> None:
    """SpecError for ``weights: mmd`` with an engine (an n × n program, not a partition sum)."""
    if spec.two_stage.weights == "mmd" and spec.engine is not None:
        raise SpecError(
            "two_stage.weights: mmd has no engine path (it solves an n × n kernel program, "
            f"limited to {MMD_MAX_ROWS} rows, that is not a sum over partitions); remove the "
            "spec's engine section and --engine to run it in memory, or use weights: ebw or "
            "ipw-logit on the engine (nothing was read or spent)"
        )
