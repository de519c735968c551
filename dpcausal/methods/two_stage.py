"""``two-stage``: DP-2ERM (Lee & Chen) for individualized treatment rules.

Stage 1: covariate-balancing weights w ∈ nΔⁿ, computed WITHOUT noise and never released.
Stage 2: the weighted ITR regression (Eq. 6.1) over ‖θ‖₁ ≤ λ₁ with objective perturbation whose
noise and ridge are calibrated to how far all n weights can move when one row is replaced
(Thm 3.1/3.2 with the corrections of the spec's amendments). Only θ is released.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.errors import (
    DataError,
    MissingBoundsError,
    PrivacyError,
    SpecError,
    UncertifiedModeError,
)
from dpcausal.io.tables import numeric_column
from dpcausal.mechanisms import L2LaplaceMechanism
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector
from dpcausal.methods import two_stage_weights as wts
from dpcausal.methods.base import MethodDef, Release, SideInput
from dpcausal.methods.owl_features import FeatureMap
from dpcausal.methods.two_stage_calib import (
    Calibrated,
    StabilityBounds,
    calibrate,
    ipw_known_bounds,
    ipw_rct_bounds,
    noise_to_signal,
    uniform_bounds,
    universal_bounds,
)
from dpcausal.methods.two_stage_solver import qp_terms, solve_l1_ball_qp, sufficient_stats
from dpcausal.spec.two_stage import (
    CERTIFIED_METHODS,
    EbwSection,
    IpwLogitSection,
    MmdSection,
    TwoStageSpec,
)

FloatArray = npt.NDArray[np.float64]
RULE_FORMAT_VERSION = 1
MMD_MAX_ROWS = 5000
"""The MMD program forms the n × n kernel matrix; larger n is refused before any row is read."""
M_X = 1.0
"""Every mapped feature row has ‖x‖₂ ≤ 1 (FeatureMap divides by √dim after clipping)."""


@dataclass(frozen=True)
class TwoStageSetup:
    """Every public constant of one run, derived from the spec alone."""

    fmap: FeatureMap
    lower: float
    upper: float
    l1_radius: float
    u_range: tuple[float, float] | None  # ipw-known: [u_lo, u_hi] of 1/π over the public domain

    @property
    def center(self) -> float:
        """Public outcome offset: the midpoint of the bounds (does not change the IPW target)."""
        return 0.5 * (self.lower + self.upper)

    @property
    def m_y(self) -> float:
        """|y − center| ≤ M_y."""
        return 0.5 * (self.upper - self.lower)


@dataclass(frozen=True)
class Prepared:
    """Mapped rows of one table (never released)."""

    x: FloatArray  # stage-2 features, ‖x‖ ≤ 1
    scaled: FloatArray  # clipped, scaled covariates (stage-1 features)
    raw: FloatArray  # clipped raw covariates
    a: npt.NDArray[np.bool_]  # True = treated
    t: FloatArray  # 2·(y − center)·ã


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
    if sec.l1_radius is None:
        raise MissingBoundsError(
            "two_stage.l1_radius is missing: θ must lie in a public ℓ₁ ball (the squared loss has no "
            "finite gradient bound otherwise); add e.g. two_stage: {l1_radius: 10}"
        )
    bnds = np.array([spec.bounds.covariate(c) for c in cols.covariates], dtype=np.float64)
    fmap = FeatureMap(tuple(cols.covariates), bnds[:, 0], bnds[:, 1], sec.scaling, sec.intercept)
    lo, hi = spec.bounds.outcome
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
    return TwoStageSetup(fmap, lo, hi, float(sec.l1_radius), u_range)


def _coef_vector(spec: TwoStageSpec) -> FloatArray:
    known = spec.two_stage.ipw_known
    assert known is not None
    return np.array([known.coefficients.get(c, 0.0) for c in spec.data.columns.covariates])


def score_range(spec: TwoStageSpec, bnds: FloatArray) -> tuple[float, float]:
    """Exact range of c₀ + Σ c_j x_j over the public covariate box."""
    known = spec.two_stage.ipw_known
    assert known is not None
    coef = _coef_vector(spec)
    lo_terms = np.minimum(coef * bnds[:, 0], coef * bnds[:, 1])
    hi_terms = np.maximum(coef * bnds[:, 0], coef * bnds[:, 1])
    return known.intercept + float(lo_terms.sum()), known.intercept + float(hi_terms.sum())


def data_columns(spec: TwoStageSpec) -> list[str]:
    """Columns two-stage reads from the sensitive file."""
    cols = spec.data.columns
    return [c for c in (*cols.covariates, cols.outcome, cols.treatment) if c is not None]


def side_inputs(spec: TwoStageSpec) -> dict[str, SideInput]:
    """The rows to score, if the spec names them."""
    sec = spec.two_stage
    if sec.apply_to is None:
        return {}
    if spec.data.path is not None and _same_file(sec.apply_to, spec.data.path):
        raise SpecError(
            f"two_stage.apply_to: {sec.apply_to} is the training data; recommendations for the "
            "training rows are functions of their own sensitive covariates and are not covered by "
            "the guarantee. Apply the rule to other rows"
        )
    return {"apply_to": SideInput(sec.apply_to, None, "two_stage.apply_to file")}


def _same_file(a: Path, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _matches(col: pd.Series, label: Any) -> npt.NDArray[np.bool_]:
    if pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
        if isinstance(label, bool | int | float):
            return (col == label).to_numpy(dtype=bool, na_value=False)
        return np.zeros(len(col), dtype=bool)
    return (col.astype("string") == str(label)).to_numpy(dtype=bool, na_value=False)


def prepare(spec: TwoStageSpec, setup: TwoStageSetup, frame: pd.DataFrame,
            path: Path | None) -> Prepared:
    """Validate and map the table: clip to the public bounds, features, ±1 arms, targets t."""
    cols = spec.data.columns
    sec = spec.two_stage
    assert cols.outcome is not None
    assert cols.treatment is not None
    raw = np.column_stack([numeric_column(frame, c, path) for c in cols.covariates])
    y = numeric_column(frame, cols.outcome, path)
    if sec.outcome_direction == "lower":
        y = -y
    treated = _matches(frame[cols.treatment], sec.treated)
    control = _matches(frame[cols.treatment], sec.control_label())
    other = ~(treated | control)
    if other.any():
        first = int(np.flatnonzero(other)[0])
        raise DataError(
            f"{path}: column '{cols.treatment}' has {int(other.sum())} value(s) that are neither "
            f"the treated value {sec.treated!r} nor the control value {sec.control_label()!r} "
            f"(first at data row {first + 1}: {frame[cols.treatment].iloc[first]!r}); two-stage "
            "needs a binary treatment: collapse the arms, or set two_stage.treated/control"
        )
    raw = np.clip(raw, setup.fmap.lower, setup.fmap.upper)
    yc = np.clip(y, setup.lower, setup.upper) - setup.center
    t = 2.0 * yc * np.where(treated, 1.0, -1.0)
    return Prepared(setup.fmap.transform(raw), setup.fmap.scale(raw), raw, treated, t)


def _moments(scaled: FloatArray, order: int) -> tuple[FloatArray, float]:
    """g(x) = (1, s) or (1, s, s²) and its public norm bound M_g (|s_j| ≤ 1 after scaling)."""
    parts = [np.ones((scaled.shape[0], 1)), scaled]
    if order == 2:
        parts.append(scaled**2)
    g = np.hstack(parts)
    return g, math.sqrt(g.shape[1])


def mmd_box(sec: MmdSection) -> float:
    """R_MMD: the spec's, else max(5, ⌈1/κ⌉ + 1)."""
    return sec.box if sec.box is not None else max(5.0, math.ceil(1.0 / sec.min_arm_fraction) + 1)


