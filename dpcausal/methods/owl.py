"""``owl``: differentially private outcome weighted learning (DP-wERM with output perturbation).

Giddens et al. (2023), "A Differentially Private Weighted Empirical Risk Minimization Procedure and
its Application to Outcome Weighted Learning", Algorithm 1 and Corollary 1, with the spec's errata:
R(θ) = ½‖θ‖² (E1), Gamma shape d = dim θ (E15), public outcome shift (P1/E8), C = 0 only (E3/E4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.errors import DataError, MissingBoundsError, SpecError
from dpcausal.io.tables import numeric_column, numeric_columns, same_file
from dpcausal.mechanisms import L2LaplaceMechanism, NoiseGuard
from dpcausal.methods._arms import label_matches, treated_mask
from dpcausal.methods.base import MethodDef, Release, SideInput
from dpcausal.methods.owl_features import (
    RULE_FORMAT_VERSION,
    FeatureMap,
    apply_linear_rule,
    load_linear_rule,
    random_fourier_projection,
)
from dpcausal.solvers.erm import HuberHinge, solve_weighted_erm
from dpcausal.spec.owl import OwlSection, OwlSpec, PropensityColumn, RffSpec, TuneSpec

FloatArray = npt.NDArray[np.float64]
GRAD_TOL_PER_W = 1e-6
"""The solver stops at ‖∇G‖ ≤ τ = 1e-6·W (sum form); Δ then carries the slack 2τ/γ."""


@dataclass(frozen=True)
class OwlSetup:
    """Every public constant of one owl fit, derived from the spec alone.

    ``lower``/``upper`` are the outcome bounds after the direction flip (B → −B for ``lower``).
    """

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

    @property
    def grad_tol(self) -> float:
        """The solver's gradient tolerance τ on the sum-form objective."""
        return GRAD_TOL_PER_W * self.weight_bound

    def sensitivity(self, gamma: float) -> float:
        """Δ₂(θ̂) = (2W + 2τ)/γ: Corollary 1 with C = 0, plus the inexact-solve slack."""
        return (2.0 * self.weight_bound + 2.0 * self.grad_tol) / gamma


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
    bnds = np.array([spec.bounds.covariate(c) for c in cols.covariates], dtype=np.float64)
    omega = offset = None
    if sec.kernel == "rff":
        rff = sec.rff or RffSpec()
        omega, offset = random_fourier_projection(
            len(cols.covariates), rff.dim, rff.bandwidth, rng=np.random.default_rng(rff.seed)
        )
    fmap = FeatureMap(tuple(cols.covariates), bnds[:, 0], bnds[:, 1], sec.scaling, sec.intercept,
                      omega, offset)
    lo, hi = spec.bounds.outcome
    if sec.outcome_direction == "lower":
        lo, hi = -hi, -lo
    if isinstance(sec.propensity, PropensityColumn):
        pi_min = sec.propensity.floor
    else:
        pi_min = min(sec.propensity, 1.0 - sec.propensity)
    return OwlSetup(fmap, lo, hi, sec.eta, pi_min, HuberHinge(sec.huber_h))


def data_columns(spec: OwlSpec) -> list[str]:
    """Columns owl reads from a training (or tuning) file."""
    cols = spec.data.columns
    out = [*cols.covariates, cols.outcome, cols.treatment]
    if isinstance(spec.owl.propensity, PropensityColumn):
        out.append(spec.owl.propensity.column)
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
    cols = spec.data.columns
    sec = spec.owl
    x_cols = numeric_columns(frame, list(cols.covariates), path)
    assert cols.outcome is not None
    assert cols.treatment is not None
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


def fit_nonprivate(setup: OwlSetup, data: Prepared, gamma: float) -> FloatArray:
    """θ̂ = argmin Σ w_i ℓ(y_i v_iᵀθ) + (γ/2)‖θ‖², to ‖∇‖ ≤ τ. Not a release: noise it first."""
    sol = solve_weighted_erm(data.v, data.y, data.w, gamma=gamma, loss=setup.loss,
                             grad_tol=setup.grad_tol)
    return sol.theta


