"""DP ℓ2-penalised multinomial logistic regression (K ≥ 3 arms) by Gaussian output perturbation."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.multinomial import MultinomialAccuracy, multinomial_sums
from dpcausal.learners.rounding import damped_newton
from dpcausal.mechanisms import GaussianMechanism, NoiseGuard

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
GRAD_TOL = 1e-10
"""The requested stopping tolerance on ‖∇F‖_F (raised to 4× the public rounding allowance)."""


@dataclass(frozen=True)
class ArmPropensities:
    """π̂_a(x) = softmax(Θx̃)_a, each clipped to [κ, 1 − κ]: a released (noised) model."""

    features: BoxFeatures
    theta: FloatArray  # (K, dim)
    clip: float

    def predict(self, x: npt.ArrayLike) -> FloatArray:
        """The n × K matrix of clipped propensities at the rows of ``x`` (raw covariates);
        post-processing of Θ (a row need not sum to one after clipping)."""
        from scipy.special import softmax  # lazy (issue 24): a plan never predicts

        p = softmax(self.features.transform(x) @ self.theta.T, axis=1)
        return np.clip(p, self.clip, 1.0 - self.clip)


@dataclass(frozen=True)
class DPMultinomial:
    """The DP K-arm propensity learner: Θ̂ = argmin (1/m)Σ_i [log Σ_k e^{θ_kᵀx̃_i} − θ_{A_i}ᵀx̃_i]
    + (λ/2)‖Θ‖²_F on the box features x̃ (‖x̃‖ ≤ 1), then Θ̂ + N(0, σ²I).

    Notes
    -----
    Neighbouring relation: replace one of the m training records (m public), any arm to any arm.
    Sensitivity: F is λ-strongly convex in Θ (Frobenius) and a record's gradient (p − e_A)x̃ᵀ has
    Frobenius norm ‖p − e_A‖₂‖x̃‖₂ ≤ √2 (‖p − e_a‖²₂ = (1 − p_a)² + Σ_{b≠a} p_b² ≤ 2(1 − p_a)²), so
    replacing one record moves the exact minimiser by ‖Θ̂ − Θ̂′‖_F ≤ 2√2/(mλ) whatever K
    (Chaudhuri, Monteleoni & Sarwate 2011, Cor. 8, with the Frobenius norm). The solver stops
    where the public certificate accepts (:class:`~dpcausal.learners.multinomial.
    MultinomialAccuracy` with feature radius 1), within D = (τ + ε_g)/λ of the exact minimiser,
    so Δ₂ = 2√2/(mλ) + 2D. No data-dependent refusal: the damped Newton solve has a public step
    budget, and the plan refuses a λ too small for it (:meth:`problem`).
    Guarantee: (ε, δ)-DP for Θ by the analytic Gaussian mechanism; every π̂_a (any query, any
    clipping) is post-processing of Θ.
    """

    features: BoxFeatures
    l2: float
    epsilon: float
    delta: float
    m: int
    arms: int
    stage: str = "cate.nuisance.propensity"

    @property
    def accuracy(self) -> MultinomialAccuracy:
        """The public certificate of the solve (K·dim parameters, feature radius 1)."""
        return MultinomialAccuracy(self.m, self.arms * self.features.dim, 1.0, self.l2, GRAD_TOL,
                                   arms=self.arms)

    def problem(self) -> str | None:
        """Why the solve cannot be guaranteed at these public settings, or None (plan time)."""
        return self.accuracy.problem()

    @property
    def sensitivity(self) -> float:
        """Δ₂(Θ̂) = 2√2/(mλ) + 2D (Frobenius)."""
        return 2.0 * np.sqrt(2.0) / (self.m * self.l2) + 2.0 * self.accuracy.distance

    def mechanism(self) -> GaussianMechanism:
        """The output perturbation of the flattened Θ̂."""
        return GaussianMechanism(self.epsilon, self.delta, float(self.sensitivity),
                                 stage=self.stage)

    def fit_nonprivate(self, x: FloatArray, codes: IntArray) -> FloatArray:
        """Θ̂ as a (K, dim) array (not a release); ``codes`` are arm indices 0 … K − 1."""
        if x.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows, got {x.shape[0]}")
        xt = self.features.transform(x)
        sums = functools.partial(multinomial_sums, xt, np.asarray(codes, dtype=np.intp),
                                 self.arms)

        def grad_hess(th: FloatArray) -> tuple[FloatArray, FloatArray]:
            _, g, h = sums(th)
            return g, h

        return damped_newton(grad_hess, self.accuracy).reshape(self.arms, -1)

    def fit(self, x: FloatArray, codes: IntArray, *, clip: float,
            noise: NoiseGuard) -> ArmPropensities:
        """Fit and release a DP K-arm propensity model (clipped to [κ, 1 − κ] when predicting)."""
        theta = noise.release(self.mechanism(), self.fit_nonprivate(x, codes).ravel())
        return ArmPropensities(self.features, np.reshape(theta, (self.arms, -1)), clip)