def compute_weights(spec: TwoStageSpec, setup: TwoStageSetup, data: Prepared) -> FloatArray:
    """Stage 1 (never released). Returns w ∈ nΔⁿ."""
    sec = spec.two_stage
    n = len(data.t)
    if sec.weights == "uniform":
        w = wts.uniform_weights(n)
    elif sec.weights == "ipw-rct":
        assert sec.ipw_rct is not None
        w = wts.ipw_rct_weights(data.a, sec.ipw_rct.p_treated)
    elif sec.weights == "ipw-known":
        assert sec.ipw_known is not None
        score = sec.ipw_known.intercept + data.raw @ _coef_vector(spec)
        w = wts.ipw_from_scores(data.a, score)
    elif sec.weights == "ipw-logit":
        cfg = sec.ipw_logit or IpwLogitSection()
        feats = np.hstack([np.ones((n, 1)), data.scaled])
        w = wts.ipw_logit_weights(data.a, feats, radius=cfg.radius, ridge=cfg.ridge)
    elif sec.weights == "ebw":
        ebw = sec.ebw or EbwSection()
        g, m_g = _moments(data.scaled, ebw.moments)
        w = wts.ebw_weights(data.a, g, kappa=ebw.min_arm_fraction, m_g=m_g, radius=ebw.radius,
                            ridge=ebw.ridge, arm_totals=ebw.arm_totals)
    else:
        assert sec.mmd is not None
        w = wts.mmd_weights(data.a, data.scaled, bandwidth=sec.mmd.bandwidth, alpha=sec.mmd.alpha,
                            ridge=sec.mmd.ridge, box=mmd_box(sec.mmd))
    if not (np.all(np.isfinite(w)) and np.all(w >= 0)):
        raise DataError("stage-1 weights are not finite and nonnegative; no release was made "
                        "(report this as a bug)")
    return w * (n / float(w.sum()))


