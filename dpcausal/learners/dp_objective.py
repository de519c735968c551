"""DP logistic regression by objective perturbation with Gaussian noise (certified solve + a small
output noise covering the solver's gap): a propensity model that is barely shrunk."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.dp_logistic import (
    GRAD_TOL,
    LINE_STEPS,
    MAX_ITER,
    PropensityModel,
    armijo_accepts,
    grad_hess_sums,
)
from dpcausal.learners.rounding import (
    UNIT_ROUNDOFF,
    LogisticAccuracy,
    block_total,
    damped_newton,
)
from dpcausal.mechanisms import GaussianMechanism, NoiseGuard, ObjectivePerturbation
from dpcausal.mechanisms.gaussian_vector import GaussianNoiseVector

FloatArray = npt.NDArray[np.float64]
SMOOTHNESS = 0.25
"""β: the logistic loss's second derivative in θᵀx̃ is σ(1 − σ) ≤ 1/4 (and ‖x̃‖ ≤ 1)."""
JACOBIAN_SHARE = 0.1
"""Share of the learner's ε spent on the Jacobian term, which fixes the penalty Δ = β/(e^{ε_J} − 1)."""
OUTPUT_SHARE = 0.01
"""Share of the learner's ε (and ``OUTPUT_DELTA_SHARE`` of δ) on the output noise that covers the
certified solver's distance to the exact minimiser."""
TAIL_DELTA_SHARE = 0.8
"""Share of δ for the tail event of the noise term (‖Pb‖ beyond its χ₂ quantile)."""
TRUNCATION_DELTA_SHARE = 0.1
"""Share of δ for the truncation of ‖b‖ at its public bound B (divided by 1 + e^ε: see Notes)."""
OUTPUT_DELTA_SHARE = 0.1
LAMBDA_FLOOR = 1e-5
"""The least mean-objective penalty λ = Δ/m: a larger ε or m does not lower it further (the Jacobian
term is then below its share, which only over-states ε), so the certified solve's public step
budget stays bounded."""
OMEGA_QUARTER = 0.25 - math.log(1.25)
"""ω(1/4): the least decrease of a damped Newton step while the decrement is ≥ 1/4."""
MAX_STEPS = 2_000_000
"""The plan refuses a setting whose damped Newton fallback could need more steps than this."""


def noise_sigma(epsilon: float, delta: float) -> float:
    """σ of b with 2c/σ + 2/σ² = ε, c = √(2 ln(1/δ)) (L = 1): the noise term's privacy loss bound."""
    c = math.sqrt(2.0 * math.log(1.0 / delta))
    s = 0.5 * (-c + math.sqrt(c * c + 2.0 * epsilon))
    return 1.0 / s


def chi_norm_bound(dim: int, sigma: float, log_inv_delta: float) -> float:
    """B with P(‖N(0, σ²I_dim)‖ > B) ≤ δ, given x = ln(1/δ) (Laurent & Massart 2000:
    P(χ²_k ≥ k + 2√(kx) + 2x) ≤ e^{−x})."""
    x = log_inv_delta
    return sigma * math.sqrt(dim + 2.0 * math.sqrt(dim * x) + 2.0 * x)


