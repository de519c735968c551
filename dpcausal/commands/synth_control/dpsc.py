"""The mathematics of DPSC: vertical ridge, sensitivities, the two steps' mechanisms, error formulas.

Rho, Cummings & Misra (AISTATS 2023), Algorithms 2 and 3, as corrected by ``specs/synth_control.md``
(Amendments, §3.3–§3.5, §4, §5.5). Everything here works on data already mapped to [−1, 1] by public
bounds: X is the n × T donor matrix (one row per donor, the privacy unit), y the public target.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.mechanisms import L2LaplaceMechanism, LaplaceMechanism, ObjectivePerturbation

FloatArray = npt.NDArray[np.float64]
Step2Kind = Literal["entrywise-l1", "matrix-l2"]

STAGE_COEF = "synth_control.coefficients"
STAGE_POST = "synth_control.post_donors"


def ridge_coefficients(x_pre: FloatArray, y_pre: FloatArray, lam: float) -> FloatArray:
    """f_reg = argmin_f (1/T0)‖y_pre − X_preᵀf‖² + (λ/(2T0))‖f‖² (spec §1.2, Eq. 4).

    Closed form (X_pre X_preᵀ + (λ/2) I_n)⁻¹ X_pre y_pre, or the dual X_pre (X_preᵀX_pre + (λ/2) I_T0)⁻¹
    y_pre when n > T0; both solved exactly by Cholesky (no intercept, no centring). This equals
    scikit-learn's ``Ridge(alpha=λ/2, fit_intercept=False)`` on the T0 × n design X_preᵀ.
    """
    if not (math.isfinite(lam) and lam > 0):
        raise ValueError(f"lambda must be finite and > 0, got {lam!r}")
    from scipy import linalg  # lazy: planning never solves

    x = np.asarray(x_pre, dtype=np.float64)
    y = np.asarray(y_pre, dtype=np.float64)
    n, t0 = x.shape
    if n <= t0:
        gram = x @ x.T
        gram[np.diag_indices(n)] += lam / 2.0
        return np.asarray(linalg.cho_solve(linalg.cho_factor(gram), x @ y))
    kern = x.T @ x
    kern[np.diag_indices(t0)] += lam / 2.0
    return np.asarray(x @ linalg.cho_solve(linalg.cho_factor(kern), y))


def sensitivity_r1(t0: int, lam: float) -> float:
    """R1 = √(2T0/λ): the norm bound ‖f_reg‖ ≤ ‖y_pre‖/√(2λ) ≤ √(T0/(2λ)), doubled."""
    return math.sqrt(2.0 * t0 / lam)


def sensitivity_r2(n: int, t0: int, lam: float) -> float:
    """R2 = (4T0/λ)(1 + √(nT0/(2λ))): the gradient bound evaluated at the neighbour's minimiser."""
    return (4.0 * t0 / lam) * (1.0 + math.sqrt(n * t0 / (2.0 * lam)))


def sensitivity_paper(n: int, t0: int, lam: float) -> float:
    """The paper's Δ = 4T0√(8+n)/λ (Lemma 3.7). Valid (it is ≥ the tight bound), but loose."""
    return 4.0 * t0 * math.sqrt(8.0 + n) / lam