def stability_bounds(spec: TwoStageSpec, setup: TwoStageSetup, n: int) -> StabilityBounds:
    """W̄ sups from public inputs: exact for certified methods, else the universal caps."""
    sec = spec.two_stage
    if sec.sensitivity == "universal":
        return universal_bounds(n)
    if sec.weights not in CERTIFIED_METHODS:
        raise UncertifiedModeError(
            f"two_stage.sensitivity: 'method' has no proven stability bound for weights: "
            f"{sec.weights} (the paper's (4.12′)/(4.19)/(4.27′) are false); set sensitivity: "
            "universal, or use a certified method (uniform, ipw-rct, ipw-known)"
        )
    if sec.weights == "uniform":
        return uniform_bounds(n)
    if sec.weights == "ipw-rct":
        assert sec.ipw_rct is not None
        return ipw_rct_bounds(n, sec.ipw_rct.p_treated)
    assert setup.u_range is not None
    return ipw_known_bounds(n, *setup.u_range)


def mechanism(spec: TwoStageSpec, cal: Calibrated, dim: int) -> L2LaplaceMechanism | GaussianNoiseVector:
    """The noise vector b of Algorithm 1.

    Notes
    -----
    Neighbouring relation: replace one row (one individual); n is public.
    Sensitivity: for every θ in the ℓ₁ ball, the gradient map b_D(θ) = −[Σ w_i∇ℓ(θ; d_i) + nγθ]
    moves by at most Δ = ζ·W̄₁ˢ between neighbours, ζ = 2M_x²λ₁ + 4M_xM_y (Cor 6.1): the replaced
    record's old and new gradients are each ≤ ζ·weight and every other gradient is ≤ ζ·|Δw_i|.
    Guarantee: Gamma noise (density ∝ exp(−ε_b‖b‖/Δ), the ℓ₂-Laplace law) bounds the noise term of
    the privacy loss by ε_b; Gaussian noise with σ = (Δ/(2ε_b))(L̃ + sqrt(L̃² + 2ε_b)) bounds it by
    ε_b off an event of probability ≤ δ. The ridge γ ≥ λ_H·W̄₂aug/(ε_H n) bounds the Jacobian term
    by ε_H (Lemma 5.1, augmented form). Total: ε-DP (Gamma) or (ε, δ)-DP (Gaussian) for θ, under
    ``calibration: safe``. ``paper`` uses (3.8)/(3.9) verbatim and carries NO guarantee.
    """
    stage = "two_stage.objective_noise"
    if spec.two_stage.noise == "gamma":
        return L2LaplaceMechanism(cal.noise_epsilon, cal.shift_bound, dim, stage=stage)
    return GaussianNoiseVector(cal.noise_epsilon, spec.privacy.delta, cal.shift_bound, cal.scale,
                               dim, stage=stage)


