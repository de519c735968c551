"""Large-n variant of the function release: random Fourier features from a PUBLIC seed (spec §3.6).

ζ(s) = m^{-1/2}(cos(Ωᵀs), sin(Ωᵀs)) ∈ ℝ^{2m}, Ω's columns ~ N(0, h⁻²I_q) drawn from ``rff_seed``
before any data is read, so ‖ζ(s)‖ = 1 exactly and k_m(s, s′) = ζ(s)ᵀζ(s′) → k0(s, s′) as m grows.
The second stage is the same weighted Huber ridge, now in the RKHS of k_m, i.e. over weights w:
J(w) = (1/n)Σ ρ_i ℓ_c(wᵀζ_i − φ_i) + λ0‖w‖². A GP with covariance k_m is U(x) = ζ(x)ᵀξ with
ξ ~ N(0, I_{2m}), so the private function is the weight vector w + σξ: releasable, evaluable anywhere.
Data-dependent centres (Nyström, k-means) would break the sensitivity argument (spec P13); these
features depend on the public seed only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.errors import SolverError
from dpcausal.methods.cate_krr import huber_derivative, huber_value

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class FourierFeatures:
    """The public feature map ζ on box-scaled covariates."""

    omega: FloatArray  # (q, m)

    @classmethod
    def draw(cls, q: int, m: int, bandwidth: float, seed: int) -> FourierFeatures:
        """Ω ~ N(0, h⁻²) from the public seed."""
        return cls(np.random.default_rng(seed).normal(0.0, 1.0 / bandwidth, size=(q, m)))

    @property
    def dim(self) -> int:
        """2m."""
        return 2 * int(self.omega.shape[1])

    def transform(self, s: FloatArray) -> FloatArray:
        """ζ(s) for the rows of ``s`` (unit norm)."""
        proj = np.atleast_2d(s) @ self.omega
        return np.hstack([np.cos(proj), np.sin(proj)]) / math.sqrt(self.omega.shape[1])


@dataclass(frozen=True)
class RffFit:
    """ĝ(x) = wᵀζ(s(x)) and how exact the solve was."""

    w: FloatArray
    grad_norm: float
    iterations: int


def _objective(w: FloatArray, z: FloatArray, rho: FloatArray, phi: FloatArray, lam0: float,
               c: float | None) -> float:
    return float(rho @ huber_value(z @ w - phi, c)) / z.shape[0] + lam0 * float(w @ w)


def _gradient(w: FloatArray, z: FloatArray, rho: FloatArray, phi: FloatArray, lam0: float,
              c: float | None) -> FloatArray:
    return z.T @ (rho * huber_derivative(z @ w - phi, c)) / z.shape[0] + 2.0 * lam0 * w


def fit_rff(z: FloatArray, rho: FloatArray, phi: FloatArray, *, lam0: float, huber_c: float | None,
            grad_tol: float, max_iter: int = 100) -> RffFit:
    """Minimise J(w) exactly (active-set Newton, damped); stop at ‖∇J‖₂ ≤ ``grad_tol``.

    Given the rows S with |residual| ≤ c, stationarity is the p × p system
    (Z_SᵀW_SZ_S/n + λ0 I) w = Z_SᵀW_Sφ_S/n − c Σ_{i∉S} ρ_i sign(r_i) z_i/n.

    Raises
    ------
    SolverError
        When the tolerance is not reached.
    """
    n, p = z.shape
    w = np.zeros(p)
    val = _objective(w, z, rho, phi, lam0, huber_c)
    gnorm = math.inf
    for it in range(1, max_iter + 1):
        r = z @ w - phi
        inside = np.ones(n, dtype=bool) if huber_c is None else np.abs(r) <= huber_c
        zs = z[inside]
        ws = rho[inside]
        lhs = (zs * ws[:, None]).T @ zs / n + lam0 * np.eye(p)
        rhs = zs.T @ (ws * phi[inside]) / n
        if huber_c is not None and not inside.all():
            out = ~inside
            rhs -= huber_c * z[out].T @ (rho[out] * np.sign(r[out])) / n
        new = np.linalg.solve(lhs, rhs)
        step = new - w
        t = 1.0
        while True:
            cand = w + t * step
            cval = _objective(cand, z, rho, phi, lam0, huber_c)
            if cval <= val + 1e-12 * abs(val) or t < 1e-8:
                break
            t *= 0.5
        w, val = cand, cval
        gnorm = float(np.linalg.norm(_gradient(w, z, rho, phi, lam0, huber_c)))
        if gnorm <= grad_tol:
            return RffFit(w, gnorm, it)
    raise SolverError(
        f"the random-feature second stage stopped at gradient norm {gnorm:.3g} > {grad_tol:.3g}; "
        "raise cate.ridge or cate.huber_c, or report this as a bug")
