"""owl's public setup: every constant of the fit, derived from the spec alone, and the mapping of
rows to features, labels and weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpcausal.commands.common.arms import treated_mask
from dpcausal.commands.common.columns import ArmColumns
from dpcausal.commands.common.linear_rule import FeatureMap, random_fourier_projection
from dpcausal.commands.owl.spec import OwlSpec, PropensityColumn, RffSpec
from dpcausal.errors import DataError, MissingBoundsError, SpecError
from dpcausal.frames import numeric_column, numeric_columns, same_file
from dpcausal.method import SideInput
from dpcausal.numerics import UNIT_ROUNDOFF
from dpcausal.solvers.erm import HuberHinge, solve_weighted_erm
from dpcausal.solvers.erm_accuracy import ERMAccuracy, weight_bound_problem

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]
ETA_SHARE = 1e-4
"""The default η: this share of the outcome range U − L (unit-free)."""
GRAD_TOL_PER_W = 1e-6
"""The requested tolerance τ = 1e-6·W on ‖∇G‖ (sum form); Δ carries the slack 2(τ + A)/γ."""


@dataclass(frozen=True)
class OwlSetup:
    """Every public constant of one owl fit, derived from the spec alone.

    ``lower``/``upper`` are the outcome bounds after the direction flip (B → −B for ``lower``).
    """

    columns: ArmColumns
    fmap: FeatureMap
    lower: float
    upper: float
    eta: float
    pi_min: float
    loss: HuberHinge

    @property
    def weight_bound(self) -> float:
        """W = (U − L + η)/π_min: every weight B′/π(A|x) lies in [0, W]."""
        return (self.upper - self.lower + self.eta) / self.pi_min

    def accuracy(self, gamma: float, n: int) -> ERMAccuracy:
        """The solve's public accuracy certificate for n rows (requested τ = 1e-6·W, raised to
        4× the rounding allowance when below it)."""
        return ERMAccuracy(n, self.fmap.dim, self.weight_bound, gamma, self.loss.h,
                           GRAD_TOL_PER_W * self.weight_bound)

    def sensitivity(self, gamma: float, n: int) -> float:
        """Δ₂(θ̂) = (2W + 2(τ + A))/γ: Corollary 1 with C = 0 (2W/γ for the exact minimisers),
        plus twice the public distance (τ + A)/γ of whatever the solver returns from the exact
        minimiser (:class:`dpcausal.solvers.erm_accuracy.ERMAccuracy`; A also covers the
        computed weights' excess over W)."""
        acc = self.accuracy(gamma, n)
        return (2.0 * self.weight_bound + 2.0 * gamma * acc.distance
                + 12.0 * UNIT_ROUNDOFF * self.weight_bound) / gamma


@dataclass(frozen=True)
class Prepared:
    """Mapped rows and weights of one table."""

    v: FloatArray
    y: FloatArray
    b_shifted: FloatArray
    pi_received: FloatArray

    @property
    def w(self) -> FloatArray:
        """w_i = B′_i / π(A_i|x_i)."""
        return self.b_shifted / self.pi_received


def fit_nonprivate(setup: OwlSetup, data: Prepared, gamma: float) -> FloatArray:
    """θ̂ = argmin Σ w_i ℓ(y_i v_iᵀθ) + (γ/2)‖θ‖², within the public distance of
    ``setup.accuracy(γ, n)``. Not a release: noise it first."""
    sol = solve_weighted_erm(data.v, data.y, data.w, setup.accuracy(gamma, data.y.size))
    return sol.theta


def build_setup(spec: OwlSpec) -> OwlSetup:
    """Derive the public constants; refuse when a bound the sensitivity needs is missing."""
    sec = spec.owl
    cols = spec.data.columns
    if not cols.covariates:
        raise SpecError("data.columns.covariates: owl needs at least one covariate column")
    if cols.outcome is None or cols.treatment is None:
        raise SpecError("data.columns: owl needs both 'outcome' and 'treatment' columns")
    unused = [r for r in ("propensity", "unit", "time") if getattr(cols, r) is not None]
    if unused:
        raise SpecError(
            f"data.columns.{unused[0]}: owl does not use this column role; design propensities go in "
            "owl.propensity: {column: NAME, floor: π_min}"
        )
    if isinstance(sec.propensity, PropensityColumn) and sec.propensity.column in (
        *cols.covariates, cols.outcome, cols.treatment
    ):
        raise SpecError(
            f"owl.propensity.column: '{sec.propensity.column}' already has another role in data.columns"
        )
    if spec.bounds.outcome is None:
        raise MissingBoundsError(
            "bounds.outcome is missing: owl needs public outcome bounds [lo, hi] to bound the "
            "weights (they are never taken from the data); add e.g. bounds: {outcome: [-8, 8]}"
        )
    missing = [c for c in cols.covariates if spec.bounds.covariate(c) is None]
    if missing:
        raise MissingBoundsError(
            f"bounds.covariates has no bound for {', '.join(missing)}: owl needs public bounds for "
            "every covariate; add them per column or give one [lo, hi] for all"
        )
    columns = ArmColumns.from_spec(spec, "owl")
    bnds = np.array(columns.covariate_bounds, dtype=np.float64)
    omega = offset = None
    if sec.kernel == "rff":
        rff = sec.rff or RffSpec()
        omega, offset = random_fourier_projection(
            len(cols.covariates), rff.dim, rff.bandwidth, rng=np.random.default_rng(rff.seed)
        )
    fmap = FeatureMap(columns.covariates, bnds[:, 0], bnds[:, 1], sec.scaling, sec.intercept,
                      omega, offset)
    lo, hi = columns.outcome_bounds
    if sec.outcome_direction == "lower":
        lo, hi = -hi, -lo
    if isinstance(sec.propensity, PropensityColumn):
        pi_min = sec.propensity.floor
    else:
        pi_min = min(sec.propensity, 1.0 - sec.propensity)
    eta = ETA_SHARE * (hi - lo) if sec.eta is None else sec.eta
    setup = OwlSetup(columns, fmap, lo, hi, eta, pi_min, HuberHinge(sec.huber_h))
    problem = weight_bound_problem(setup.weight_bound)
    if problem is not None:  # before any solve (owl.tune's too) or plan
        raise SpecError(f"bounds.outcome: {problem} (W = (U − L + η)/π_min; owl's rule does "
                        "not depend on the outcome's units)")
    return setup


def data_columns(spec: OwlSpec) -> list[str]:
    """Columns owl reads from a training (or tuning) file."""
    cols = spec.data.columns
    out = [*cols.covariates, cols.outcome, cols.treatment]
    if isinstance(spec.owl.propensity, PropensityColumn):
        out.append(spec.owl.propensity.column)
    if spec.owl.auto is not None and spec.owl.auto.split.id_column is not None:
        out.append(spec.owl.auto.split.id_column)
    return [c for c in out if c is not None]


def side_inputs(spec: OwlSpec) -> dict[str, SideInput]:
    """The public tuning file and the rows to score, if the spec names them."""
    out: dict[str, SideInput] = {}
    if spec.owl.tune is not None:
        if spec.data.path is not None and same_file(spec.owl.tune.public_data, spec.data.path):
            raise SpecError(
                f"owl.tune.public_data: {spec.owl.tune.public_data} is the training data; tuning γ on "
                "the sensitive rows is not private. Tune on a separate public file, or set owl.gamma"
            )
        out["tune"] = SideInput(spec.owl.tune.public_data, data_columns(spec), "public tuning file")
    if spec.owl.apply_to is not None:
        if spec.data.path is not None and same_file(spec.owl.apply_to, spec.data.path):
            raise SpecError(
                f"owl.apply_to: {spec.owl.apply_to} is the training data; recommendations for the "
                "training rows are functions of their own sensitive covariates and are not covered "
                "by the guarantee. Apply the rule to other rows, or use --apply on a copy you may publish"
            )
        out["apply_to"] = SideInput(spec.owl.apply_to, None, "owl.apply_to file")
    return out


def prepare(spec: OwlSpec, setup: OwlSetup, frame: pd.DataFrame, path: Path | None) -> Prepared:
    """Validate and map one table: rows, ±1 labels, shifted outcomes, received-arm propensities."""
    cols = setup.columns
    sec = spec.owl
    x_cols = numeric_columns(frame, list(cols.covariates), path)
    b = numeric_column(frame, cols.outcome, path)
    if sec.outcome_direction == "lower":
        b = -b
    treated = treated_mask(frame[cols.treatment], sec, path=path, column=cols.treatment,
                           command="owl")
    y = np.where(treated, 1.0, -1.0)
    if isinstance(sec.propensity, PropensityColumn):
        p = numeric_column(frame, sec.propensity.column, path)
        floor = sec.propensity.floor
        bad = (p < floor) | (p > 1.0 - floor)
        if bad.any():
            raise DataError(
                f"{path}: column '{sec.propensity.column}' has {int(bad.sum())} design "
                f"probabilities outside [{floor}, {1 - floor}] (owl.propensity.floor); design "
                "probabilities must respect the public floor"
            )
    else:
        p = np.full(len(y), sec.propensity)
    pi_received = np.where(treated, p, 1.0 - p)
    b_shifted = np.clip(b, setup.lower, setup.upper) - setup.lower + setup.eta
    return Prepared(setup.fmap.transform_columns(x_cols), y, b_shifted, pi_received)
