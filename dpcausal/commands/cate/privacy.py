"""cate's privacy mechanisms: the DP nuisances on the first half, and the second stage's Gaussian-
process (function) or finite-query Gaussian release."""

from __future__ import annotations

import math

from dpcausal.commands.cate.setup import CateSetup, noise_factor
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.learners.dp_logistic import DPLogistic
from dpcausal.learners.dp_multinomial import DPMultinomial
from dpcausal.learners.dp_ridge import DPRidgeArms
from dpcausal.mechanisms import GaussianProcessMechanism
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector


def nuisance_learners(spec: CateSpec, setup: CateSetup) -> tuple[DPLogistic, DPRidgeArms]:
    """Stage-1 learners with their shares of (ε, δ) on D̃ (two arms).

    Notes
    -----
    Neighbouring relation: replace one record; n public. A row lies in D̃ or in D; with the
    default random split the guarantee holds for multisets
    (:mod:`dpcausal.commands.common.row_split`).
    Sensitivity: see :class:`~dpcausal.learners.dp_logistic.DPLogistic` (2/(mλ)) and
    :class:`~dpcausal.learners.dp_ridge.DPRidgeArms` (2h(1 + 1/√λ)/(mλ) for both arms jointly).
    Guarantee: the pair (π̂, μ̂) is (ε, δ)-DP in D̃ by sequential composition of the two Gaussian
    mechanisms with (sε, sδ) and ((1−s)ε, (1−s)δ); everything stage 2 computes from them is
    post-processing with respect to D̃.
    """
    eps, dlt = spec.privacy.epsilon, spec.privacy.delta
    nu = spec.cate.nuisance
    s = nu.propensity_share
    prop = DPLogistic(setup.box, setup.propensity_l2.l2, eps * s, dlt * s, setup.n_nuisance)
    return prop, outcome_learner(spec, setup)


def arm_nuisance_learners(spec: CateSpec, setup: CateSetup) -> tuple[DPMultinomial, DPRidgeArms]:
    """Stage-1 learners for K ≥ 3 arms (``cate.arms``), with the same shares of (ε, δ) on D̃: a
    multinomial logistic propensity (:class:`~dpcausal.learners.dp_multinomial.DPMultinomial`,
    sensitivity 2√2/(mλ) whatever K) and one ridge per arm (K of them, jointly noised at the
    same 2G/(mλ) as two: :class:`~dpcausal.learners.dp_ridge.DPRidgeArms`). The composition is
    that of :func:`nuisance_learners`."""
    eps, dlt = spec.privacy.epsilon, spec.privacy.delta
    nu = spec.cate.nuisance
    s = nu.propensity_share
    prop = DPMultinomial(setup.box, setup.propensity_l2.l2, eps * s, dlt * s,
                         setup.n_nuisance, len(spec.cate.labels()))
    return prop, outcome_learner(spec, setup)


