"""Certified ridge regression per arm on the centred outcome, with a replace-one stability bound."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.learners.rounding import (
    block_total,
    effective_half_range,
    ridge_error,
    ridge_problem,
    solve_spd,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RidgeFit:
    """Fitted arm models θ_a (one row per arm) and the public constants of their predictions."""

    theta: FloatArray
    center: float
    mu_bounds: tuple[float, float]

    def predict(self, xt: FloatArray, arm: int) -> FloatArray:
        """μ̂_a(x) = clip_[μ_lo, μ_hi](c + θ_aᵀx̃) for mapped rows ``xt``."""
        return np.clip(self.center + xt @ self.theta[arm], *self.mu_bounds)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (a public model file, for fits on public data only)."""
        return {"center": self.center, "mu_bounds": list(self.mu_bounds),
                "theta": [[float(t) for t in row] for row in self.theta]}


@dataclass(frozen=True)
class CertifiedRidge:
    """Per-arm ridge on the centred outcome, penalised intercept, averaged over all m records.

    For arm a: θ̂_a = argmin (1/m) Σ_i 1{A_i = a} ½(θᵀx̃_i − (Y_i − c))² + (λ/2)‖θ‖², with Y clipped
    to the public [y_lo, y_hi], c = (y_lo + y_hi)/2, h = (y_hi − y_lo)/2, and every ‖x̃_i‖ ≤ R_x.
    Prediction μ̂_a(x) = clip_[μ_lo, μ_hi](c + θ̂_aᵀx̃). Solved in closed form (a Cholesky solve of
    (X̃ᵀW_aX̃/m + λI)θ = X̃ᵀW_a r/m) whose float64 error is bounded a priori by the public
    E = ``solve_error`` (:func:`~dpcausal.learners.rounding.ridge_error`): nothing is checked on
    the data, so nothing can refuse after the rows are read (issue #13).

    Notes
    -----
    Neighbouring relation: replace one of the m training records (m public).
    Stability (spec select_policy §2.7–2.8, Prop. 2 localised): comparing F_a at 0 gives
    (λ/2)‖θ̂‖² ≤ h²/2, so ‖θ̂‖ ≤ h/√λ; on that ball the per-record gradient
    (θᵀx̃ − r)x̃ has norm ≤ G = R_x h (1 + R_x/√λ). λ-strong convexity of the whole θ (intercept
    included) gives ‖θ̂_S − θ̂_S′‖ ≤ 2G/(mλ), h being the centred outcome as computed
    (``effective_half_range``); each computed solution is within E of its exact minimiser.
    Predictions are R_x-Lipschitz in θ (L_g = R_x) and clipping is 1-Lipschitz, so
    sup_x |μ̂_S,a(x) − μ̂_S′,a(x)| ≤ β_μ = L_g (2G/(mλ) + 2E) for every arm. ``tol`` (the spec's
    ``solver_tol``) concerns the iterative logistic learner; this direct solve has no tolerance.
    """

    lam: float
    y_bounds: tuple[float, float]
    mu_bounds: tuple[float, float]
    tol: float = 1e-10

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"ridge lambda must be finite and > 0, got {self.lam!r}")
        if not (math.isfinite(self.tol) and self.tol > 0):
            raise ValueError(f"solver tolerance must be finite and > 0, got {self.tol!r}")

    @property
    def center(self) -> float:
        """c = (y_lo + y_hi)/2."""
        return 0.5 * (self.y_bounds[0] + self.y_bounds[1])

    @property
    def half_range(self) -> float:
        """h ≥ |clip(y) − c| as computed (the rounding of c included)."""
        return effective_half_range(*self.y_bounds)

    def solve_error(self, d: int) -> float:
        """E: the public bound on ‖θ̂_a − θ*_a‖ of each arm's computed solution (any m)."""
        return ridge_error(d + 1, math.sqrt(d + 1), self.half_range, self.lam)

    def problem(self, d: int) -> str | None:
        """Why the solve's accuracy cannot be guaranteed at these public settings, or None."""
        return ridge_problem(d + 1, math.sqrt(d + 1), self.lam)

    def constants(self, d: int) -> dict[str, float]:
        """R_x, the norm-ball radius, G and L_g for d covariates (plus the intercept)."""
        rx = math.sqrt(d + 1)
        h = self.half_range
        return {"R_x": rx, "theta_norm_bound": h / math.sqrt(self.lam),
                "G": rx * h * (1.0 + rx / math.sqrt(self.lam)), "L_g": rx}

    def beta(self, m: int, d: int) -> float:
        """β_μ = L_g (2G/(mλ) + 2E): the public replace-one sup-norm prediction bound."""
        if m < 1:
            raise ValueError("m must be >= 1")
        c = self.constants(d)
        return c["L_g"] * (2.0 * c["G"] / (m * self.lam) + 2.0 * self.solve_error(d))

    def arm_sums(self, xt: FloatArray, a: npt.NDArray[np.int8], y: FloatArray,
                 arms: int = 2) -> tuple[FloatArray, FloatArray]:
        """Per-arm sufficient statistics (Σ_{A_i=a} x̃_i x̃_iᵀ, Σ_{A_i=a} r_i x̃_i), r = clip(Y) − c,
        summed in blocks added exactly rounded (:func:`~dpcausal.learners.rounding.block_total`:
        the accuracy ``solve_error`` assumes). Summable over disjoint row blocks (an engine's
        partitions, added by ``exact_total``)."""
        r = np.clip(y, *self.y_bounds) - self.center
        p = xt.shape[1]

        def block(rows: slice) -> tuple[FloatArray, FloatArray]:
            grams, rhs = np.zeros((arms, p, p)), np.zeros((arms, p))
            xb, ab, rb = xt[rows], a[rows], r[rows]
            for arm in range(arms):
                sel = ab == arm
                xa = xb[sel]
                grams[arm] = xa.T @ xa
                rhs[arm] = xa.T @ rb[sel]
            return grams, rhs

        return block_total(block, xt.shape[0])

    def fit(self, xt: FloatArray, a: npt.NDArray[np.int8], y: FloatArray,
            arms: int = 2) -> RidgeFit:
        """Fit every arm on mapped rows ``xt`` (m × (d+1)), arm indices ``a`` and outcomes ``y``."""
        return self.solve(*self.arm_sums(xt, a, y, arms), m=xt.shape[0])

    def solve(self, grams: FloatArray, rhs_sums: FloatArray, *, m: int) -> RidgeFit:
        """Solve every arm from its sufficient statistics (the loss is averaged over all m rows):
        one Cholesky solve each, within the public ``solve_error`` of the exact minimiser."""
        arms, p = rhs_sums.shape
        thetas = np.zeros((arms, p))
        eye = np.eye(p)
        for arm in range(arms):
            thetas[arm] = solve_spd(grams[arm] / m + self.lam * eye, rhs_sums[arm] / m)
        return RidgeFit(thetas, self.center, self.mu_bounds)