@dataclass(frozen=True)
class PerturbedAccuracy(LogisticAccuracy):
    """The public certificate of the perturbed solve F(θ) = (1/m)[Σℓ_i(θ) + bᵀθ] + (λ/2)‖θ‖²,
    ‖b‖ ≤ ``b_bound``: :class:`~dpcausal.learners.rounding.LogisticAccuracy` with the linear term.

    Notes
    -----
    F(θ*) ≤ F(0) = ln 2 and F(θ) ≥ (λ/2)r² − (B/m)r (r = ‖θ‖, the loss is ≥ 0), so
    ‖θ*‖ ≤ (B/m + √((B/m)² + 2λ ln 2))/λ; T adds tol/λ + 1 as before. Adding b/m to the computed
    data gradient costs ≤ 2u(R + B/m) more rounding (one addition, one division). The fallback's
    step budget uses the gap F(0) − F* ≤ ln 2 + (B/m)²/(2λ) in place of ln 2.
    """

    b_bound: float = 0.0

    @property
    def theta_bound(self) -> float:
        """T ≥ ‖θ̃‖ at an accepted point."""
        g = self.b_bound / self.m
        return (g + math.sqrt(g * g + 2.0 * self.lam * math.log(2.0))) / self.lam \
            + self.tol / self.lam + 1.0

    @property
    def grad_allowance(self) -> float:
        """ε_g of the base certificate plus the rounding of the linear term."""
        extra = 2.0 * UNIT_ROUNDOFF * (self.radius + self.b_bound / self.m)
        return super().grad_allowance + 4.0 * extra

    @property
    def max_steps(self) -> int:
        """The damped Newton fallback's public step budget (gap ln 2 + (B/m)²/(2λ))."""
        gap = math.log(2.0) + (self.b_bound / self.m) ** 2 / (2.0 * self.lam)
        return math.ceil(self.radius**2 / (4.0 * self.lam) * gap / OMEGA_QUARTER) + 10

    def problem(self) -> str | None:
        """Why a guaranteed solve is impossible at these public settings, or None (plan time)."""
        if 5.0 * self.grad_allowance > self.lam or self.max_steps > MAX_STEPS:
            return (f"the objective-perturbation penalty {self.lam:g} is too small for a solve "
                    f"that is guaranteed to finish with {self.p} features on {self.m} rows; "
                    "give the propensity model more of ε")
        return None


