"""``two-stage``: DP-2ERM (Lee & Chen) for individualized treatment rules.

Stage 1: covariate-balancing weights w ∈ nΔⁿ, computed WITHOUT noise and never released.
Stage 2: the weighted ITR regression (Eq. 6.1) over ‖θ‖₁ ≤ λ₁ with objective perturbation whose
noise and ridge are calibrated to how far all n weights can move when one row is replaced
(Thm 3.1/3.2 with the corrections of the spec's amendments). Only θ is released.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.errors import (
    DataError,
    PrivacyError,
    SolverError,
    SpecError,
    UncertifiedModeError,
)
from dpcausal.io.tables import same_file
from dpcausal.learners.rounding import cholesky_completes
from dpcausal.learners.rounding import gamma as rounding_gamma
from dpcausal.mechanisms import L2LaplaceMechanism, NoiseGuard, ObjectivePerturbation
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector
from dpcausal.methods import two_stage_weights as wts
from dpcausal.methods.base import MethodDef, Release, SideInput
from dpcausal.methods.two_stage_calib import (
    Calibrated,
    StabilityBounds,
    calibrate,
    ebw_bounds,
    ipw_known_bounds,
    ipw_logit_bounds,
    ipw_rct_bounds,
    noise_to_signal,
    uniform_bounds,
    universal_bounds,
)
from dpcausal.methods.two_stage_data import (
    M_X,
    Prepared,
    TwoStageSetup,
    build_setup,
    coef_vector,
    prepare,
    score_range,
)
from dpcausal.methods.two_stage_rule import apply_rule, load_rule, rule_document
from dpcausal.methods.two_stage_solver import qp_terms, solve_l1_ball_qp, sufficient_stats
from dpcausal.spec.two_stage import (
    CERTIFIED_METHODS,
    EbwSection,
    IpwLogitSection,
    MmdSection,
    TwoStageSpec,
)

FloatArray = npt.NDArray[np.float64]
MMD_MAX_ROWS = 5000
"""The MMD program forms the n × n kernel matrix; larger n is refused before any row is read."""
STAGE1_FALLBACK = ("uniform weights (w = 1) if the stage-1 program is infeasible or its solve "
                   "fails; the bound in use holds for any weights, so nothing is refused")

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
    """Stage 1 (never released). Returns w ∈ nΔⁿ.

    Notes
    -----
    A refusal is an output: once the rows are read, no branch may end the run on the data. When
    the bound in use holds for ANY weights in nΔⁿ (``sensitivity: universal``, or a method bound
    clipped to the universal caps; always the case for ``mmd``), a stage-1 solve that fails
    (the mmd program infeasible because an arm has fewer than n/R_MMD rows, no convergence, a
    singular system, non-finite weights) is replaced by the fixed public choice w ≡ 1, silently:
    the stability bound, the noise and the outputs are those of any other weights. Otherwise the
    bound is method-specific and the weights are closed forms (uniform, ipw-rct, ipw-known: finite
    by their public bounds) or certified duals (ipw-logit, ebw), whose only failure is the
    certificate's, not reachable through rounding (``two_stage_weights._certified``).
    """
    sec = spec.two_stage
    n = len(data.t)
    # Stage-1 accuracy matters only if the bound in use is method-specific: when it is clipped to
    # the universal caps (valid for ANY weights in nΔⁿ) the certificate is skipped, so no
    # data-dependent refusal can occur there (review finding: refusal side channel).
    certify = (sec.sensitivity == "method"
               and stability_bounds(spec, setup, n).method_specific(sec.calibration))
    if certify:
        w = _stage1(spec, data, certify=True)
    else:
        try:
            w = _stage1(spec, data, certify=False)
        except (SolverError, np.linalg.LinAlgError, FloatingPointError):
            w = wts.uniform_weights(n)  # the fixed public choice (any weights are covered)
        if not weights_ok(w):
            w = wts.uniform_weights(n)
    if not weights_ok(w):
        raise RuntimeError("stage-1 weights are not finite, nonnegative and positive in sum")
    return w * (n / float(w.sum()))


def weights_ok(w: FloatArray) -> bool:
    """Whether stage-1 weights can be normalised into nΔⁿ (finite, ≥ 0, positive sum)."""
    return bool(np.all(np.isfinite(w)) and np.all(w >= 0) and float(w.sum()) > 0)


def _stage1(spec: TwoStageSpec, data: Prepared, *, certify: bool) -> FloatArray:
    """The spec's weight method on the prepared rows (may raise SolverError)."""
    sec = spec.two_stage
    n = len(data.t)
    if sec.weights == "uniform":
        return wts.uniform_weights(n)
    if sec.weights == "ipw-rct":
        assert sec.ipw_rct is not None
        return wts.ipw_rct_weights(data.a, sec.ipw_rct.p_treated)
    if sec.weights == "ipw-known":
        assert sec.ipw_known is not None
        score = sec.ipw_known.intercept + data.raw @ coef_vector(spec)
        return wts.ipw_from_scores(data.a, score)
    if sec.weights == "ipw-logit":
        cfg = sec.ipw_logit or IpwLogitSection()
        feats = np.hstack([np.ones((n, 1)), data.scaled])
        return wts.ipw_logit_weights(data.a, feats, radius=cfg.radius, ridge=cfg.ridge,
                                     certify=certify)
    if sec.weights == "ebw":
        ebw = sec.ebw or EbwSection()
        g, m_g = _moments(data.scaled, ebw.moments)
        return wts.ebw_weights(data.a, g, kappa=ebw.min_arm_fraction, m_g=m_g, radius=ebw.radius,
                               ridge=ebw.ridge, arm_totals=ebw.arm_totals, certify=certify)
    assert sec.mmd is not None
    return wts.mmd_weights(data.a, data.scaled, bandwidth=sec.mmd.bandwidth, alpha=sec.mmd.alpha,
                           ridge=sec.mmd.ridge, box=mmd_box(sec.mmd))


