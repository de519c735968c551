"""Weighted margin-loss ERM with the ½‖θ‖² regulariser, solved to a stated gradient tolerance.

The objective, in sum form (same argmin as the paper's (1/n)Σ + (γ/n)R form),

    G(θ) = Σ_i w_i ℓ(y_i v_iᵀθ) + (γ/2)‖θ‖²,

is γ-strongly convex when every w_i ≥ 0 and ℓ is convex. Hence for any θ̃,
‖θ̃ − θ̂‖ ≤ ‖∇G(θ̃)‖/γ: a solve that stops at ‖∇G‖ ≤ τ is within τ/γ of the exact minimiser, and a
sensitivity derived for the exact minimiser holds for the returned point after adding 2τ/γ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize

from dpcausal.errors import SolverError

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class HuberHinge:
    """Huber-smoothed hinge (Chapelle 2007): convex, C¹, |ℓ'| ≤ 1, ℓ'' ≤ 1/(2h).

    ℓ(z) = 0 for z > 1+h; (1+h−z)²/(4h) for |1−z| ≤ h; 1−z for z < 1−h.
    """

    h: float = 0.5

    def __post_init__(self) -> None:
        if not (np.isfinite(self.h) and self.h > 0):
            raise ValueError(f"huber h must be > 0, got {self.h!r}")

    def value(self, z: FloatArray) -> FloatArray:
        """ℓ(z)."""
        h = self.h
        return np.where(z > 1 + h, 0.0, np.where(z < 1 - h, 1 - z, (1 + h - z) ** 2 / (4 * h)))

    def derivative(self, z: FloatArray) -> FloatArray:
        """ℓ'(z)."""
        h = self.h
        return np.where(z > 1 + h, 0.0, np.where(z < 1 - h, -1.0, -(1 + h - z) / (2 * h)))

    def curvature(self, z: FloatArray) -> FloatArray:
        """ℓ''(z) (a.e.)."""
        return np.where(np.abs(1 - z) <= self.h, 1 / (2 * self.h), 0.0)


@dataclass(frozen=True)
class ERMSolution:
    """The minimiser and how close to exact it is (public facts about the solver only)."""

    theta: FloatArray
    grad_norm: float
    iterations: int


def objective(theta: FloatArray, v: FloatArray, y: FloatArray, w: FloatArray, gamma: float,
              loss: HuberHinge) -> tuple[float, FloatArray]:
    """G(θ) and ∇G(θ)."""
    z = y * (v @ theta)
    val = float(w @ loss.value(z)) + 0.5 * gamma * float(theta @ theta)
    grad = v.T @ (w * loss.derivative(z) * y) + gamma * theta
    return val, grad


def solve_weighted_erm(
    v: FloatArray,
    y: FloatArray,
    w: FloatArray,
    *,
    gamma: float,
    loss: HuberHinge,
    grad_tol: float,
    max_newton: int = 100,
) -> ERMSolution:
    """Minimise G to ‖∇G(θ)‖ ≤ ``grad_tol``: L-BFGS warm start, then damped Newton polish.

    Raises
    ------
    SolverError
        When the tolerance is not reached (never returns an inexact solution silently).
    """
    if gamma <= 0:
        raise ValueError("gamma must be > 0")
    if np.any(w < 0):
        raise ValueError("weights must be >= 0 for the objective to be convex")
    d = v.shape[1]
    res = optimize.minimize(
        objective, np.zeros(d), args=(v, y, w, gamma, loss), jac=True, method="L-BFGS-B",
        options={"maxiter": 500, "gtol": 0.0, "ftol": 0.0},
    )
    theta = np.asarray(res.x, dtype=np.float64)
    val, grad = objective(theta, v, y, w, gamma, loss)
    iterations = int(res.nit)
    for _ in range(max_newton):
        gnorm = float(np.linalg.norm(grad))
        if gnorm <= grad_tol:
            return ERMSolution(theta, gnorm, iterations)
        z = y * (v @ theta)
        curv = w * loss.curvature(z)
        active = curv > 0
        va = v[active]
        hess = va.T @ (va * curv[active, None]) + gamma * np.eye(d)
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            cand = theta - t * step
            cval, cgrad = objective(cand, v, y, w, gamma, loss)
            if cval <= val - 1e-4 * t * float(grad @ step) or t < 1e-10:
                break
            t *= 0.5
        if cval > val and float(np.linalg.norm(cgrad)) >= gnorm:
            break  # no progress possible at float precision
        theta, val, grad = cand, cval, cgrad
        iterations += 1
    gnorm = float(np.linalg.norm(grad))
    if gnorm <= grad_tol:
        return ERMSolution(theta, gnorm, iterations)
    raise SolverError(
        f"the weighted ERM solve stopped at gradient norm {gnorm:.3g} > tolerance {grad_tol:.3g}, "
        "so its sensitivity bound would not hold; try a larger gamma, or report this as a bug"
    )
