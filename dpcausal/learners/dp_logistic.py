"""DP ℓ2-regularised logistic regression by output perturbation (Gaussian mechanism)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.rounding import LogisticAccuracy, block_total, damped_newton
from dpcausal.mechanisms import GaussianMechanism, NoiseGuard

FloatArray = npt.NDArray[np.float64]
GRAD_TOL = 1e-10
"""The requested stopping tolerance on ‖∇F‖, raised to 4× the public rounding allowance when it is
below it (:class:`~dpcausal.learners.rounding.LogisticAccuracy`)."""
MAX_ITER = 200
"""Armijo Newton steps before the damped Newton fallback (whose budget is public)."""


@dataclass(frozen=True)
class PropensityModel:
    """π̂(x) = clip(σ(θᵀx̃), κ, 1 − κ): a released (noised) or reference model."""

    features: BoxFeatures
    theta: FloatArray
    clip: float

    def predict(self, x: npt.ArrayLike) -> FloatArray:
        """π̂ at the rows of ``x`` (raw covariates), clipped to [κ, 1 − κ] (post-processing)."""
        from scipy import special

        p = special.expit(self.features.transform(x) @ self.theta)
        return np.clip(p, self.clip, 1.0 - self.clip)


LINE_STEPS = 0.5 ** np.arange(35)
"""The backtracking step lengths 1, ½, …, 2⁻³⁴ (the first below 1e-10, where the search stops)."""

GradHess = Callable[[FloatArray], tuple[FloatArray, FloatArray]]
"""θ ↦ (Σ (σ(θᵀx̃_i) − A_i) x̃_i, Σ σ(1 − σ) x̃_i x̃_iᵀ): the data sums of the gradient and Hessian."""
LineSearch = Callable[[FloatArray, FloatArray, float, float], tuple[FloatArray, float]]
"""(θ, step, F(θ), ∇F·step) ↦ (θ − t·step, F(θ − t·step)) for the first accepted t of LINE_STEPS."""


def armijo_accepts(cval: float, val: float, t: float, slope: float) -> bool:
    """The line-search rule: sufficient decrease (up to float precision), or the last step."""
    slack = 1e-14 * max(1.0, abs(val))  # objective differences below float precision
    return cval <= val - 1e-4 * t * slope + slack or t < 1e-10


def grad_hess_sums(xt: FloatArray, a: FloatArray, theta: FloatArray
                   ) -> tuple[FloatArray, FloatArray]:
    """(Σ (σ(θᵀx̃_i) − A_i) x̃_i, Σ σ(1 − σ) x̃_i x̃_iᵀ) over the rows of one block."""
    from scipy import special

    p = special.expit(xt @ theta)
    return xt.T @ (p - a), (xt * (p * (1 - p))[:, None]).T @ xt


def accuracy(m: int, d: int, l2: float) -> LogisticAccuracy:
    """The public certificate of the DP logistic solve on m rows of box features (‖x̃‖ ≤ 1)."""
    return LogisticAccuracy(m, d, 1.0, l2, GRAD_TOL)


def newton_logistic(grad_hess: GradHess, line_search: LineSearch, *, d: int, m: int, l2: float,
                    val: float) -> FloatArray:
    """Damped (Armijo) Newton from θ = 0 until the public certificate ``accuracy(m, d, l2)``
    accepts, with the data sums supplied by callbacks (in memory, or over an engine's passes): the
    same iterates and the same certificate. If it has not accepted after ``MAX_ITER`` steps, the
    damped Newton fallback with a public step budget (:func:`~dpcausal.learners.rounding.
    damped_newton`) finishes the solve: no refusal depends on the data.
    """
    acc = accuracy(m, d, l2)
    theta = np.zeros(d)
    for _ in range(MAX_ITER):
        g_sum, h_sum = grad_hess(theta)
        grad = g_sum / m + l2 * theta
        if acc.accepts(theta, grad):
            return theta
        hess = h_sum / m + l2 * np.eye(d)
        step = np.asarray(np.linalg.solve(hess, grad), dtype=np.float64)
        theta, val = line_search(theta, step, val, float(grad @ step))
    g_sum, _ = grad_hess(theta)
    if acc.accepts(theta, g_sum / m + l2 * theta):
        return theta
    return damped_newton(grad_hess, acc)


def fit_logistic(xt: FloatArray, a: FloatArray, l2: float) -> FloatArray:
    """θ̂ = argmin (1/m) Σ [log(1 + e^{θᵀx̃}) − A θᵀx̃] + (l2/2)‖θ‖² by damped Newton, to the
    public certificate of :func:`accuracy`."""
    from scipy import special

    m, d = xt.shape

    def obj(t: FloatArray) -> float:
        z = xt @ t
        loss = -np.where(a > 0.5, special.log_expit(z), special.log_expit(-z))
        return float(loss.mean()) + 0.5 * l2 * float(t @ t)

    def grad_hess(theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        return block_total(lambda rows: grad_hess_sums(xt[rows], a[rows], theta), m)

    def line_search(theta: FloatArray, step: FloatArray, val: float, slope: float
                    ) -> tuple[FloatArray, float]:
        for t in LINE_STEPS:
            cand = theta - t * step
            cval = obj(cand)
            if armijo_accepts(cval, val, float(t), slope):
                break
        return cand, cval

    return newton_logistic(grad_hess, line_search, d=d, m=m, l2=l2, val=obj(np.zeros(d)))


@dataclass(frozen=True)
class DPLogistic:
    """The DP propensity learner: ℓ2-logistic regression + Gaussian output perturbation.

    Notes
    -----
    Neighbouring relation: replace one of the m training records (m public).
    Sensitivity: F(θ) = (1/m)Σ ℓ(θ; x̃_i, A_i) + (λ/2)‖θ‖² is λ-strongly convex and each record's
    gradient (σ(θᵀx̃) − A)x̃ has norm ≤ ‖x̃‖ ≤ 1 (box features), so replacing one record moves the
    exact minimiser by ≤ 2/(mλ) (Chaudhuri, Monteleoni & Sarwate 2011, Cor. 8). The solver stops
    where the public certificate accepts (:class:`~dpcausal.learners.rounding.LogisticAccuracy`:
    computed ‖∇F‖ ≤ τ, τ ≥ 4× the rounding allowance ε_g), within D = (τ + ε_g)/λ of the exact
    minimiser, so Δ₂ = 2/(mλ) + 2D. No data-dependent refusal: a fallback with a public step
    budget finishes any solve the fast Newton does not.
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
    def accuracy(self) -> LogisticAccuracy:
        """The public certificate of the solve."""
        return accuracy(self.m, self.features.dim, self.l2)

    def problem(self) -> str | None:
        """Why the solve cannot be guaranteed at these public settings, or None (plan time)."""
        return self.accuracy.problem()

    @property
    def sensitivity(self) -> float:
        """Δ₂(θ̂) = 2/(mλ) + 2D, D = (τ + ε_g)/λ the certified distance to the exact minimiser."""
        return 2.0 / (self.m * self.l2) + 2.0 * self.accuracy.distance

    def mechanism(self) -> GaussianMechanism:
        """The output perturbation of θ̂."""
        return GaussianMechanism(self.epsilon, self.delta, self.sensitivity, stage=self.stage)

    def fit_nonprivate(self, x: FloatArray, a: FloatArray) -> FloatArray:
        """θ̂ (not a release)."""
        if x.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows, got {x.shape[0]}")
        return fit_logistic(self.features.transform(x), a, self.l2)

    def fit(self, x: FloatArray, a: FloatArray, *, clip: float,
            noise: NoiseGuard) -> PropensityModel:
        """Fit and release a DP propensity model (clipped to [κ, 1 − κ] when predicting)."""
        return self.release(self.fit_nonprivate(x, a), clip=clip, noise=noise)

    def release(self, theta_hat: FloatArray, *, clip: float,
                noise: NoiseGuard) -> PropensityModel:
        """Perturb a certified θ̂ (accepted by ``accuracy`` on the m records) once: the DP model."""
        theta = noise.release(self.mechanism(), theta_hat)
        return PropensityModel(self.features, theta, clip)