def coefficient_sensitivity(
    mode: Literal["tight", "paper"], n: int, t0: int, lam: float
) -> tuple[float, str]:
    """Δ₂(f_reg) under replace-one-donor, and which bound is used.

    Notes
    -----
    Neighbouring relation: D = (X, y) and D′ = (X′, y) differ in one donor's whole row (all T
    periods); n, T, T0 are public; the target y is public and shared. All values lie in [−1, 1]
    after the public mapping and clipping (target included).

    Sensitivity, ``tight`` (default) = min(R1, R2), both rigorous for every n, T0, λ and any donor
    values in [−1, 1]:

    * R1 = √(2T0/λ). Write X_pre = UΣVᵀ. Then f_reg = (XXᵀ + (λ/2)I)⁻¹Xy = U diag(σ_k/(σ_k² + λ/2))
      Vᵀy, and σ/(σ² + c) ≤ 1/(2√c) for every σ ≥ 0 (AM-GM: σ² + c ≥ 2σ√c). Hence ‖f_reg‖ ≤
      ‖y_pre‖/(2√(λ/2)) = ‖y_pre‖/√(2λ) ≤ √(T0/(2λ)) for *every* data set, since |y_t| ≤ 1.
      Neighbours therefore differ by at most 2√(T0/(2λ)) = √(2T0/λ). It is attained when
      λ ≤ 2T0: y ∈ {±1}^T0, row 1 of X = κy with κ = √(λ/(2T0)), other rows 0, and X′ with row 1
      = −κy gives ‖f − f′‖ = √(2T0/λ) exactly (spec §3.3).
    * R2 = (4T0/λ)(1 + √(nT0/(2λ))). T0·J is λ-strongly convex, so ‖f − f′‖ ≤ ‖∇g(f′)‖/λ with
      g = T0(J(·; D′) − J(·; D)) (Chaudhuri et al. 2011, Lemma 7). With X′ = X + e_i dᵀ,
      ∇g(f) = 2f_i X d − 2e_i dᵀ(y − X′ᵀf); at f′: ‖y − X′ᵀf′‖ ≤ ‖y‖ (f′ beats 0), |f′_i| ≤
      ‖y‖/√(2λ) (R1), ‖d‖ ≤ 2√T0 and ‖Xd‖ ≤ 2T0√n. R2 is smaller than R1 only when λ ≫ T0.

    Sensitivity, ``paper`` = 4T0√(8+n)/λ. The paper's Lemma B.4 proof is wrong (it bounds the
    gradient using ‖f‖₁ ≤ 1, an assumption on the true f, not on the ridge solution), but the
    constant is still valid: it is ≥ R1 when λ ≤ 8T0(8+n) and ≥ R2 otherwise (spec §3.3).

    Guarantee: used with the ℓ2-Laplace mechanism at scale Δ/ε1, step 1 is ε1-DP.
    """
    if mode == "paper":
        return sensitivity_paper(n, t0, lam), "paper 4·T0·√(8+n)/λ"
    r1, r2 = sensitivity_r1(t0, lam), sensitivity_r2(n, t0, lam)
    if r1 <= r2:
        return r1, "tight R1 = √(2·T0/λ)"
    return r2, "tight R2 = (4·T0/λ)(1 + √(n·T0/(2λ)))"


def coefficient_mechanism(epsilon1: float, sensitivity: float, n: int) -> L2LaplaceMechanism:
    """Step 1 of DPSC_out: ℓ2-Laplace output perturbation of f_reg ∈ ℝⁿ.

    Notes
    -----
    Neighbouring relation: replace one donor's whole series (n, T public; target public).
    Sensitivity: Δ₂(f_reg) from :func:`coefficient_sensitivity` (full proofs there). The default
    Δ = √(2T0/λ): with X_pre = UΣVᵀ, f_reg = U diag(σ/(σ² + λ/2)) Vᵀy and σ/(σ² + c) ≤ 1/(2√c),
    so ‖f_reg‖ ≤ ‖y_pre‖/√(2λ) ≤ √(T0/(2λ)) on every data set (|y_t| ≤ 1 after clipping); two
    neighbours differ by at most twice that. Attained when λ ≤ 2T0.
    Guarantee: pure ε1-DP. Noise density ∝ exp(−ε1‖v‖₂/Δ), drawn as radius ~ Gamma(n, Δ/ε1) times
    a uniform direction (the reference code's scalar-Laplace radius is not DP, spec §3.4).
    """
    return L2LaplaceMechanism(epsilon1, sensitivity, n, stage=STAGE_COEF)


def step2_variance_ratio(n: int, h: int) -> float:
    """Per-entry noise variance of matrix-l2 over entrywise-l1: exactly (n·h + 1)/(2h)."""
    return (n * h + 1.0) / (2.0 * h)