def mechanism(setup: OwlSetup, gamma: float, epsilon: float) -> L2LaplaceMechanism:
    """The output perturbation of θ̂ (Algorithm 1, lines 4–7).

    Notes
    -----
    Neighbouring relation: replace one row (one individual) of the training file; n is public.
    Sensitivity: with every ‖v_i‖ ≤ 1, 0 ≤ w_i ≤ W, |ℓ'| ≤ 1, the sum-form objective G is
    γ-strongly convex and replacing one row changes ∇G by at most 2W anywhere, so the exact
    minimisers differ by ≤ 2W/γ (Chaudhuri et al. 2011, Lemma 7; the paper's Corollary 1 with C = 0:
    propensities are design-known, not estimated on the data). The solver stops within τ/γ of the
    exact minimiser on each dataset, so the released pre-noise vectors differ by ≤ (2W + 2τ)/γ.
    Guarantee: pure ε-DP by the ℓ2-Laplace mechanism. Covers θ* and anything computed from θ*
    and public inputs (the rule, recommendations for *other* rows).
    """
    sensitivity = setup.sensitivity(gamma)
    if not math.isfinite(sensitivity):
        raise SpecError(
            f"owl.gamma: γ = {gamma:g} with the weight bound W = {setup.weight_bound:g} gives an "
            "infinite sensitivity 2W/γ; use a larger owl.gamma or narrower bounds.outcome"
        )
    return L2LaplaceMechanism(epsilon, sensitivity, setup.fmap.dim, stage="owl.theta")


