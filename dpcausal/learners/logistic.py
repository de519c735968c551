"""Certified ℓ2-penalised logistic regression (penalised intercept), replace-one stability bound."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.learners.rounding import LogisticAccuracy, block_total, damped_newton

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class LogisticFit:
    """A fitted propensity model and its public projection floor ζ."""

    theta: FloatArray
    zeta: float

    def predict(self, xt: FloatArray) -> FloatArray:
        """ê(x) = clip_[ζ, 1−ζ](σ(θᵀx̃)): P(A = treated | x)."""
        from scipy import special

        return np.clip(special.expit(xt @ self.theta), self.zeta, 1.0 - self.zeta)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (a public model file, for fits on public data only)."""
        return {"theta": [float(t) for t in self.theta], "zeta": self.zeta}


LogisticSums = Callable[[FloatArray], tuple[float, FloatArray, FloatArray]]
"""θ ↦ (Σ_i loss_i, Σ_i (σ(θᵀx̃_i) − A_i) x̃_i, Σ_i σ′ x̃_i x̃_iᵀ) over the m training rows."""


def logistic_sums(xt: FloatArray, a: FloatArray, theta: FloatArray
                  ) -> tuple[float, FloatArray, FloatArray]:
    """The loss, gradient and Hessian sums of the logistic loss over the rows ``xt`` (unpenalised).

    The loss log(1 + e^z) − a z is written stably as −log σ(±z). Summed in blocks added exactly
    rounded (``block_total``: the gradient accuracy the certificate assumes). Summable over
    disjoint row blocks (an engine's partitions, added by ``exact_total``), so in-memory and
    engine fits solve the same problem."""
    from scipy import special


    def block(rows: slice) -> tuple[float, FloatArray, FloatArray]:
        xb, ab = xt[rows], a[rows]
        z = xb @ theta
        loss = -np.where(ab > 0.5, special.log_expit(z), special.log_expit(-z))
        s = special.expit(z)
        return float(loss.sum()), xb.T @ (s - ab), (xb * (s * (1.0 - s))[:, None]).T @ xb

    return block_total(block, xt.shape[0])


@dataclass(frozen=True)
class CertifiedLogistic:
    """θ̂ = argmin (1/m) Σ_i [log(1 + e^{θᵀx̃_i}) − A_i θᵀx̃_i] + (λ/2)‖θ‖², intercept in θ.

    Deterministic damped Newton from θ = 0 with Armijo backtracking, stopped where the public
    certificate :class:`~dpcausal.learners.rounding.LogisticAccuracy` accepts (computed ‖∇F‖ ≤ τ,
    τ = max(``tol``, 4ε_g) with ε_g the public rounding allowance); should it not within
    ``max_iter`` steps, a damped Newton with a public step budget finishes the solve, so no
    refusal depends on the data (issue #13).

    Notes
    -----
    Neighbouring relation: replace one of the m training records (m public).
    Stability (spec select_policy §2.7–2.8): the per-record gradient (σ(θᵀx̃) − A)x̃ has norm ≤
    G = R_x for every θ; λ-strong convexity gives ‖θ̂_S − θ̂_S′‖ ≤ 2G/(mλ), plus D = (τ + ε_g)/λ
    per certified (inexact) solve. σ′ ≤ 1/4, so σ(θᵀx̃) is (R_x/4)-Lipschitz in θ (L_g = R_x/4),
    and the clip to [ζ, 1 − ζ] is 1-Lipschitz: sup_x |ê_S(x) − ê_S′(x)| ≤ β_e = L_g (2G/(mλ) + 2D).
    The same bound holds for e₀ = 1 − ê. At the largest allowed ``solver_tol`` (1e-3) the slack
    2D is a large share of β_e: leaving it out would understate β_e (spec §2.9).
    """

    lam: float
    zeta: float
    tol: float = 1e-10
    max_iter: int = 100

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"logistic lambda must be finite and > 0, got {self.lam!r}")
        if not 0.0 < self.zeta <= 0.5:
            raise ValueError(f"zeta must be in (0, 0.5], got {self.zeta!r}")
        if not (math.isfinite(self.tol) and self.tol > 0):
            raise ValueError(f"solver tolerance must be finite and > 0, got {self.tol!r}")

    def constants(self, d: int) -> dict[str, float]:
        """R_x, G and L_g for d covariates (plus the intercept)."""
        rx = math.sqrt(d + 1)
        return {"R_x": rx, "G": rx, "L_g": rx / 4.0}

    def accuracy(self, m: int, d: int) -> LogisticAccuracy:
        """The public certificate of a solve on m rows of d covariates (plus the intercept)."""
        return LogisticAccuracy(m, d + 1, math.sqrt(d + 1), self.lam, self.tol)

    def problem(self, m: int, d: int) -> str | None:
        """Why the solve cannot be guaranteed at these public settings, or None (plan time)."""
        return self.accuracy(m, d).problem()

    def beta(self, m: int, d: int) -> float:
        """β_e = L_g (2G/(mλ) + 2D): the public replace-one sup-norm prediction bound."""
        if m < 1:
            raise ValueError("m must be >= 1")
        c = self.constants(d)
        return c["L_g"] * (2.0 * c["G"] / (m * self.lam) + 2.0 * self.accuracy(m, d).distance)

    def fit(self, xt: FloatArray, treated: npt.NDArray[np.bool_]) -> LogisticFit:
        """Fit on mapped rows ``xt`` (m × (d+1)) and the treated indicator."""
        a = np.asarray(treated, dtype=np.float64)
        return self.solve(functools.partial(logistic_sums, xt, a), m=xt.shape[0], p=xt.shape[1])

    def solve(self, sums: LogisticSums, *, m: int, p: int) -> LogisticFit:
        """The damped Newton solve, given the loss/gradient/Hessian sums over the m rows.

        ``sums`` may be computed in memory (:meth:`fit`) or as a sum over an engine's partitions;
        the certificate uses the gradient at the returned θ, so the stability bound holds either
        way."""
        lam = self.lam
        acc = self.accuracy(m, p - 1)
        eye = np.eye(p)
        theta = np.zeros(p)
        loss, g, h = sums(theta)
        val = loss / m + 0.5 * lam * float(theta @ theta)
        for _ in range(self.max_iter):
            grad = g / m + lam * theta
            if acc.accepts(theta, grad):
                return LogisticFit(theta, self.zeta)
            step = np.linalg.solve(h / m + lam * eye, grad)
            if float(np.linalg.norm(grad)) < 1e-6:
                # quadratic-convergence region: a full Newton step; an Armijo test on F cannot
                # resolve decreases of order ‖∇F‖²/λ below float precision
                theta = theta - step
                loss, g, h = sums(theta)
                val = loss / m + 0.5 * lam * float(theta @ theta)
                continue
            t = 1.0
            slope = float(grad @ step)
            while True:
                cand = theta - t * step
                loss, g, h = sums(cand)
                cval = loss / m + 0.5 * lam * float(cand @ cand)
                if cval <= val - 1e-4 * t * slope or t < 1e-8:
                    break
                t *= 0.5
            theta, val = cand, cval
        if acc.accepts(theta, g / m + lam * theta):
            return LogisticFit(theta, self.zeta)

        def grad_hess(th: FloatArray) -> tuple[FloatArray, FloatArray]:
            _, gs, hs = sums(th)
            return gs, hs

        return LogisticFit(damped_newton(grad_hess, acc), self.zeta)