def stability_bounds(spec: TwoStageSpec, setup: TwoStageSetup, n: int) -> StabilityBounds:
    """W̄ sups from public inputs: exact for certified methods, else the universal caps."""
    sec = spec.two_stage
    if sec.sensitivity == "universal":
        return universal_bounds(n)
    if sec.weights == "ebw":
        ebw = sec.ebw or EbwSection()
        if ebw.arm_totals != "sample":
            raise UncertifiedModeError(
                "two_stage.sensitivity: 'method' for ebw is proven only with ebw.arm_totals: "
                "sample (the equal-totals rescaling n/(2n_a) has no bound for tiny arms); set "
                "two_stage.ebw.arm_totals: sample, or sensitivity: universal"
            )
        k = 1 + ebw.moments * len(setup.fmap.names)
        m_g = math.sqrt(k)  # ‖g‖ with every |s_j| ≤ 1
        return ebw_bounds(n, m_g=m_g, kappa=ebw.min_arm_fraction, radius=ebw.radius,
                          ridge=ebw.ridge,
                          lambda_slack=wts.certificate_slack(n, 2 * k, ebw.radius, ebw.ridge))
    if sec.weights not in CERTIFIED_METHODS:
        raise UncertifiedModeError(
            f"two_stage.sensitivity: 'method' has no proven stability bound for weights: "
            f"{sec.weights} (the paper's (4.19) is false); set sensitivity: universal, or use a "
            "certified method (uniform, ipw-rct, ipw-known, ipw-logit, ebw with sample totals)"
        )
    if sec.weights == "uniform":
        return uniform_bounds(n)
    if sec.weights == "ipw-rct":
        assert sec.ipw_rct is not None
        return ipw_rct_bounds(n, sec.ipw_rct.p_treated)
    if sec.weights == "ipw-logit":
        cfg = sec.ipw_logit or IpwLogitSection()
        k = 1 + len(setup.fmap.names)
        m_w = math.sqrt(k)  # ‖(1, s)‖ with every |s_j| ≤ 1
        return ipw_logit_bounds(n, m_w=m_w, radius=cfg.radius, ridge=cfg.ridge,
                                lambda_slack=wts.certificate_slack(n, k, cfg.radius, cfg.ridge))
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
    refuse_mmd_on_engine(spec)
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
    mech = mechanism(spec, cal, dim)  # first: an ε too small for float64 is named as such
    gamma = cal.gamma_required if sec.gamma is None else sec.gamma
    if gamma < cal.gamma_required:
        raise PrivacyError(
            f"two_stage.gamma: {sec.gamma:g} is below γ_required = {cal.gamma_required:.6g} for "
            f"ε = {spec.privacy.epsilon:g} and n = {n_rows}; raise it or omit it (default γ_required)"
        )
    # P = (2/n)H + γI, ‖(2/n)H‖ ≤ 2 (Σw = n, ‖x‖ ≤ 1): a factorisation that could fail on the data
    # would be an exit that depends on it, so a γ too small for float64 is refused here (public)
    slack = 2.0 * rounding_gamma(n_rows + 2)
    if not cholesky_completes(dim, 2.0 + gamma + slack, gamma - slack):
        raise SpecError(f"two_stage.gamma: γ = {gamma:.3g} is too small for a float64 stage-2 solve "
                        f"with {dim} features that cannot fail; raise two_stage.gamma (or lower ε)")
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
        # public: whether stage 1 must certify its accuracy (only when the bound in use is
        # method-specific; a clipped-to-universal bound holds for any weights)
        "stage1_certified": (sec.sensitivity == "method" and sec.weights in ("ipw-logit", "ebw")
                             and bounds.method_specific(sec.calibration)),
        # public: what stage 1 does when its solve fails (never a refusal: that would be an output)
        "stage1_fallback": ("none needed (closed form or certified)"
                            if bounds.method_specific(sec.calibration) else STAGE1_FALLBACK),
    }
    if rho > 1.0:
        details["warning"] = (f"noise-to-signal ratio {rho:.3g} > 1: the released rule is likely "
                              "close to random; raise ε or n, or use a more stable weight method")
    if sec.noise == "gaussian" and delta >= 1.0 / n_rows:
        details["warning_delta"] = (f"δ = {delta:g} ≥ 1/n = {1.0 / n_rows:.3g} is weak (it allows "
                                    "releasing a row outright); prefer δ ≪ 1/n")
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