def outcome_learner(spec: CateSpec, setup: CateSetup) -> DPRidgeArms:
    """The DP ridge per declared arm, with the (1 − s) share of the nuisances' (ε, δ)."""
    eps, dlt = spec.privacy.epsilon, spec.privacy.delta
    nu = spec.cate.nuisance
    s = nu.propensity_share
    return DPRidgeArms(setup.box, setup.outcome_l2.l2, setup.y_bounds, eps * (1 - s),
                       dlt * (1 - s), setup.n_nuisance, arms=len(spec.cate.labels()))


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
    solve is within d* = 0.99τ/(2λ0) of the exact minimiser whatever the data and whichever way it
    ended (Newton's certificate or the public-length fallback), a public bound on solver error and
    float64 rounding (:class:`~dpcausal.commands.cate.krr_accuracy.KrrAccuracy`, exact kernel;
    :class:`~dpcausal.commands.cate.rff_accuracy.RffAccuracy`, random features), adding τ/λ0.
    ``sensitivity_formula: max`` multiplies by max(1, 4√c_K) so that the noise is never below the
    paper's printed Thm 3 (which carries 4(√(2π)h)^{-q} instead of (√(2π)h)^{-q/2}); ``paper`` is
    refused where it is below the corrected bound.
    The exact kernel's released values are fl(K̂_q α), within ε_f of ĝ at each point, a
    perturbation outside ℋ: its Mahalanobis norm under the noise covariance σ²(k0(X, X) + τI),
    τ ≥ 1e-10·d, is ≤ ε_f/√1e-10 per side, so ``setup.query_rounding`` = 2ε_f/√1e-10 is added
    (triangle inequality in that norm; random features: 0, the noise is on the weights).
    Guarantee: (ε, δ)-DP for the whole function, exact given L_w (Hall et al. 2013, Cor. 9); all
    query points share one GP path. With the nuisances (parallel composition over the disjoint
    halves) the pipeline is (ε, δ)-DP on all rows.

    K ≥ 3 arms (``cate.arms``, r = K − 1 contrasts k vs the control c): contrast k's objective
    J_k(g) = (1/n)Σ_i ρ_ik ℓ_c(g(X_i) − φ_ik) + λ0‖g‖² runs over all n rows of D, rows of arms
    other than k and c entering with ρ_ik = 0 (R-learner: binary weights and pseudo-outcomes on
    the conditional propensity e_k = π̂_k/(π̂_k + π̂_c), clipped to [κ, 1 − κ]; DR: ρ ≡ 1 and
    φ_k = μ̂_k − μ̂_c + 1{A=k}(Y − μ̂_k)/π̂_k − 1{A=c}(Y − μ̂_c)/π̂_c). Each contrast's weighted loss
    has the binary learner's L_w (the same sup ρ and bound on |φ|), so replacing one row moves
    each ĝ_k by ≤ Δ_ℋ, and the stacked (ĝ_1, …, ĝ_r) in the direct sum ℋ^r by ≤ √r·Δ_ℋ (a
    control row enters every contrast: the bound is attained in the worst case). The r functions
    are released by ONE mechanism with r independent paths at that sensitivity (Hall Cor. 9 on
    ℋ^r). This beats splitting (ε, δ) into r releases of (ε/r, δ/r) at Δ_ℋ: composing those r
    Gaussian mechanisms is exactly the Gaussian mechanism at μ = √r·Δ_ℋ/σ_split (Dong, Roth & Su
    2022, GDP composition), so (ε, δ)-DP of the split forces √r·Δ_ℋ/σ_split ≤ μ*(ε, δ), the
    largest μ the joint release may have, i.e. σ_split ≥ σ_joint (docs/proofs/cate.md §10).
    """
    factor = noise_factor(spec, setup)
    paths = len(spec.cate.contrast_arms())
    return GaussianProcessMechanism(spec.privacy.epsilon, spec.privacy.delta,
                                    math.sqrt(paths) * (factor * setup.rkhs_sensitivity
                                                        + setup.query_rounding),
                                    setup.bandwidth, spec.cate.calibration,
                                    stage="cate.second_stage.function", paths=paths)


def split_alternative(spec: CateSpec, setup: CateSetup) -> GaussianProcessMechanism:
    """The rejected alternative for K ≥ 3 arms: one release per contrast at (ε/r, δ/r) and the
    per-contrast Δ_ℋ (its σ is never below the joint release's; reported by the plan)."""
    r = len(spec.cate.contrast_arms())
    return GaussianProcessMechanism(spec.privacy.epsilon / r, spec.privacy.delta / r,
                                    noise_factor(spec, setup) * setup.rkhs_sensitivity
                                    + setup.query_rounding,
                                    setup.bandwidth, spec.cate.calibration,
                                    stage="cate.second_stage.function.split")


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


def point_noise_sd(spec: CateSpec, setup: CateSetup, d: int) -> float | None:
    """The sd of the noise on each released τ(x), from public inputs; None where it is
    data-dependent (queries mode with ``gamma_method: search``: γ(T, D) is never released).

    Function mode: σ·√k0(x, x) = σ for the GP path (unit-diagonal kernel; the Cholesky jitter
    τ ≥ 1e-10·d it adds is a relative (1 + τ)^½, negligible), and σ·‖ζ(x)‖ = σ for random
    Fourier features (‖ζ(x)‖² = (1/m)Σ cos² + sin² = 1). Queries mode, certified γ: γ·c.
    """
    if spec.cate.mode == "function":
        return function_mechanism(spec, setup).sigma
    if spec.cate.gamma_method == "certified":
        return queries_mechanism(spec, setup, d, certified_gamma(setup, d)).sigma
    return None
