"""DP ridge regression per treatment arm by joint output perturbation (Gaussian mechanism)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.rounding import (
    block_total,
    effective_half_range,
    ridge_error,
    ridge_problem,
    solve_spd,
)
from dpcausal.mechanisms import GaussianMechanism, NoiseGuard

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class OutcomeModel:
    """μ̂(x, a) = clip(c + θ_aᵀx̃, y_lo, y_hi) for a ∈ {0, 1} (or 0 … K − 1)."""

    features: BoxFeatures
    theta: FloatArray  # shape (K, dim): row a is arm a
    center: float
    y_bounds: tuple[float, float]

    def predict(self, x: npt.ArrayLike, arm: int) -> FloatArray:
        """μ̂(x, arm) clipped to the public outcome range (post-processing)."""
        return np.clip(self.center + self.features.transform(x) @ self.theta[arm], *self.y_bounds)


def arm_sums(xt: FloatArray, a: FloatArray, r: FloatArray, arms: int = 2
             ) -> tuple[FloatArray, FloatArray]:
    """The sufficient statistics per arm: (Σ_{A_i=a} x̃_i x̃_iᵀ, Σ_{A_i=a} r_i x̃_i), shapes
    (K, d, d) and (K, d) (arms a = 0 … K − 1, K = ``arms``), summed in blocks added exactly
    rounded (``block_total``: the accuracy ``ridge_error`` assumes). Sums over disjoint row sets
    (an engine's batches) add up — exactly rounded, by ``exact_total`` — to the sums over their
    union."""
    d = xt.shape[1]

    def block(rows: slice) -> tuple[FloatArray, FloatArray]:
        grams, rhs = np.empty((arms, d, d)), np.empty((arms, d))
        xb, ab, rb = xt[rows], a[rows], r[rows]
        for arm in range(arms):
            w = (ab == arm).astype(np.float64)
            grams[arm] = (xb * w[:, None]).T @ xb
            rhs[arm] = xb.T @ (w * rb)
        return grams, rhs

    return block_total(block, xt.shape[0])


def solve_ridge_arms(grams: FloatArray, rhs: FloatArray, m: int, l2: float) -> FloatArray:
    """θ̂_a from the per-arm sums of :func:`arm_sums` over the m records: one Cholesky solve per
    arm, whose error is bounded a priori by :func:`~dpcausal.learners.rounding.ridge_error` (a
    public function folded into the sensitivity), so nothing is checked on the data and nothing
    can refuse (the plan has excluded penalties too small for float64: ``DPRidgeArms.problem``).
    """
    k, d = rhs.shape
    out = np.empty((k, d))
    for arm in range(k):
        out[arm] = solve_spd(grams[arm] / m + l2 * np.eye(d), rhs[arm] / m)
    return out


def fit_ridge_arms(xt: FloatArray, a: FloatArray, r: FloatArray, l2: float, arms: int = 2
                   ) -> FloatArray:
    """θ̂_a = argmin (1/m) Σ 1{A_i = a} ½(θᵀx̃_i − r_i)² + (λ/2)‖θ‖², a = 0 … arms − 1 (closed form)."""
    grams, rhs = arm_sums(xt, a, r, arms)
    return solve_ridge_arms(grams, rhs, xt.shape[0], l2)


@dataclass(frozen=True)
class DPRidgeArms:
    """The DP outcome learner: one ridge per arm on the centred, clipped outcome; θ = (θ₀, …) noised.

    Notes
    -----
    Neighbouring relation: replace one of the m training records (m public).
    Sensitivity: with Y clipped to [y_lo, y_hi], r = Y − c, |r| ≤ h = (y_hi − y_lo)/2 and ‖x̃‖ ≤ 1,
    F_a(θ̂_a) ≤ F_a(0) ≤ h²/2 gives ‖θ̂_a‖ ≤ h/√λ, so on that ball each record's gradient
    (θᵀx̃ − r)x̃ has norm ≤ G = h(1 + 1/√λ). F_a is λ-strongly convex, so a record that stays in arm a
    moves θ̂_a by ≤ 2G/(mλ) and the other arm not at all; a record that switches arm moves each of
    θ̂₀, θ̂₁ by ≤ G/(mλ), jointly ≤ √2·G/(mλ). Hence the stacked (θ̂₀, θ̂₁) has ℓ2 sensitivity
    ≤ 2G/(mλ) (one mechanism covers both arms; no per-arm budget split, spec P3). The same holds
    for K ≥ 3 arms (``arms``): a replaced record moves at most the two arms it leaves and joins,
    the others' objectives being unchanged, so the stacked (θ̂₀, …, θ̂_{K−1}) still has ℓ2
    sensitivity ≤ 2G/(mλ). h is the centred outcome as computed (``effective_half_range``: the
    rounding of the centre is included). Each arm's computed solution is within the public
    E = ``ridge_error`` of its exact minimiser (no data-dependent check: issue #13), adding
    2√K·E (the stacked distance to the exact minimisers is ≤ √K·E on each of D and D′).
    Guarantee: (ε, δ)-DP for (θ₀, …) by the analytic Gaussian mechanism; μ̂ is post-processing.
    """

    features: BoxFeatures
    l2: float
    y_bounds: tuple[float, float]
    epsilon: float
    delta: float
    m: int
    stage: str = "cate.nuisance.outcome"
    arms: int = 2
    """K: one ridge per arm a = 0 … K − 1 (the rows' arm codes)."""

    @property
    def center(self) -> float:
        """c = (y_lo + y_hi)/2."""
        return 0.5 * (self.y_bounds[0] + self.y_bounds[1])

    @property
    def half_range(self) -> float:
        """h ≥ |clip(y) − c| as computed (the rounding of c included)."""
        return effective_half_range(*self.y_bounds)

    @property
    def solve_error(self) -> float:
        """E: the public bound on each arm's ‖θ̂_a − θ*_a‖ (rounding of the sums and the solve)."""
        return ridge_error(self.features.dim, 1.0, self.half_range, self.l2)

    def problem(self) -> str | None:
        """Why the solve's accuracy cannot be guaranteed at these public settings, or None."""
        return ridge_problem(self.features.dim, 1.0, self.l2)

    @property
    def sensitivity(self) -> float:
        """Δ₂ = 2G/(mλ) + 2√K·E with G = h(1 + 1/√λ)."""
        g = self.half_range * (1.0 + 1.0 / math.sqrt(self.l2))
        return 2.0 * g / (self.m * self.l2) + 2.0 * math.sqrt(self.arms) * self.solve_error

    def mechanism(self) -> GaussianMechanism:
        """The output perturbation of the stacked (θ̂₀, θ̂₁, …)."""
        return GaussianMechanism(self.epsilon, self.delta, self.sensitivity, stage=self.stage)

    def fit_nonprivate(self, x: FloatArray, a: FloatArray, y: FloatArray) -> FloatArray:
        """(θ̂₀, θ̂₁, …) as a (K, dim) array (not a release); ``a`` holds arm codes 0 … K − 1."""
        if x.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows, got {x.shape[0]}")
        return fit_ridge_arms(self.features.transform(x), a, self.residuals(y), self.l2,
                              self.arms)

    def model(self, theta: FloatArray) -> OutcomeModel:
        """Wrap a (K, dim) θ as a predictor."""
        return OutcomeModel(self.features, theta.reshape(self.arms, -1), self.center,
                            self.y_bounds)

    def fit(self, x: FloatArray, a: FloatArray, y: FloatArray, *,
            noise: NoiseGuard) -> OutcomeModel:
        """Fit and release DP outcome models for every arm."""
        return self.release(self.fit_nonprivate(x, a, y), noise=noise)

    def residuals(self, y: FloatArray) -> FloatArray:
        """r = clip(y, y_lo, y_hi) − c, the centred outcome the ridge fits."""
        return np.clip(y, *self.y_bounds) - self.center

    def release(self, theta_hat: FloatArray, *, noise: NoiseGuard) -> OutcomeModel:
        """Perturb the solved (θ̂₀, θ̂₁, …) once: the DP outcome models."""
        noised = noise.release(self.mechanism(), theta_hat.ravel())
        return self.model(noised)