def release_rule(spec: TwoStageSpec, setup: TwoStageSetup, plan: PrivacyPlan, h: FloatArray,
                 g: FloatArray, n: int, side: dict[str, pd.DataFrame], *,
                 noise: NoiseGuard) -> Release:
    """Draw b once (``mechanism``), solve the exact ℓ₁-ball QP from H = Σw x xᵀ and g = Σw t x,
    build the rule (and recommendations for ``apply_to``). Shared by the in-memory run and the
    engine run (dpcausal/engine/two_stage.py), which differ only in how H and g are summed."""
    bounds = stability_bounds(spec, setup, n)
    cal = calibrate(n=n, dim=setup.fmap.dim, m_x=M_X, m_y=setup.m_y, l1_radius=setup.l1_radius,
                    epsilon=spec.privacy.epsilon, delta=spec.privacy.delta,
                    eps_split=spec.two_stage.eps_split, noise=spec.two_stage.noise,
                    bounds=bounds, mode=spec.two_stage.calibration)
    b = noise.objective_noise(ObjectivePerturbation(mechanism(spec, cal, setup.fmap.dim),
                                                    spec.privacy.epsilon, spec.privacy.delta))
    p, c = qp_terms(h, g, n, float(plan.details["gamma"]), b)
    theta = solve_l1_ball_qp(p, c, setup.l1_radius).theta
    del b, p, c
    rule = rule_document(spec, setup, theta, plan)
    release = Release(documents={"rule.json": rule})
    release.summary["released_theta_norm"] = float(np.linalg.norm(theta))
    if "apply_to" in side:
        recs = apply_rule(rule, side["apply_to"], spec.two_stage.apply_to)
        release.tables["recommendations"] = recs
        release.summary["apply_to_rows"] = len(recs)
    return release


def run(spec: TwoStageSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, pd.DataFrame],
        *, rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Stage 1, draw b, stage 2, build the rule (and recommendations for ``apply_to``)."""
    setup = build_setup(spec)
    data = prepare(spec, setup, frame, spec.data.path)
    n = len(data.t)
    if n != plan.details["n_rows"]:
        raise DataError(f"{spec.data.path}: the file changed while running (row count)")
    w = compute_weights(spec, setup, data)
    h, g = sufficient_stats(data.x, data.t, w)
    del w, data
    return release_rule(spec, setup, plan, h, g, n, side, noise=noise)


def refuse_mmd_on_engine(spec: TwoStageSpec) -> None:
    """SpecError for ``weights: mmd`` with an engine (an n × n program, not a partition sum)."""
    if spec.two_stage.weights == "mmd" and spec.engine is not None:
        raise SpecError(
            "two_stage.weights: mmd has no engine path (it solves an n × n kernel program, "
            f"limited to {MMD_MAX_ROWS} rows, that is not a sum over partitions); remove the "
            "spec's engine section and --engine to run it in memory, or use weights: ebw or "
            "ipw-logit on the engine (nothing was read or spent)"
        )

METHOD = MethodDef(
    command="two-stage", spec_model=TwoStageSpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan, run=run,
)

__all__ = [
    "METHOD",
    "M_X",
    "Prepared",
    "TwoStageSetup",
    "apply_rule",
    "build_setup",
    "compute_weights",
    "fit_theta",
    "load_rule",
    "plan",
    "prepare",
    "refuse_mmd_on_engine",
    "release_rule",
    "rule_document",
    "score_range",
    "stability_bounds",
]