def plan(spec: OwlSpec, n_rows: int, side: dict[str, pd.DataFrame], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build owl's plan from the spec, the public n and public side files (γ tuning)."""
    if spec.privacy.delta != 0.0:
        raise SpecError("privacy.delta: owl is pure ε-DP (δ = 0); set privacy.delta to 0")
    setup = build_setup(spec)
    gamma_source: dict[str, Any]
    if spec.owl.tune is not None:
        tuned = tune_gamma(spec, setup, side["tune"], n=n_rows, epsilon=spec.privacy.epsilon)
        gamma = tuned["gamma"]
        gamma_source = {"source": "owl-tune (Algorithm 2 on public data)", **tuned}
    else:
        assert spec.owl.gamma is not None
        gamma = spec.owl.gamma
        gamma_source = {"source": "spec"}
    mech = mechanism(setup, gamma, spec.privacy.epsilon)
    event = mech.event()
    params = {**event.params, "gamma": gamma, "weight_bound_W": setup.weight_bound, "C": 0.0,
              "solver_grad_tol": setup.grad_tol, "huber_h": setup.loss.h}
    event = type(event)(**{**event.to_dict(), "params": params})
    sec = spec.owl
    propensity = (
        {"column": sec.propensity.column, "floor": sec.propensity.floor}
        if isinstance(sec.propensity, PropensityColumn) else sec.propensity
    )
    return PrivacyPlan(
        command="owl",
        events=(event,),
        neighbouring={"relation": "replace-one", "unit": "row (one individual)", "n_public": True},
        guarantee="pure",
        dp_guarantee=True,
        assumptions={
            "outcome_bounds": list(spec.bounds.outcome or ()),
            "outcome_direction": sec.outcome_direction,
            "covariate_bounds": setup.fmap.to_dict()["bounds"],
            "propensity": propensity,
            "propensity_source": "design (known, not estimated on the data)",
            "eta": sec.eta,
            "pi_min": setup.pi_min,
            "weight_bound_W": setup.weight_bound,
            "one_row_per_individual": True,
        },
        details={"gamma": gamma, "gamma_source": gamma_source, "dim": setup.fmap.dim,
                 "kernel": setup.fmap.kernel, "n_rows": n_rows,
                 "expected_noise_norm": mech.expected_norm},
    )


def recommend(fmap: FeatureMap, theta: FloatArray, x: FloatArray) -> npt.NDArray[np.bool_]:
    """True where the rule recommends the treated arm (score > 0; a tie goes to control)."""
    return np.asarray(fmap.transform(x) @ theta > 0.0)


def run(spec: OwlSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, pd.DataFrame], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Fit, perturb, and build the rule (and recommendations for ``apply_to``)."""
    setup = build_setup(spec)
    gamma = float(plan.details["gamma"])
    data = prepare(spec, setup, frame, spec.data.path)
    theta_hat = fit_nonprivate(setup, data, gamma)
    theta = noise.release(mechanism(setup, gamma, spec.privacy.epsilon), theta_hat)
    del theta_hat
    rule = rule_document(spec, setup, theta, plan)
    release = Release(documents={"rule.json": rule})
    summary: dict[str, Any] = {"released_theta_norm": float(np.linalg.norm(theta))}
    if "apply_to" in side:
        recs = apply_rule(rule, side["apply_to"], spec.owl.apply_to)
        release.tables["recommendations"] = recs
        summary["apply_to_rows"] = len(recs)
        summary["apply_to_share_treated"] = float(
            label_matches(recs["recommended"], spec.owl.treated).mean()
        )
    release.summary.update(summary)
    return release


def rule_document(spec: OwlSpec, setup: OwlSetup, theta: FloatArray,
                  plan: PrivacyPlan) -> dict[str, Any]:
    """Everything needed to apply the released rule, and nothing private."""
    ev = plan.events[0]
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
            "epsilon": ev.epsilon, "delta": 0.0,
            "guarantee": plan.guarantee if plan.dp_guarantee else "none",
            "dp_guarantee": plan.dp_guarantee,
            "sensitivity": ev.sensitivity, "gamma": plan.details["gamma"],
            "gamma_source": plan.details["gamma_source"]["source"],
            "weight_bound_W": setup.weight_bound,
            "neighbouring": "replace-one row",
        },
    }


def load_rule(doc: Any, path: Path) -> tuple[FeatureMap, FloatArray, dict[str, Any]]:
    """Validate an owl rule document; return its feature map, θ and arms."""
    return load_linear_rule(doc, path, "owl")


def apply_rule(doc: dict[str, Any], frame: pd.DataFrame, path: Path | None,
               rule_path: Path | None = None) -> pd.DataFrame:
    """Return ``frame`` plus a ``recommended`` column holding each row's arm label."""
    return apply_linear_rule(doc, frame, path, "owl", rule_path)


def tune_gamma(spec: OwlSpec, setup: OwlSetup, public: pd.DataFrame, *, n: int,
               epsilon: float) -> dict[str, Any]:
    """Algorithm 2 (corrected, spec §3.2) on a *public* file: choose γ for the private (n, ε).

    Each repeat draws a training set of size n and a disjoint validation set from the public rows
    (bootstrap when n > n₀ − m, else without replacement with the rest as validation), runs the
    whole DP fit — noise included, from the public seeded generator since nothing here is
    sensitive — for every γ on the grid, and scores the empirical value V (Eq. 23). The same split
    serves every γ of a repeat (common random numbers). The largest mean V wins; ties go to the
    smallest γ. Costs no privacy: the sensitive data is not read.
    """
    tune: TuneSpec = spec.owl.tune  # type: ignore[assignment]
    data = prepare(spec, setup, public, tune.public_data)
    n0 = len(data.y)
    m = tune.validation_size or max(n0 // 5, 50)
    if m >= n0:
        raise SpecError(
            f"owl.tune.validation_size: {m} must be smaller than the {n0} rows of "
            f"{tune.public_data}; lower it or use a larger public file"
        )
    grid = sorted(set(tune.grid))
    rng = np.random.default_rng(tune.seed)
    scores = np.zeros((len(grid), tune.repeats))
    for j in range(tune.repeats):
        if n > n0 - m:
            valid = rng.choice(n0, size=m, replace=False)
            pool = np.setdiff1d(np.arange(n0), valid)
            train = rng.choice(pool, size=n, replace=True)
        else:
            perm = rng.permutation(n0)
            train, valid = perm[:n], perm[n:]
        tr = Prepared(data.v[train], data.y[train], data.b_shifted[train], data.pi_received[train])
        va = Prepared(data.v[valid], data.y[valid], data.b_shifted[valid], data.pi_received[valid])
        for i, gamma in enumerate(grid):
            theta = mechanism(setup, gamma, epsilon).release(fit_nonprivate(setup, tr, gamma), rng=rng)
            scores[i, j] = value_hajek(va.v @ theta > 0.0, va)
    mean = scores.mean(axis=1)
    best = int(np.flatnonzero(mean == mean.max())[0])
    return {
        "gamma": grid[best], "public_data": str(tune.public_data), "public_rows": n0,
        "validation_size": m, "repeats": tune.repeats, "seed": tune.seed, "metric": "value (Eq. 23)",
        "grid": grid,
        "mean_value": [float(v) if math.isfinite(v) else None for v in mean],
    }


def value_hajek(pred_treated: npt.NDArray[np.bool_], data: Prepared) -> float:
    """Empirical value (Eq. 23): Σ 1(A=f) B′/π / Σ 1(A=f)/π; −inf when no row agrees."""
    agree = (data.y > 0) == pred_treated
    den = float(np.sum(agree / data.pi_received))
    if den == 0.0:
        return -math.inf
    return float(np.sum(agree * data.b_shifted / data.pi_received)) / den


METHOD = MethodDef(
    command="owl", spec_model=OwlSpec, data_columns=data_columns, side_inputs=side_inputs,
    plan=plan, run=run,
)

__all__ = ["METHOD", "OwlSection", "apply_rule", "build_setup", "fit_nonprivate", "plan", "prepare"]