def choose_step2(mode: Literal["auto", "entrywise-l1", "matrix-l2"], n: int, h: int) -> Step2Kind:
    """Resolve ``auto`` from the public n and h: matrix-l2 only when its variance is lower.

    The ratio (nh + 1)/(2h) is < 1 only for n = 1 and h ≥ 2; a tie goes to entrywise-l1.
    """
    if mode != "auto":
        return mode
    return "matrix-l2" if step2_variance_ratio(n, h) < 1.0 else "entrywise-l1"


def post_mechanism(
    kind: Step2Kind, epsilon2: float, n: int, h: int
) -> LaplaceMechanism | L2LaplaceMechanism:
    """Step 2: privatize the post-period donor matrix X_post (n × h).

    Notes
    -----
    Neighbouring relation: replace one donor's whole series. Only that donor's row of X_post
    changes: h entries, each by at most 2 (values in [−1, 1]).
    Sensitivity: ℓ1 = 2h (entrywise-l1); ℓ2 = 2√h (matrix-l2, Lemma B.7).
    Guarantee: pure ε2-DP either way. ``entrywise-l1``: i.i.d. Laplace of scale 2h/ε2 per entry
    (per-entry variance 8h²/ε2²). ``matrix-l2``: one ℓ2-Laplace draw on vec(X_post) ∈ ℝ^{nh},
    radius ~ Gamma(nh, 2√h/ε2) (per-entry variance (nh + 1)·4h/ε2²). Filling W with scalar
    Laplace of the paper's b = 2√h/ε2 would only be ε2√h-DP (spec §0.6); neither variant does.
    """
    if kind == "entrywise-l1":
        return LaplaceMechanism(epsilon2, 2.0 * h, stage=STAGE_POST)
    return L2LaplaceMechanism(epsilon2, 2.0 * math.sqrt(h), n * h, stage=STAGE_POST)


def coefficient_noise_variance(mech: L2LaplaceMechanism) -> float:
    """Per-coordinate variance of ℓ2-Laplace noise: (d + 1)·a² (spec §3.4)."""
    return (mech.dim + 1.0) * mech.scale**2


def post_noise_variance(mech: LaplaceMechanism | L2LaplaceMechanism) -> float:
    """Per-entry variance of W: 2b₁² (entrywise) or (nh + 1)b² (matrix-l2)."""
    if isinstance(mech, L2LaplaceMechanism):
        return (mech.dim + 1.0) * mech.scale**2
    return 2.0 * mech.scale**2


def expected_sq_error(
    x_post: FloatArray, f_reg: FloatArray, sigma_v2: float, sigma_w2: float
) -> float:
    """E‖y_out − X_postᵀ f_reg‖² over the mechanism's noise, exactly (spec §5.5).

    = σ_v²‖X_post‖_F² + h·σ_W²‖f_reg‖² + h·σ_W²·n·σ_v²: v and W are zero-mean, independent and have
    uncorrelated coordinates, so every cross term vanishes.
    """
    x = np.asarray(x_post, dtype=np.float64)
    n, h = x.shape
    return float(
        sigma_v2 * np.sum(x * x)
        + h * sigma_w2 * float(np.dot(f_reg, f_reg))
        + h * sigma_w2 * n * sigma_v2
    )


def public_error_bound(
    n: int, t0: int, h: int, lam: float, sigma_v2: float, sigma_w2: float
) -> float:
    """Public bound on E‖y_out − X_postᵀf_reg‖²/h (mapped units), from public sizes only.

    Uses ‖X_post‖_F² ≤ nh and ‖f_reg‖² ≤ T0/(2λ) (R1) in :func:`expected_sq_error`; it is the proxy
    of spec §5.7 divided by h. It bounds the privacy noise only, not the synthetic-control bias.
    """
    total = sigma_v2 * n * h + h * sigma_w2 * t0 / (2.0 * lam) + h * sigma_w2 * n * sigma_v2
    return total / h


@dataclass(frozen=True, slots=True)
class ObjectiveParameters:
    """Algorithm 3's public constants (spec §4.1, §4.3; T13)."""

    c: float
    q: float
    epsilon0: float
    delta_reg: float
    noise_bound: float
    beta: float
    branch: str