@dataclass(frozen=True)
class ObjectiveLogistic:
    """The DP propensity learner by objective perturbation (Gaussian noise).

    Notes
    -----
    Neighbouring relation: replace one of the m training records (m public); x̃ are the box
    features (‖x̃‖ ≤ 1 for the computed floats), A ∈ {0, 1}.

    Mechanism. Draw b ~ N(0, σ²I_d), truncate it to b̃ = b·min(1, B/‖b‖), and let θ* be the exact
    minimiser of J_D(θ) = Σ_i ℓ(θ; x̃_i, A_i) + (Δ/2)‖θ‖² + b̃ᵀθ, ℓ the logistic loss. Compute θ̃
    with ‖θ̃ − θ*‖ ≤ D (the certificate :class:`PerturbedAccuracy` at λ = Δ/m: D = (τ + ε_g)/λ)
    and release θ̃ + z, z ~ N(0, σ_A²I) the Gaussian mechanism at sensitivity 2D.

    Guarantee: (ε, δ)-DP for the released θ, with ε = ε_J + ε_b + ε_A and
    δ = δ_b + (1 + e^{ε_J + ε_b})δ_T + δ_A (the shares of this module). Proof, four steps:

    1. *Exact minimiser, untruncated b* (Chaudhuri, Monteleoni & Sarwate 2011; Kifer, Smith &
       Thakurta 2012, Thm 2, whose constants we re-derive). J_D is (Δ)-strongly convex, so
       b ↦ θ* is a bijection with inverse b_D(θ) = −Σ∇ℓ_i(θ) − Δθ and density
       p_D(θ) = φ_σ(b_D(θ))·|det(Σ∇²ℓ_i(θ) + ΔI)|. For neighbours D, D′ differing in record n:
       (a) Jacobian: with A = Σ_{i≠n}∇²ℓ_i + ΔI ⪰ ΔI and ∇²ℓ_n = c x̃x̃ᵀ, c ≤ β = 1/4,
       det(A + c x̃x̃ᵀ)/det A = 1 + c x̃ᵀA⁻¹x̃ ∈ [1, 1 + β/Δ], so the ratio of the two
       determinants is ≤ 1 + β/Δ = e^{ε_J} (Δ = β/(e^{ε_J} − 1)).
       (b) Noise term: b_D′(θ) = b_D(θ) + w(θ), w(θ) = ∇ℓ_n(θ) − ∇ℓ′_n(θ) =
       (σ(θᵀx̃) − A)x̃ − (σ(θᵀx̃′) − A′)x̃′, so ‖w‖ ≤ 2L = 2 and w ∈ V = span{x̃, x̃′}, a
       fixed subspace of dimension ≤ 2 (it depends on the pair, not on θ). Then
       ln φ(b)/φ(b + w) = (2bᵀw + ‖w‖²)/(2σ²) ≤ (2‖P_V b‖ + 2)/σ². Under D, b = b_D(θ*) is
       exactly N(0, σ²I), and ‖P_V b‖²/σ² is χ² with ≤ 2 degrees of freedom, so
       P(‖P_V b‖ > σc) ≤ e^{−c²/2} = δ_b with c = √(2 ln(1/δ_b)). Outside that event the privacy
       loss is ≤ ε_J + 2c/σ + 2/σ² = ε_J + ε_b (σ from :func:`noise_sigma`), so θ* is
       (ε_J + ε_b, δ_b)-DP (a loss bound off an event of probability δ_b).
    2. *Truncation.* The event ‖b‖ > B has probability ≤ δ_T under every D
       (:func:`chi_norm_bound`) and off it the truncated and untruncated mechanisms coincide:
       P[M(D) ∈ S] ≤ P[M_u(D) ∈ S] + δ_T ≤ e^ε′P[M_u(D′) ∈ S] + δ_b + δ_T
       ≤ e^ε′P[M(D′) ∈ S] + δ_b + (1 + e^ε′)δ_T, ε′ = ε_J + ε_b.
    3. *Inexact solve* (after Iyengar et al. 2019, approximate minima perturbation). Given D and
       θ*, the truncated noise is b̃ = −∇(Σℓ_i + (Δ/2)‖·‖²)(θ*), so θ̃ = h(D, θ*) is a
       deterministic function with ‖h(D, θ*) − θ*‖ ≤ D for every D and every ‖b̃‖ ≤ B (the
       certificate's ball T covers ‖θ*‖ for all such b̃). For neighbours at the same θ*,
       ‖h(D, θ*) − h(D′, θ*)‖ ≤ 2D (where ‖b_D′(θ*)‖ ∈ (B, B + 2], outside the certificate,
       θ* has density 0 under the truncated M(D′), so the kernel there may be set to
       h(D′, θ*) := h(D, θ*) without changing M(D′)), so releasing h(D, θ*) + z is (ε_A, δ_A)-DP
       given θ*
       (analytic Gaussian mechanism); by adaptive composition (θ*, θ̃ + z) is DP at the sum,
       and θ̃ + z alone is post-processing.
    4. π̂ (any query, any clipping) is post-processing of the released θ.

    (Here D in ‖θ̃ − θ*‖ ≤ D is the certified solver distance; the data set is D only as an
    argument of h and b_D.) The penalty λ = Δ/m ≈ β/(m·ε_J) = 10β/(mε) is 6–13× smaller than the
    output perturbation's at the NHEFS shape (m = 1,566, q = 9, propensity ε 0.4–5; whose noise
    2/(mλ) forces λ up): the model keeps nearly all of an effect, and its noise H⁻¹b enters through
    the data Hessian H.
    """

    features: BoxFeatures
    epsilon: float
    delta: float
    m: int
    stage: str = "cate.nuisance.propensity"

    @property
    def epsilon_jacobian(self) -> float:
        """ε_J: the Jacobian term."""
        return JACOBIAN_SHARE * self.epsilon

    @property
    def epsilon_noise(self) -> float:
        """ε_b: the noise term."""
        return (1.0 - JACOBIAN_SHARE - OUTPUT_SHARE) * self.epsilon

    @property
    def penalty(self) -> float:
        """Δ = max(β/(e^{ε_J} − 1), m·``LAMBDA_FLOOR``): the sum-objective penalty (λ = Δ/m);
        either way ln(1 + β/Δ) ≤ ε_J."""
        floor = LAMBDA_FLOOR * self.m
        if self.epsilon_jacobian >= math.log1p(SMOOTHNESS / floor):
            return floor
        return max(SMOOTHNESS / math.expm1(self.epsilon_jacobian), floor)

    @property
    def l2(self) -> float:
        """λ = Δ/m: the penalty of the mean objective."""
        return self.penalty / self.m

    @property
    def sigma(self) -> float:
        """σ of b (before truncation)."""
        return noise_sigma(self.epsilon_noise, TAIL_DELTA_SHARE * self.delta)

    @property
    def log_inv_truncation_delta(self) -> float:
        """ln(1/δ_T), δ_T = P(‖b‖ > B) = share·δ/(1 + e^{ε′}) (counted 1 + e^{ε′} times in δ);
        in logs, so that a huge ε does not overflow."""
        eps1 = self.epsilon_jacobian + self.epsilon_noise
        log1p_exp = eps1 + math.log1p(math.exp(-eps1))
        return log1p_exp - math.log(TRUNCATION_DELTA_SHARE * self.delta)

    @property
    def b_bound(self) -> float:
        """B: the public bound b is truncated to."""
        return chi_norm_bound(self.features.dim, self.sigma, self.log_inv_truncation_delta)

    @property
    def accuracy(self) -> PerturbedAccuracy:
        """The public certificate of the perturbed solve."""
        return PerturbedAccuracy(self.m, self.features.dim, 1.0, self.l2, GRAD_TOL,
                                 b_bound=self.b_bound)

    def problem(self) -> str | None:
        """Why the solve cannot be guaranteed at these public settings, or None (plan time)."""
        return self.accuracy.problem()

    def objective(self) -> ObjectivePerturbation:
        """The noise b with the claim of steps 1–2 (ε_J + ε_b, δ_b + (1 + e^{ε′})δ_T)."""
        eps1 = self.epsilon_jacobian + self.epsilon_noise
        delta1 = (TAIL_DELTA_SHARE + TRUNCATION_DELTA_SHARE) * self.delta
        noise = GaussianNoiseVector(
            self.epsilon_noise, TAIL_DELTA_SHARE * self.delta, 2.0, self.sigma,
            self.features.dim, stage=self.stage,
            params={"perturbation_of": "logistic objective", "penalty_sum": self.penalty,
                    "l2": self.l2, "epsilon_jacobian_term": self.epsilon_jacobian,
                    "truncated_at": self.b_bound})
        return ObjectivePerturbation(noise, eps1, delta1)

    def output(self) -> GaussianMechanism:
        """The output noise of step 3 (sensitivity 2D)."""
        return GaussianMechanism(OUTPUT_SHARE * self.epsilon, OUTPUT_DELTA_SHARE * self.delta,
                                 2.0 * self.accuracy.distance, stage=f"{self.stage}.output")

    def fit(self, x: FloatArray, a: FloatArray, *, clip: float,
            noise: NoiseGuard) -> PropensityModel:
        """Draw b, solve the perturbed objective to the certificate, add the output noise."""
        if x.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows, got {x.shape[0]}")
        b = np.asarray(noise.objective_noise(self.objective()), dtype=np.float64)
        norm = float(np.linalg.norm(b))
        if norm > self.b_bound:  # the truncation of step 2 (probability ≤ δ_T, data-free)
            b = b * (self.b_bound / norm) * (1.0 - 4.0 * UNIT_ROUNDOFF)
        theta = solve_perturbed(self.features.transform(x), a, b, self.accuracy)
        return PropensityModel(self.features, noise.release(self.output(), theta), clip)


