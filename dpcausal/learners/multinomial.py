"""Certified ℓ2-penalised multinomial logistic regression (K ≥ 3 arms), with a replace-one
sup-norm stability bound on its projected propensities (spec select_policy §2.9)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.learners.rounding import (
    MAX_GUARANTEED_STEPS,
    SAFETY,
    SUM_TERMS,
    UNIT_ROUNDOFF,
    LogisticAccuracy,
    block_total,
    cholesky_completes,
    damped_newton,
    gamma,
)

FloatArray = npt.NDArray[np.float64]
_OMEGA_QUARTER = 0.25 - math.log(1.25)
"""ω(1/4) = 1/4 − ln(5/4), as in :mod:`dpcausal.learners.rounding`."""


@dataclass(frozen=True)
class MultinomialFit:
    """A fitted K-arm propensity model Θ (K × (d+1)) and its public floor ζ ≤ 1/K."""

    theta: FloatArray
    zeta: float

    def predict(self, xt: FloatArray) -> FloatArray:
        """ê(x) = C_ζ(special.softmax(Θx̃)) = (1 − Kζ)·special.softmax(Θx̃) + ζ: an n × K matrix of
        propensities, each in [ζ, 1 − (K − 1)ζ], rows summing to one."""
        from scipy import special

        k = self.theta.shape[0]
        return (1.0 - k * self.zeta) * special.softmax(xt @ self.theta.T, axis=1) + self.zeta


def multinomial_sums(xt: FloatArray, codes: npt.NDArray[np.intp], arms: int, theta: FloatArray
                     ) -> tuple[float, FloatArray, FloatArray]:
    """Loss, gradient and Hessian sums of the multinomial logistic loss over the rows ``xt``
    (unpenalised), at the flattened Θ (row-major: arm k's coefficients at k·p … k·p + p − 1).

    loss_i = log Σ_k e^{z_ik} − z_{i,A_i} with z_i = Θx̃_i; gradient (p_i − e_{A_i}) ⊗ x̃_i;
    Hessian (diag p_i − p_i p_iᵀ) ⊗ x̃_i x̃_iᵀ. Summed in blocks added exactly rounded
    (``block_total``), as the certificate's rounding allowance assumes."""
    from scipy import special

    p = xt.shape[1]
    th = theta.reshape(arms, p)

    def block(rows: slice) -> tuple[float, FloatArray, FloatArray]:
        xb, ab = xt[rows], codes[rows]
        z = xb @ th.T
        logp = special.log_softmax(z, axis=1)
        prob = np.exp(logp)
        loss = -float(np.take_along_axis(logp, ab[:, None], axis=1).sum())
        resid = prob.copy()
        resid[np.arange(len(ab)), ab] -= 1.0
        grad = (resid.T @ xb).reshape(-1)
        hess = np.zeros((arms * p, arms * p))
        for k in range(arms):
            for j in range(k, arms):
                w = prob[:, k] * ((1.0 if j == k else 0.0) - prob[:, j])
                blk = (xb * w[:, None]).T @ xb
                hess[k * p:(k + 1) * p, j * p:(j + 1) * p] = blk
                if j != k:
                    hess[j * p:(j + 1) * p, k * p:(k + 1) * p] = blk.T
        return loss, grad, hess

    return block_total(block, xt.shape[0])


@dataclass(frozen=True)
class MultinomialAccuracy(LogisticAccuracy):
    """The public certificate of a multinomial solve F(Θ) = (1/m)Σℓ(Θx̃_i; A_i) + (λ/2)‖Θ‖²_F,
    ``p`` = K·(d + 1) parameters, ``arms`` = K.

    Notes
    -----
    As :class:`~dpcausal.learners.rounding.LogisticAccuracy`, with these K-arm constants.
    Ball: F(Θ*) ≤ F(0) = ln K, so ‖Θ*‖_F ≤ √(2 ln K/λ) and T = √(2 ln K/λ) + tol/λ + 1.
    Rounding allowance ε_g ≥ ‖ĝ − ∇F(Θ̃)‖_F for ‖Θ̃‖_F ≤ T: each z_k = θ_kᵀx̃ errs by
    ≤ γ_q‖θ_k‖R (q = d + 1), the shift by max_k z_k adds ≤ u·2RT, so the softmax argument errs by
    a ≤ 2(γ_q + u)RT per coordinate, which moves each p_k by a factor in [e^{−2a}, e^{2a}]; exp,
    the sum of K terms and the division err by ≤ γ_{K+3} relatively: σ = ‖p̂ − p‖₁ ≤ e^{2a} − 1 +
    γ_{K+3}e^{2a}. A row's gradient (p̂ − e_A)x̃ᵀ then errs by ≤ σR (plus 2u(√2 + σ)R for its
    products), the sum over the m rows by γ_k·(√2 + σ)R (k = SUM_TERMS), the division by m and
    the ridge term by 3u((√2 + σ)R + λT); ×SAFETY.
    Termination: along any direction V, h = Vx̃ has ‖h‖_∞ ≤ R‖V‖_F, and the third derivative of
    log-sum-exp is E_p[(h − E_p h)³] ≤ 2‖h‖_∞·Var_p(h), the second derivative being Var_p(h);
    with ‖V‖_F ≤ F″[V,V]^{1/2}/√λ, F is self-concordant with M = 2R/√λ. So the damped Newton
    steps θ − H⁻¹g/(1 + (M/2)‖g‖_{H⁻¹}) from 0 number at most ⌈(M²/4)·ln K/ω(1/4)⌉ + 10
    (Nesterov, Lectures on Convex Optimization, §5.1), and every Hessian H/m + λI has
    ‖·‖₂ ≤ R²/2 + λ (softmax's Jacobian has norm ≤ 1/2) and λ_min ≥ λ, which the plan checks
    Cholesky can factor.
    """

    arms: int = 3

    @property
    def features(self) -> int:
        """q = d + 1, the parameters of one arm."""
        return self.p // self.arms

    @property
    def theta_bound(self) -> float:
        """T ≥ ‖Θ̃‖_F at an accepted point."""
        return math.sqrt(2.0 * math.log(self.arms) / self.lam) + self.tol / self.lam + 1.0

    @property
    def grad_allowance(self) -> float:
        """ε_g ≥ ‖ĝ − ∇F(Θ̃)‖_F for every Θ̃ with ‖Θ̃‖_F ≤ T."""
        u, r, t = UNIT_ROUNDOFF, self.radius, self.theta_bound
        a = 2.0 * (gamma(self.features) + u) * r * t
        grow = math.expm1(2.0 * a)
        sigma = grow + gamma(self.arms + 3) * (1.0 + grow)
        row = math.sqrt(2.0) + sigma
        per = (r * sigma + 2.0 * u * row * r + gamma(SUM_TERMS + 4) * row * r
               + 3.0 * u * (row * r + self.lam * t))
        return SAFETY * per

    @property
    def decrement_scale(self) -> float:
        """M/2 = R/√λ (self-concordance constant M = 2R/√λ)."""
        return self.radius / math.sqrt(self.lam)

    @property
    def max_steps(self) -> int:
        """The damped Newton solve's public step budget."""
        return math.ceil(self.decrement_scale**2 * math.log(self.arms) / _OMEGA_QUARTER) + 10

    def problem(self) -> str | None:
        """Why a guaranteed solve is impossible at these public settings, or None (plan time)."""
        r2 = self.radius**2
        if (5.0 * self.grad_allowance > self.lam or self.max_steps > MAX_GUARANTEED_STEPS
                or not cholesky_completes(self.p, 0.5 * r2 + 2.0 * self.lam, 0.5 * self.lam)):
            need = r2 * math.log(self.arms) / (_OMEGA_QUARTER * MAX_GUARANTEED_STEPS)
            return (f"the multinomial logistic penalty {self.lam:g} is too small for a solve "
                    f"that is guaranteed to finish with {self.p} parameters (λ ≥ {need:.2g} is "
                    "needed)")
        return None


@dataclass(frozen=True)
class CertifiedMultinomial:
    """Θ̂ = argmin (1/m) Σ_i [log Σ_k e^{θ_kᵀx̃_i} − θ_{A_i}ᵀx̃_i] + (λ/2)‖Θ‖²_F over
    Θ ∈ ℝ^{K×(d+1)}, every entry (intercepts included) penalised; propensities projected into
    Δ_K^ζ by C_ζ(p) = (1 − Kζ)p + ζ1 (:class:`MultinomialFit`).

    Solved by Nesterov's damped Newton from Θ = 0 until the public certificate
    :class:`MultinomialAccuracy` accepts, within a step budget known before the data is read
    (no refusal can depend on the data).

    Notes
    -----
    Neighbouring relation: replace one of the m training records (m public), any arm to any arm.
    Stability (spec select_policy §2.9, Prop. 2): the per-record gradient (p − e_A)x̃ᵀ has
    Frobenius norm ‖p − e_A‖₂‖x̃‖₂ ≤ √2·R_x (‖p − e_a‖²₂ = (1 − p_a)² + Σ_{b≠a} p_b² ≤
    2(1 − p_a)² ≤ 2), so G = √2·R_x for every Θ; λ-strong convexity (Frobenius) gives
    ‖Θ̂_S − Θ̂_S′‖_F ≤ 2G/(mλ), plus D = (τ + ε_g)/λ per certified (inexact) solve. At any x,
    ‖(Θ − Θ′)x̃‖₂ ≤ ‖Θ − Θ′‖_F R_x, softmax is ½-Lipschitz ℓ2 → ℓ2 (its Jacobian diag p − ppᵀ has
    vᵀJv = Var_p(v) ≤ ½ for ‖v‖₂ = 1) and ‖·‖_∞ ≤ ‖·‖₂, so L_g = R_x/2 (ℓ2 → ℓ∞); C_ζ is
    (1 − Kζ)-Lipschitz in ℓ∞. Hence for every arm a,
    sup_x |ê_S,a(x) − ê_S′,a(x)| ≤ β_e = (1 − Kζ)·L_g·(2G/(mλ) + 2D)
    = √2(1 − Kζ)R_x²/(mλ) + (1 − Kζ)R_x·D.
    """

    lam: float
    zeta: float
    arms: int
    tol: float = 1e-10

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"multinomial lambda must be finite and > 0, got {self.lam!r}")
        if self.arms < 3:
            raise ValueError(f"the multinomial learner is for K >= 3 arms, got {self.arms}")
        if not 0.0 < self.zeta <= 1.0 / self.arms:
            raise ValueError(f"zeta must be in (0, 1/K], got {self.zeta!r}")
        if not (math.isfinite(self.tol) and self.tol > 0):
            raise ValueError(f"solver tolerance must be finite and > 0, got {self.tol!r}")

    def constants(self, d: int) -> dict[str, float]:
        """R_x, G, L_g and the projection's ℓ∞ Lipschitz constant, for d covariates."""
        rx = math.sqrt(d + 1)
        return {"R_x": rx, "G": math.sqrt(2.0) * rx, "L_g": rx / 2.0,
                "projection_lipschitz": 1.0 - self.arms * self.zeta}

    def accuracy(self, m: int, d: int) -> MultinomialAccuracy:
        """The public certificate of a solve on m rows of d covariates."""
        return MultinomialAccuracy(m, self.arms * (d + 1), math.sqrt(d + 1), self.lam, self.tol,
                                   arms=self.arms)

    def problem(self, m: int, d: int) -> str | None:
        """Why the solve cannot be guaranteed at these public settings, or None (plan time)."""
        return self.accuracy(m, d).problem()

    def beta(self, m: int, d: int) -> float:
        """β_e = (1 − Kζ)·L_g·(2G/(mλ) + 2D): the replace-one sup-norm bound of every arm's
        projected propensity."""
        if m < 1:
            raise ValueError("m must be >= 1")
        c = self.constants(d)
        return c["projection_lipschitz"] * c["L_g"] * (
            2.0 * c["G"] / (m * self.lam) + 2.0 * self.accuracy(m, d).distance)

    def fit(self, xt: FloatArray, codes: npt.NDArray[np.intp]) -> MultinomialFit:
        """Fit on mapped rows ``xt`` (m × (d+1)) and arm indices ``codes`` in 0 … K − 1."""
        sums = functools.partial(multinomial_sums, xt, np.asarray(codes, dtype=np.intp),
                                 self.arms)
        return self.solve(sums, m=xt.shape[0], p=xt.shape[1])

    def solve(self, sums: Any, *, m: int, p: int) -> MultinomialFit:
        """The certified damped Newton solve, given θ ↦ (loss, gradient, Hessian) sums over the m
        rows (``p`` = d + 1 features per arm)."""
        acc = self.accuracy(m, p - 1)

        def grad_hess(th: FloatArray) -> tuple[FloatArray, FloatArray]:
            _, g, h = sums(th)
            return g, h

        theta = damped_newton(grad_hess, acc)
        return MultinomialFit(theta.reshape(self.arms, p), self.zeta)