def objective_parameters(
    n: int, t0: int, lam: float, epsilon1: float, c: float | None = None
) -> ObjectiveParameters:
    """Branch, ε0, Δ and β of DPSC_obj with δ = 0 (Laplace branch), from public inputs only.

    c defaults to T0(1 + √(16n − 15)), a valid worst-case bound on |eig(2(X′X′ᵀ − XXᵀ))| (spec §4.3).
    """
    c_val = t0 * (1.0 + math.sqrt(16.0 * n - 15.0)) if c is None else float(c)
    q = 2.0 * math.log1p(c_val / lam)
    if epsilon1 > q:
        eps0, dreg, branch = epsilon1 - q, 0.0, "epsilon1 > q: Δ = 0"
    else:
        eps0 = epsilon1 / 2.0
        dreg = c_val / math.expm1(epsilon1 / 4.0) - lam
        branch = "epsilon1 <= q: Δ > 0"
    bound = min(4.0 * t0 * math.sqrt(8.0 + n), c_val * math.sqrt(n) + 4.0 * t0)
    return ObjectiveParameters(c_val, q, eps0, dreg, bound, bound / eps0, branch)


def objective_mechanism(params: ObjectiveParameters, n: int) -> L2LaplaceMechanism:
    """The noise b of DPSC_obj's perturbed objective: density ∝ exp(−‖b‖/β).

    Notes
    -----
    Neighbouring relation: replace one donor's whole series.
    Sensitivity: the paper's bound on ‖h(α)‖ = ‖2(X′ − X)y − Eα‖, which needs ‖α‖₁ ≤ 1 or
    α ∈ [−1, 1]ⁿ; the released minimiser α = f_obj is unconstrained.
    Guarantee: NONE. The privacy loss grows without bound in ‖α‖ (spec §4.6, Amendments); this
    mechanism exists only for paper reproduction, and receipts using it say dp_guarantee: false.
    """
    return L2LaplaceMechanism(params.epsilon0, params.noise_bound, n, stage=STAGE_COEF)


def objective_event(
    params: ObjectiveParameters, n: int, epsilon1: float, lam: float
) -> PrivacyEvent:
    """The (nominal, uncertified) cost of DPSC_obj step 1: it is charged the full ε1 (the event of
    :func:`objective_perturbation`, marked as objective perturbation and uncertified)."""
    base = objective_perturbation(params, n, epsilon1).event()
    return dataclasses.replace(base, params={
        **base.params,
        "method": "DPSC_obj (objective perturbation, Alg. 3)", "certified": False,
        "reason": "privacy loss unbounded in the output norm (spec §4.6)",
        "c": params.c, "q": params.q, "epsilon0": params.epsilon0,
        "delta_reg": params.delta_reg, "branch": params.branch, "lambda": lam,
    })


def objective_perturbation(params: ObjectiveParameters, n: int,
                           epsilon1: float) -> ObjectivePerturbation:
    """DPSC_obj's draw of b (:func:`objective_mechanism`) with its nominal charge ε1 (no guarantee)."""
    return ObjectivePerturbation(objective_mechanism(params, n), epsilon1, 0.0)


def objective_coefficients(
    x_pre: FloatArray, y_pre: FloatArray, lam: float, params: ObjectiveParameters,
    b: FloatArray,
) -> FloatArray:
    """f_obj = (2X_preX_preᵀ + (λ + Δ)I)⁻¹(2X_pre y_pre − b), solved exactly by Cholesky (spec §4.2).

    ``b`` is the draw of :func:`objective_perturbation` (through the run's noise guard).
    """
    from scipy import linalg  # lazy: planning never solves

    x = np.asarray(x_pre, dtype=np.float64)
    n = x.shape[0]
    a = 2.0 * (x @ x.T)
    a[np.diag_indices(n)] += lam + params.delta_reg
    return np.asarray(linalg.cho_solve(linalg.cho_factor(a), 2.0 * (x @ y_pre) - b))