def solve_perturbed(xt: FloatArray, a: FloatArray, b: FloatArray, acc: PerturbedAccuracy
                    ) -> FloatArray:
    """θ̃ accepted by ``acc`` for F(θ) = (1/m)[Σℓ_i(θ) + bᵀθ] + (λ/2)‖θ‖²: Armijo Newton from 0,
    then (if not certified after ``MAX_ITER`` steps) the damped Newton with a public budget."""
    from scipy import special

    m, lam = acc.m, acc.lam

    def obj(t: FloatArray) -> float:
        z = xt @ t
        loss = -np.where(a > 0.5, special.log_expit(z), special.log_expit(-z))
        return float(loss.mean()) + float(b @ t) / m + 0.5 * lam * float(t @ t)

    def grad_hess(theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        g, h = block_total(lambda rows: grad_hess_sums(xt[rows], a[rows], theta), m)
        return g + b, h

    theta = np.zeros(acc.p)
    val = obj(theta)
    for _ in range(MAX_ITER):
        g_sum, h_sum = grad_hess(theta)
        grad = g_sum / m + lam * theta
        if acc.accepts(theta, grad):
            return theta
        step = np.asarray(np.linalg.solve(h_sum / m + lam * np.eye(acc.p), grad))
        slope = float(grad @ step)
        for t in LINE_STEPS:
            cand = theta - t * step
            cval = obj(cand)
            if armijo_accepts(cval, val, float(t), slope):
                break
        theta, val = cand, cval
    return damped_newton(grad_hess, acc)
