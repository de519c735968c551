"""``cate``: DP-CATE (Schröder, Melnychuk & Feuerriegel, ICLR 2025) with DP nuisances.

A split of the rows into D̃ (nuisances) and D (second stage), by a secret random permutation
(default; :mod:`dpcausal.methods._split`) or a public seed. Stage 1 on D̃: DP ℓ2-logistic
propensity and DP ridge outcome models per arm (Gaussian output perturbation). Stage 2 on D: R- or
DR-learner weights ρ and pseudo-outcomes φ, weighted Gaussian-kernel ridge regression; release by
``function`` mode (Thm 3, one Gaussian-process path, noise = max(printed, corrected) formula) or
``queries`` mode (Thm 1, finite-query Gaussian noise calibrated to the influence-function bound;
asymptotic guarantee). Spec: ``specs/cate.md`` with errata E1, E3, E4 and its amendments.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.stats import qmc

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import Guarantee, PrivacyPlan
from dpcausal.errors import DataError, SpecError
from dpcausal.io.tables import numeric_column
from dpcausal.learners.dp_logistic import DPLogistic, PropensityModel
from dpcausal.learners.dp_ridge import DPRidgeArms, OutcomeModel
from dpcausal.mechanisms import GaussianProcessMechanism, NoiseGuard
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector
from dpcausal.methods import _split
from dpcausal.methods.base import MethodDef, Release, SideInput
from dpcausal.methods.cate_krr import (
    InfluenceVectors,
    KrrFit,
    fit_krr,
    pseudo_outcomes,
    residual_bound,
)
from dpcausal.methods.cate_plot import plot_png
from dpcausal.methods.cate_rff import FourierFeatures, fit_rff_streaming
from dpcausal.methods.cate_setup import (
    NUISANCE_PART,
    SECOND_PART,
    CateSetup,
    build_setup,
    grid_axes,
    noise_factor,
    query_points,
)
from dpcausal.spec.cate import CateSpec

FloatArray = npt.NDArray[np.float64]
SEARCH_SEED = 0
"""Public seed of the Sobol candidates of the queries-mode γ search (no data)."""


def data_columns(spec: CateSpec) -> list[str]:
    """Covariates, treatment and outcome."""
    cols = spec.data.columns
    return [c for c in [*cols.covariates, cols.treatment, cols.outcome] if c is not None]


def side_inputs(spec: CateSpec) -> dict[str, SideInput]:
    """The public query file, if any (never the sensitive data itself: spec P15)."""
    q = spec.cate.queries
    if q is None:
        return {}
    if spec.data.path is not None:
        try:
            same = q.resolve() == spec.data.path.resolve()
        except OSError:
            same = False
        if same:
            raise SpecError(f"cate.queries: {q} is the sensitive data file; query points must be "
                            "public and fixed in advance (values at the training rows are not "
                            "covered by the guarantee). Use a separate public file or cate.grid")
    return {"queries": SideInput(q, None, "cate.queries file")}


# --------------------------------------------------------------------------- mechanisms


def nuisance_learners(spec: CateSpec, setup: CateSetup) -> tuple[DPLogistic, DPRidgeArms]:
    """Stage-1 learners with their shares of (ε, δ) on D̃.

    Notes
    -----
    Neighbouring relation: replace one record; n public. A row lies in D̃ or in D; with the
    default random split the guarantee holds for multisets (:mod:`dpcausal.methods._split`).
    Sensitivity: see :class:`~dpcausal.learners.dp_logistic.DPLogistic` (2/(mλ)) and
    :class:`~dpcausal.learners.dp_ridge.DPRidgeArms` (2h(1 + 1/√λ)/(mλ) for both arms jointly).
    Guarantee: the pair (π̂, μ̂) is (ε, δ)-DP in D̃ by sequential composition of the two Gaussian
    mechanisms with (sε, sδ) and ((1−s)ε, (1−s)δ); everything stage 2 computes from them is
    post-processing with respect to D̃.
    """
    eps, dlt = spec.privacy.epsilon, spec.privacy.delta
    nu = spec.cate.nuisance
    s = nu.propensity_share
    prop = DPLogistic(setup.box, nu.propensity_l2, eps * s, dlt * s, setup.n_nuisance)
    out = DPRidgeArms(setup.box, nu.outcome_l2, setup.y_bounds, eps * (1 - s), dlt * (1 - s),
                      setup.n_nuisance)
    return prop, out


def function_mechanism(spec: CateSpec, setup: CateSetup) -> GaussianProcessMechanism:
    """The Gaussian-process release of ĝ_D (Thm 3; Alg. 1 batch).

    Notes
    -----
    Neighbouring relation: replace one row of D (n public), nuisances fixed (they are DP in D̃).
    Sensitivity: J(g) = (1/n)Σ ρ_i ℓ_c(g(X_i) − φ_i) + λ0‖g‖² is 2λ0-strongly convex in the RKHS ℋ
    of k0, and each weighted loss ρℓ(·, φ) is L_w-Lipschitz (Huber: L_w = 2c·sup ρ, sup ρ =
    (1−κ)² for R, 1 for DR; squared loss: the certified bound of spec §3.4), so replacing one row
    moves the exact minimiser by ‖ĝ_D − ĝ_D′‖_ℋ ≤ L_w·√(sup k0(x,x))/(λ0 n) = L_w/(λ0 n)
    (Bousquet–Elisseeff; the proof's Eq. 64, i.e. Lemma 1 with the corrected exponent, E1). The
    solver is within tol/(2λ0) of the exact minimiser, adding tol/λ0. ``sensitivity_formula: max``
    multiplies by max(1, 4√c_K) so that the noise is never below the paper's printed Thm 3
    (which carries 4(√(2π)h)^{-q} instead of (√(2π)h)^{-q/2}); ``paper`` is refused where it is
    below the corrected bound.
    Guarantee: (ε, δ)-DP for the whole function, exact given L_w (Hall et al. 2013, Cor. 9); all
    query points share one GP path. With the nuisances (parallel composition over the disjoint
    halves) the pipeline is (ε, δ)-DP on all rows.
    """
    factor = noise_factor(spec, setup)
    return GaussianProcessMechanism(spec.privacy.epsilon, spec.privacy.delta,
                                    factor * setup.rkhs_sensitivity, setup.bandwidth,
                                    spec.cate.calibration, stage="cate.second_stage.function")


def queries_constant(spec: CateSpec, setup: CateSetup) -> float:
    """c(ε, δ, n) = 5·√(2 ln n · ln(2/δ))/(ε n) (Thm 1, Eq. 10)."""
    eps, dlt, n = spec.privacy.epsilon, spec.privacy.delta, setup.n
    return 5.0 * math.sqrt(2.0 * math.log(n) * math.log(2.0 / dlt)) / (eps * n)


def certified_gamma(setup: CateSetup, d: int) -> float:
    """Public bound on γ(T, D): √d/λ0 · sup s(x) (spec §2.4 option 2; squared loss)."""
    assert setup.sup_g is not None
    dy, k = setup.delta_y, setup.kappa
    if setup.learner == "r":
        s_max = (1 - k) * dy + (1 - k) ** 2 * (dy + setup.sup_g)
    else:
        s_max = dy / k + dy + setup.sup_g
    return math.sqrt(d) / setup.lam0 * s_max


def queries_mechanism(spec: CateSpec, setup: CateSetup, d: int, gamma: float | None
                      ) -> GaussianNoiseVector:
    """The finite-query Gaussian mechanism of Thm 1: ĝ_D(x) + γ·c(ε,δ,n)·N(0, I_d).

    ``gamma=None`` builds the plan-time object for ``gamma_method: search``, whose scale is per
    unit of γ (γ is data-dependent and never released, spec §7.3).

    Notes
    -----
    Neighbouring relation: replace one row of D (n public), nuisances fixed.
    Sensitivity: the ξ-smooth sensitivity of the d query values is ≤ √(ln n)/n · γ(T, D)
    (Avella-Medina 2021, Lemma 5), with γ the gross-error sensitivity sup_z ‖h_D(x_z) ρ (φ − ĝ)‖₂
    over the whole domain (h of the KRR: spec §2.2; the regularisation term of the contamination IF
    cancels for replace-one, E3). ``search`` takes the sup over data rows, queries, Sobol points
    and corners of the box, times ``gamma_safety``; ``certified`` uses the public bound
    √d/λ0 · sup s(x).
    Guarantee: asymptotic (ε, δ)-DP (Thm 1; Lemma 5 holds for n large enough), NOT a worst-case
    finite-n guarantee: the receipt says ``guarantee: asymptotic``.
    """
    c = queries_constant(spec, setup)
    unit = math.sqrt(math.log(setup.n)) / setup.n
    base = {"c_eps_delta_n": c, "gamma_method": spec.cate.gamma_method, "queries": d,
            "smooth_sensitivity": "SS <= sqrt(ln n)/n * gamma(T,D)"}
    if gamma is None:
        params = {**base, "scale_is": "per unit of gamma(T,D): sd = gamma*c (data-dependent, "
                  "not released)", "gamma_safety": spec.cate.gamma_safety}
        return GaussianNoiseVector(spec.privacy.epsilon, spec.privacy.delta, unit, c, d,
                                   stage="cate.second_stage.queries", params=params)
    return GaussianNoiseVector(spec.privacy.epsilon, spec.privacy.delta, unit * gamma,
                               max(gamma * c, 1e-300), d, stage="cate.second_stage.queries",
                               params={**base, "gamma": gamma})


# --------------------------------------------------------------------------- plan


def _tag(event: PrivacyEvent, partition: str) -> PrivacyEvent:
    return dataclasses.replace(event, partition=partition)


def _with_params(event: PrivacyEvent, extra: dict[str, Any]) -> PrivacyEvent:
    return dataclasses.replace(event, params={**event.params, **extra})


def plan(spec: CateSpec, n_rows: int, side: dict[str, Any], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """Build the plan from the spec, the public row count and the public query file."""
    setup = build_setup(spec, n_rows)
    sec = spec.cate
    if spec.engine is not None and sec.features != "rff":
        raise SpecError(
            f"cate.features: '{sec.features}' (the exact n × n kernel ridge) has no engine path; "
            "set cate.features: rff (random Fourier features, any n) to run on an engine, or "
            "remove the spec's engine section and --engine to run in memory")
    queries = query_points(spec, setup, side)
    d = len(queries)
    prop, out = nuisance_learners(spec, setup)
    for field, problem in (("propensity_l2", prop.problem()), ("outcome_l2", out.problem())):
        if problem is not None:  # public settings only: refused before any row is read
            raise SpecError(f"cate.nuisance.{field}: {problem}; raise it")
    # the solves' public accuracy (learners/rounding.py), already inside the sensitivities
    events = [_with_params(_tag(prop.mechanism().event(), NUISANCE_PART),
                           {"solver_distance_to_minimiser": prop.accuracy.distance,
                            "solver_stop_tol": prop.accuracy.stop_tol}),
              _with_params(_tag(out.mechanism().event(), NUISANCE_PART),
                           {"solver_error_per_arm": out.solve_error,
                            "centred_outcome_bound": out.half_range})]
    query_source: dict[str, Any] = (
        {"file": str(sec.queries), "rows": d, "sha256_of_covariates_csv": hashlib.sha256(
            queries[list(setup.covariates)].to_csv(index=False).encode()).hexdigest()}
        if sec.queries is not None else {"grid": sec.grid.model_dump() if sec.grid else None,
                                         "rows": d})
    details: dict[str, Any] = {"mode": sec.mode, "learner": sec.learner, "queries": d,
                               "n_nuisance_half": setup.n_nuisance, "n_second_half": setup.n,
                               "composition": "the two nuisance mechanisms (first half) and the "
                                              "second stage (second half) read disjoint rows of a "
                                              "data-independent split: total = max, not sum"}
    warnings: list[str] = []
    if sec.mode == "function":
        mech = function_mechanism(spec, setup)
        ev = mech.event()
        ev = dataclasses.replace(ev, params={
            **ev.params, "sensitivity_formula": sec.sensitivity_formula,
            "corrected_rkhs_sensitivity": setup.rkhs_sensitivity,
            "formula_factor": noise_factor(spec, setup), "lipschitz_L_w": setup.lipschitz_w,
            "ridge_lambda0": setup.lam0, "n": setup.n,
            "sigma_classic": mech.sigma_classic, "sigma_analytic": mech.sigma_analytic})
        if sec.features == "rff":
            ev = dataclasses.replace(ev, params={
                **ev.params, "kernel": "random Fourier features of the Gaussian kernel",
                "rff_pairs_m": sec.rff_dim, "rff_seed": sec.rff_seed,
                "covariance": "sigma^2 * I on the 2m feature weights"})
        events.append(_tag(ev, SECOND_PART))
        details["noise_sd_per_point"] = mech.sigma
        if mech.sigma > setup.delta_y:
            warnings.append(f"the per-point noise sd {mech.sigma:.3g} exceeds the outcome range "
                            f"{setup.delta_y:g}: the release will be mostly noise (raise ε, n or "
                            "cate.ridge)")
        guarantee: Guarantee = "approximate"
    else:
        gamma = certified_gamma(setup, d) if sec.gamma_method == "certified" else None
        qm = queries_mechanism(spec, setup, d, gamma)
        events.append(_tag(qm.event(), SECOND_PART))
        if gamma is not None:
            details["noise_sd_per_query"] = qm.sigma
        if spec.privacy.epsilon > 1.0:
            warnings.append("queries mode: Thm 1's constants come from small-ε smooth-sensitivity "
                            "results; ε > 1 is outside their usual range")
        guarantee = "asymptotic"
    if sec.learner == "dr":
        warnings.append(f"DR-learner: pseudo-outcomes scale like 1/κ = {1 / setup.kappa:g}; "
                        "expect much more noise than the R-learner")
    if warnings:
        details["warning"] = " | ".join(warnings)
    return PrivacyPlan(
        command="cate",
        events=tuple(events),
        neighbouring={"relation": "replace-one", "unit": "row (one individual)", "n_public": True,
                      "row_order": _split.row_order(sec.split),
                      "composition": "parallel over the split into D~ (nuisances) and D "
                                     "(second stage): total (ε, δ); sequential would be (2ε, 2δ)"},
        guarantee=guarantee,
        dp_guarantee=True,
        assumptions={
            "outcome_bounds": list(setup.y_bounds),
            "covariate_bounds": {c: list(setup.box_bounds(c)) for c in setup.covariates},
            "treatment_values": [0, 1],
            "queries": query_source,
            "features": sec.features,
            "split": {**sec.split.receipt(), "first_half_fraction": sec.first_half_fraction},
            "nuisance": {"propensity": "DP l2-logistic, Gaussian output perturbation",
                         "outcome": "DP ridge per arm, joint Gaussian output perturbation",
                         "propensity_l2": sec.nuisance.propensity_l2,
                         "outcome_l2": sec.nuisance.outcome_l2,
                         "propensity_share": sec.nuisance.propensity_share},
            **setup.public_dict(),
            "one_row_per_individual": True,
        },
        details=details,
    )


# --------------------------------------------------------------------------- run


@dataclasses.dataclass(frozen=True)
class Prepared:
    """Validated, clipped arrays of the sensitive table, split into the two halves."""

    x1: FloatArray
    a1: FloatArray
    y1: FloatArray
    x2: FloatArray
    a2: FloatArray
    y2: FloatArray


def clip_rows(spec: CateSpec, setup: CateSetup, frame: pd.DataFrame
              ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(x, a, y) of ``frame``: validated (A ∈ {0, 1}), x clipped to the box, y to the outcome bounds."""
    path = spec.data.path
    cols = spec.data.columns
    assert cols.treatment is not None
    assert cols.outcome is not None
    x = np.column_stack([numeric_column(frame, c, path) for c in setup.covariates])
    a = numeric_column(frame, cols.treatment, path)
    bad = (a != 0.0) & (a != 1.0)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DataError(f"{path}: column '{cols.treatment}' must hold only 0 and 1 (binary "
                        f"treatment); data row {first + 1} holds another value. Recode the "
                        "treatment column")
    y = np.clip(numeric_column(frame, cols.outcome, path), *setup.y_bounds)
    x = np.clip(x, setup.box.lo, setup.box.hi)
    return x, a, y


def halves(spec: CateSpec, setup: CateSetup) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(D̃ rows, D rows) by ``cate.split`` (:mod:`dpcausal.methods._split`): by default a fresh
    secret permutation, so call it once per run."""
    return _split.parts(spec.cate.split, setup.n_total, setup.n_nuisance)


def prepare(spec: CateSpec, setup: CateSetup, frame: pd.DataFrame) -> Prepared:
    """Read, validate (A ∈ {0, 1}), clip to the public bounds and split into the two halves."""
    x, a, y = clip_rows(spec, setup, frame)
    i1, i2 = halves(spec, setup)
    return Prepared(x[i1], a[i1], y[i1], x[i2], a[i2], y[i2])


def second_stage(setup: CateSetup, prop: PropensityModel, outm: OutcomeModel, x: FloatArray,
                 a: FloatArray, y: FloatArray) -> tuple[KrrFit, FloatArray, FloatArray]:
    """ρ, φ on D from the (fixed) nuisances, and the exact weighted KRR fit (not a release)."""
    pi = prop.predict(x)
    rho, phi = pseudo_outcomes(setup.learner, a, y, pi, outm.predict(x, 0), outm.predict(x, 1))
    s = setup.box.unit(x)
    fit = fit_krr(s, rho, phi, bandwidth=setup.bandwidth, lam0=setup.lam0,
                  huber_c=setup.huber_c, grad_tol=setup.grad_tol)
    return fit, rho, phi


def rff_features(spec: CateSpec, setup: CateSetup) -> FourierFeatures:
    """The public random Fourier feature map (drawn from ``cate.rff_seed``, no data)."""
    return FourierFeatures.draw(setup.q, spec.cate.rff_dim, setup.bandwidth, spec.cate.rff_seed)


def second_stage_rff(setup: CateSetup, feats: FourierFeatures, prop: PropensityModel,
                     outm: OutcomeModel, x: FloatArray, a: FloatArray, y: FloatArray) -> FloatArray:
    """Weights ŵ of the random-feature second stage (not a release).

    Notes
    -----
    Sensitivity: J(w) = (1/n)Σ ρ_i ℓ_c(wᵀζ_i − φ_i) + λ0‖w‖² is 2λ0-strongly convex in w and each
    record's gradient ρℓ′ζ has norm ≤ L_w (‖ζ‖ = 1), so ‖ŵ_D − ŵ_D′‖₂ ≤ L_w/(λ0 n) — the same Δ as
    the exact kernel (plus tol/λ0 for the solver). The release is
    :meth:`GaussianProcessMechanism.release_weights` with that Δ. Streams: ζ is computed in row
    blocks, never as an n × 2m matrix.
    """
    pi = prop.predict(x)
    rho, phi = pseudo_outcomes(setup.learner, a, y, pi, outm.predict(x, 0), outm.predict(x, 1))
    return fit_rff_streaming(feats, setup.box.unit(x), rho, phi, lam0=setup.lam0,
                             huber_c=setup.huber_c, grad_tol=setup.grad_tol).w


def function_document(spec: CateSpec, setup: CateSetup, weights: FloatArray) -> dict[str, Any]:
    """The released CATE function of the RFF variant: public feature map + private weights."""
    return {
        "format_version": 1, "command": "cate", "kind": "random-fourier-feature CATE function",
        "evaluate": "tau(x) = zeta(s(x)) . weights, s(x) = (clip(x, lo, hi) - lo)/(hi - lo), "
                    "zeta(s) = [cos(s @ omega), sin(s @ omega)] / sqrt(m)",
        "covariates": list(setup.covariates),
        "bounds": {c: list(setup.box_bounds(c)) for c in setup.covariates},
        "bandwidth": setup.bandwidth, "rff_seed": spec.cate.rff_seed, "m": spec.cate.rff_dim,
        "omega": rff_features(spec, setup).omega.tolist(),
        "weights": [float(v) for v in weights],
        "privacy": {"epsilon": spec.privacy.epsilon, "delta": spec.privacy.delta,
                    "guarantee": "approximate", "learner": setup.learner},
    }


def search_gamma(spec: CateSpec, setup: CateSetup, fit: KrrFit, rho: FloatArray,
                 prop: PropensityModel, outm: OutcomeModel, sq: FloatArray) -> float:
    """γ(T, D) by search over candidates in the box (a lower bound of the sup; times safety)."""
    sec = spec.cate
    sobol = qmc.Sobol(setup.q, scramble=True, seed=np.random.default_rng(SEARCH_SEED))
    m = 1 << max(6, math.ceil(math.log2(sec.search_points)))
    cands = [fit.points, sq, sobol.random(m)]
    if setup.q <= 10:
        corners = np.array(np.meshgrid(*[[0.0, 1.0]] * setup.q, indexing="ij")).reshape(setup.q, -1).T
        cands.append(corners)
    cand = np.clip(np.vstack(cands), 0.0, 1.0)
    infl = InfluenceVectors.build(sq, fit.points, rho, bandwidth=setup.bandwidth, lam0=setup.lam0)
    xr = setup.box.lo + cand * (setup.box.hi - setup.box.lo)
    s_val = residual_bound(setup.learner, prop.predict(xr), outm.predict(xr, 0),
                           outm.predict(xr, 1), fit.predict(cand), setup.y_bounds)
    return sec.gamma_safety * float(np.max(infl.norms(cand) * s_val))


def run(spec: CateSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, Any], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Fit the DP nuisances on D̃, the second stage on D, and release τ̂ at the query points."""
    setup = build_setup(spec, len(frame))
    queries = query_points(spec, setup, side)
    data = prepare(spec, setup, frame)
    prop_l, out_l = nuisance_learners(spec, setup)
    prop = prop_l.fit(data.x1, data.a1, clip=setup.kappa, noise=noise)
    outm = out_l.fit(data.x1, data.a1, data.y1, noise=noise)
    sq = setup.box.unit(queries[list(setup.covariates)].to_numpy(dtype=np.float64))
    weights = None
    if spec.cate.features == "rff":
        feats = rff_features(spec, setup)
        w_hat = second_stage_rff(setup, feats, prop, outm, data.x2, data.a2, data.y2)
        weights = noise.release_weights(function_mechanism(spec, setup), w_hat)
        del w_hat
        tau = feats.evaluate(sq, weights)
    else:
        fit, rho, _ = second_stage(setup, prop, outm, data.x2, data.a2, data.y2)
        g_q = fit.predict(sq)
        if spec.cate.mode == "function":
            tau = noise.release(function_mechanism(spec, setup), g_q, points=sq)
        else:
            if spec.cate.gamma_method == "certified":
                gamma = certified_gamma(setup, len(queries))
                tau = noise.release(queries_mechanism(spec, setup, len(queries), gamma), g_q)
            else:  # γ(T, D) is data-dependent (smooth sensitivity): the planned mechanism is per
                # unit of γ, so release g/γ through it and scale back: g + γ·c·N(0, I) exactly
                gamma = max(search_gamma(spec, setup, fit, rho, prop, outm, sq), 1e-300)
                unit = queries_mechanism(spec, setup, len(queries), None)
                tau = gamma * noise.release(unit, g_q / gamma)
        del g_q, fit, rho
    return build_release(spec, setup, queries, tau, weights)


def build_release(spec: CateSpec, setup: CateSetup, queries: pd.DataFrame, tau: FloatArray,
                  weights: FloatArray | None) -> Release:
    """cate.csv (+ cate_function.json for rff, + cate.png for a 1-D/2-D grid) and the summary."""
    table = queries.copy()
    table["cate"] = tau
    release = Release(tables={"cate": table})
    if weights is not None:
        release.documents["cate_function.json"] = function_document(spec, setup, weights)
    axes = grid_axes(spec, setup)
    if spec.cate.plot and axes:
        release.figures["cate.png"] = plot_png(table, axes, spec)
    release.summary.update({"mode": spec.cate.mode, "learner": spec.cate.learner,
                            "queries": len(table), "released_cate_mean": float(np.mean(tau))})
    return release


METHOD = MethodDef("cate", CateSpec, data_columns, side_inputs, plan, run)
