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


def gradient(theta: FloatArray, v: FloatArray, y: FloatArray, w: FloatArray, gamma: float,
             loss: HuberHinge) -> FloatArray:
    """∇G(θ) alone (cheaper than :func:`objective`)."""
    return v.T @ (w * loss.derivative(y * (v @ theta)) * y) + gamma * theta


def _exact_line_search(theta: FloatArray, step: FloatArray, args: tuple) -> float:  # type: ignore[type-arg]
    """argmin_t G(θ − t·step) on t ∈ [0, 1] for a descent direction ``step``.

    φ(t) = G(θ − t·step) is convex, so its derivative φ'(t) = −∇G(θ − t·step)·step is increasing
    and the minimiser is its root. Working on φ' rather than on values of G avoids the cancellation
    that makes value-based (Armijo) tests fail near the optimum when G is a sum of many terms.
    """

    def dphi(t: float) -> float:
        return -float(gradient(theta - t * step, *args) @ step)

    hi_val = dphi(1.0)
    if hi_val <= 0.0:
        return 1.0
    lo, hi, lo_val = 0.0, 1.0, dphi(0.0)
    for _ in range(60):  # regula falsi with the Illinois modification; φ' is piecewise linear
        t = hi - hi_val * (hi - lo) / (hi_val - lo_val)
        if not lo < t < hi:
            t = 0.5 * (lo + hi)
        val = dphi(t)
        if val == 0.0:
            return t
        if val < 0.0:
            lo, lo_val = t, val
            hi_val *= 0.5
        else:
            hi, hi_val = t, val
            lo_val *= 0.5
        if hi - lo <= 1e-12:
            break
    return 0.5 * (lo + hi)


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
    """Minimise G to ‖∇G(θ)‖ ≤ ``grad_tol``: L-BFGS warm start, then Newton with exact line search.

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
    args = (v, y, w, gamma, loss)
    res = optimize.minimize(
        objective, np.zeros(d), args=args, jac=True, method="L-BFGS-B",
        options={"maxiter": 200, "gtol": grad_tol / np.sqrt(d), "ftol": 1e-15},
    )
    theta = np.asarray(res.x, dtype=np.float64)
    grad = gradient(theta, *args)
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
        t = _exact_line_search(theta, step, args)
        cand = theta - t * step
        cgrad = gradient(cand, *args)
        if float(np.linalg.norm(cgrad)) >= gnorm and t * float(np.linalg.norm(step)) <= 1e-15 * (
            1.0 + float(np.linalg.norm(theta))
        ):
            break  # no representable progress left
        theta, grad = cand, cgrad
        iterations += 1
    gnorm = float(np.linalg.norm(grad))
    if gnorm <= grad_tol:
        return ERMSolution(theta, gnorm, iterations)
    raise SolverError(
        f"the weighted ERM solve stopped at gradient norm {gnorm:.3g} > tolerance {grad_tol:.3g}, "
        "so its sensitivity bound would not hold; try a larger gamma, or report this as a bug"
    )
