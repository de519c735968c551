"""DP ℓ2-regularised logistic regression by output perturbation (Gaussian mechanism)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import expit, log_expit

from dpcausal.errors import SolverError
from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.mechanisms import GaussianMechanism

FloatArray = npt.NDArray[np.float64]
GRAD_TOL = 1e-10
"""Newton stops at ‖∇F‖ ≤ τ; the solution is then within τ/λ of the exact minimiser."""


@dataclass(frozen=True)
class PropensityModel:
    """π̂(x) = clip(σ(θᵀx̃), κ, 1 − κ): a released (noised) or reference model."""

    features: BoxFeatures
    theta: FloatArray
    clip: float

    def predict(self, x: npt.ArrayLike) -> FloatArray:
        """π̂ at the rows of ``x`` (raw covariates), clipped to [κ, 1 − κ] (post-processing)."""
        p = expit(self.features.transform(x) @ self.theta)
        return np.clip(p, self.clip, 1.0 - self.clip)


def fit_logistic(xt: FloatArray, a: FloatArray, l2: float, *, grad_tol: float = GRAD_TOL
                 ) -> FloatArray:
    """θ̂ = argmin (1/m) Σ [log(1 + e^{θᵀx̃}) − A θᵀx̃] + (l2/2)‖θ‖² by damped Newton.

    Raises
    ------
    SolverError
        When ‖∇F‖ ≤ ``grad_tol`` is not reached (the sensitivity assumes it).
    """
    m, d = xt.shape
    theta = np.zeros(d)

    def obj(t: FloatArray) -> float:
        z = xt @ t
        loss = -np.where(a > 0.5, log_expit(z), log_expit(-z))
        return float(loss.mean()) + 0.5 * l2 * float(t @ t)

    val = obj(theta)
    for _ in range(200):
        p = expit(xt @ theta)
        grad = xt.T @ (p - a) / m + l2 * theta
        if float(np.linalg.norm(grad)) <= grad_tol:
            return theta
        hess = (xt * (p * (1 - p))[:, None]).T @ xt / m + l2 * np.eye(d)
        step = np.linalg.solve(hess, grad)
        t = 1.0
        slack = 1e-14 * max(1.0, abs(val))  # objective differences below float precision
        while True:
            cand = theta - t * step
            cval = obj(cand)
            if cval <= val - 1e-4 * t * float(grad @ step) + slack or t < 1e-10:
                break
            t *= 0.5
        theta, val = cand, cval
    p = expit(xt @ theta)
    gnorm = float(np.linalg.norm(xt.T @ (p - a) / m + l2 * theta))
    if gnorm <= grad_tol:
        return theta
    raise SolverError(f"the DP logistic propensity solve stopped at gradient norm {gnorm:.3g} > "
                      f"{grad_tol:.3g}; raise cate.nuisance.propensity_l2")


@dataclass(frozen=True)
class DPLogistic:
    """The DP propensity learner: ℓ2-logistic regression + Gaussian output perturbation.

    Notes
    -----
    Neighbouring relation: replace one of the m training records (m public).
    Sensitivity: F(θ) = (1/m)Σ ℓ(θ; x̃_i, A_i) + (λ/2)‖θ‖² is λ-strongly convex and each record's
    gradient (σ(θᵀx̃) − A)x̃ has norm ≤ ‖x̃‖ ≤ 1 (box features), so replacing one record moves the
    exact minimiser by ≤ 2/(mλ) (Chaudhuri, Monteleoni & Sarwate 2011, Cor. 8). The solver stops at
    ‖∇F‖ ≤ τ, within τ/λ of the exact minimiser, so Δ₂ = 2/(mλ) + 2τ/λ.
    Guarantee: (ε, δ)-DP for θ by the analytic Gaussian mechanism; π̂ (any query, any clipping) is
    post-processing of θ.
    """

    features: BoxFeatures
    l2: float
    epsilon: float
    delta: float
    m: int
    stage: str = "cate.nuisance.propensity"

    @property
    def sensitivity(self) -> float:
        """Δ₂(θ̂) = 2/(mλ) + 2τ/λ."""
        return 2.0 / (self.m * self.l2) + 2.0 * GRAD_TOL / self.l2

    def mechanism(self) -> GaussianMechanism:
        """The output perturbation of θ̂."""
        return GaussianMechanism(self.epsilon, self.delta, self.sensitivity, stage=self.stage)

    def fit_nonprivate(self, x: FloatArray, a: FloatArray) -> FloatArray:
        """θ̂ (not a release)."""
        if x.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows, got {x.shape[0]}")
        return fit_logistic(self.features.transform(x), a, self.l2)

    def fit(self, x: FloatArray, a: FloatArray, *, clip: float,
            noise_rng: np.random.Generator) -> PropensityModel:
        """Fit and release a DP propensity model (clipped to [κ, 1 − κ] when predicting)."""
        theta = self.mechanism().release(self.fit_nonprivate(x, a), rng=noise_rng)
        return PropensityModel(self.features, theta, clip)