def plan(spec: TwoStageSpec, n_rows: int, side: dict[str, pd.DataFrame], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build the plan from the spec and the public n (no row is read)."""
    sec = spec.two_stage
    delta = spec.privacy.delta
    if sec.noise == "gamma" and delta != 0.0:
        raise SpecError("privacy.delta: noise: gamma is pure ε-DP; set privacy.delta to 0 "
                        "(or use two_stage.noise: gaussian)")
    if sec.noise == "gaussian" and delta == 0.0:
        raise SpecError("privacy.delta: noise: gaussian needs privacy.delta > 0 (e.g. 1e-6, "
                        "well below 1/n)")
    if sec.calibration == "paper" and not sec.allow_uncertified:
        raise UncertifiedModeError(
            "two_stage.calibration: 'paper' reproduces the paper's calibration, which leaks "
            "(privacy loss up to ≈1.13ε); set two_stage.allow_uncertified: true to run it as a "
            "reproduction without a DP guarantee, or use calibration: safe"
        )
    if n_rows < 2:
        raise DataError("the data file needs at least 2 rows")
    if sec.weights == "mmd" and n_rows > MMD_MAX_ROWS:
        raise SpecError(
            f"weights: mmd forms an n × n kernel matrix and is limited to {MMD_MAX_ROWS} rows "
            f"(the file has {n_rows}); use weights: ebw or ipw-logit for large files"
        )
    setup = build_setup(spec)
    bounds = stability_bounds(spec, setup, n_rows)
    dim = setup.fmap.dim
    cal = calibrate(n=n_rows, dim=dim, m_x=M_X, m_y=setup.m_y, l1_radius=setup.l1_radius,
                    epsilon=spec.privacy.epsilon, delta=delta, eps_split=sec.eps_split,
                    noise=sec.noise, bounds=bounds, mode=sec.calibration)
    gamma = cal.gamma_required if sec.gamma is None else sec.gamma
    if gamma < cal.gamma_required:
        raise PrivacyError(
            f"two_stage.gamma: {sec.gamma:g} is below γ_required = {cal.gamma_required:.6g} for "
            f"ε = {spec.privacy.epsilon:g} and n = {n_rows}; raise it or omit it (default γ_required)"
        )
    mech = mechanism(spec, cal, dim)
    base = mech.event()
    rho = noise_to_signal(cal, n_rows)
    params = {**base.params, "noise": sec.noise, "calibration": sec.calibration,
              "epsilon_noise_term": cal.noise_epsilon, "epsilon_jacobian_term": cal.hessian_epsilon,
              "gamma": gamma, "gamma_required": cal.gamma_required, "zeta": cal.zeta,
              "lambda_H": cal.lambda_h, "stability": bounds.to_dict(), "l_tilde": cal.l_tilde,
              "n": n_rows}
    event = PrivacyEvent(kind=base.kind, stage=base.stage, epsilon=spec.privacy.epsilon,
                         delta=delta, sensitivity=base.sensitivity, norm="l2",
                         noise_scale=cal.scale, params=params)
    details: dict[str, Any] = {
        "weights": sec.weights, "sensitivity": sec.sensitivity, "calibration": sec.calibration,
        "noise": sec.noise, "n_rows": n_rows, "dim": dim, "gamma": gamma,
        "gamma_required": cal.gamma_required, "noise_scale": cal.scale,
        "expected_noise_norm": cal.expected_noise_norm, "noise_to_signal": rho,
        "zeta": cal.zeta, "W1s_bar": bounds.w1s, "W2aug_bar": bounds.w2aug,
        "stability": bounds.to_dict(),
    }
    if rho > 1.0:
        details["warning"] = (f"noise-to-signal ratio {rho:.3g} > 1: the released rule is likely "
                              "close to random; raise ε or n, or use a more stable weight method")
    if sec.calibration == "paper":
        details["uncertified"] = "calibration: paper leaks (privacy loss up to ≈1.13ε): no DP guarantee"
    return PrivacyPlan(
        command="two-stage",
        events=(event,),
        neighbouring={"relation": "replace-one", "unit": "row (one individual)", "n_public": True},
        guarantee="pure" if sec.noise == "gamma" else "approximate",
        dp_guarantee=sec.calibration == "safe",
        assumptions={
            "outcome_bounds": list(spec.bounds.outcome or ()),
            "outcome_direction": sec.outcome_direction,
            "outcome_center": setup.center, "M_y": setup.m_y, "M_x": M_X,
            "covariate_bounds": setup.fmap.to_dict()["bounds"],
            "l1_radius": setup.l1_radius,
            "weights": sec.weights, "sensitivity": sec.sensitivity,
            "weight_hyperparameters": _weight_params(spec, setup),
            "stage1_released": False,
            "one_row_per_individual": True,
        },
        details=details,
    )


def _weight_params(spec: TwoStageSpec, setup: TwoStageSetup) -> dict[str, Any]:
    sec = spec.two_stage
    name = sec.weights.replace("-", "_")
    section = getattr(sec, name, None) if name != "uniform" else None
    out: dict[str, Any] = section.model_dump(mode="json") if section is not None else {}
    if setup.u_range is not None:
        out["inverse_propensity_range"] = list(setup.u_range)
    if sec.weights == "mmd" and sec.mmd is not None:
        out["box_effective"] = mmd_box(sec.mmd)
    return out


def fit_theta(setup: TwoStageSetup, data: Prepared, w: FloatArray, gamma: float,
              b: FloatArray) -> FloatArray:
    """θ = exact argmin of the perturbed stage-2 objective (two_stage_solver)."""
    h, g = sufficient_stats(data.x, data.t, w)
    p, c = qp_terms(h, g, len(data.t), gamma, b)
    return solve_l1_ball_qp(p, c, setup.l1_radius).theta


def run(spec: TwoStageSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, pd.DataFrame],
        *, rng: np.random.Generator, noise_rng: np.random.Generator) -> Release:
    """Stage 1, draw b, stage 2, build the rule (and recommendations for ``apply_to``)."""
    setup = build_setup(spec)
    data = prepare(spec, setup, frame, spec.data.path)
    n = len(data.t)
    if n != plan.details["n_rows"]:
        raise DataError(f"{spec.data.path}: the file changed while running (row count)")
    w = compute_weights(spec, setup, data)
    bounds = stability_bounds(spec, setup, n)
    cal = calibrate(n=n, dim=setup.fmap.dim, m_x=M_X, m_y=setup.m_y, l1_radius=setup.l1_radius,
                    epsilon=spec.privacy.epsilon, delta=spec.privacy.delta,
                    eps_split=spec.two_stage.eps_split, noise=spec.two_stage.noise,
                    bounds=bounds, mode=spec.two_stage.calibration)
    b = mechanism(spec, cal, setup.fmap.dim).release(np.zeros(setup.fmap.dim), rng=noise_rng)
    theta = fit_theta(setup, data, w, float(plan.details["gamma"]), b)
    del w, b, data
    rule = rule_document(spec, setup, theta, plan)
    release = Release(documents={"rule.json": rule})
    release.summary["released_theta_norm"] = float(np.linalg.norm(theta))
    if "apply_to" in side:
        recs = apply_rule(rule, side["apply_to"], spec.two_stage.apply_to)
        release.tables["recommendations"] = recs
        release.summary["apply_to_rows"] = len(recs)
    return release


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
    """Validate a rule document; return its feature map, θ and arms."""
    try:
        if doc.get("command") != "two-stage" or doc.get("format_version") != RULE_FORMAT_VERSION:
            raise ValueError("not a two-stage rule of format_version 1")
        fmap = FeatureMap.from_dict(doc["feature_map"])
        theta = np.asarray(doc["theta"], dtype=np.float64)
        if theta.shape != (fmap.dim,) or not np.all(np.isfinite(theta)):
            raise ValueError(f"theta must hold {fmap.dim} finite numbers")
        arms = dict(doc["arms"])
        _ = arms["treated"], arms["control"]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{path}: not a valid dpcausal two-stage rule file ({exc})") from exc
    return fmap, theta, arms


def apply_rule(doc: dict[str, Any], frame: pd.DataFrame, path: Path | None) -> pd.DataFrame:
    """Return ``frame`` plus a ``recommended`` column (post-processing of the released θ)."""
    fmap, theta, arms = load_rule(doc, Path(str(path)))
    missing = [c for c in fmap.names if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: covariate column(s) {', '.join(missing)} of the rule not found")
    x = np.column_stack([numeric_column(frame, c, path) for c in fmap.names])
    rec = fmap.transform(x) @ theta > 0.0
    out = frame.copy()
    labels = np.array([arms["control"], arms["treated"]], dtype=object)
    out["recommended"] = pd.Series(labels[rec.astype(int)], index=out.index).infer_objects()
    return out


METHOD = MethodDef(
    command="two-stage", spec_model=TwoStageSpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan, run=run,
)

__all__ = ["METHOD", "apply_rule", "build_setup", "compute_weights", "fit_theta", "plan", "prepare"]
