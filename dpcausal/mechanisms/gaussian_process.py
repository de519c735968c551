"""The Gaussian-process mechanism: release a function in an RKHS by adding one GP sample path."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent, check_noise_scale
from dpcausal.mechanisms._checks import check_epsilon, check_sensitivity
from dpcausal.mechanisms.curve import PrivacyCurve, loss_ratio
from dpcausal.mechanisms.gaussian import analytic_gaussian_sigma

FloatArray = npt.NDArray[np.float64]

JITTER_START = 1e-10
"""Relative jitter added to the diagonal of the query Gram matrix before its Cholesky factor.

The jitter adds *independent* extra noise (σ²·τ per point): it never removes noise, so the guarantee
is unaffected (post-processing of the exact mechanism plus independent noise)."""


def gaussian_kernel(a: npt.ArrayLike, b: npt.ArrayLike, bandwidth: float) -> FloatArray:
    """k0(x, x′) = exp(−‖x − x′‖²/(2h²)) for the rows of ``a`` and ``b`` (unit diagonal)."""
    xa = np.atleast_2d(np.asarray(a, dtype=np.float64))
    xb = np.atleast_2d(np.asarray(b, dtype=np.float64))
    sq: FloatArray = (
        np.einsum("ij,ij->i", xa, xa)[:, None]
        + np.einsum("ij,ij->i", xb, xb)[None, :]
        - 2.0 * (xa @ xb.T)
    )
    np.maximum(sq, 0.0, out=sq)
    sq *= -0.5 / (bandwidth * bandwidth)
    np.exp(sq, out=sq)
    return sq


def classic_gp_constant(delta: float) -> float:
    """c(δ) = √(2 ln(2/δ)) of Hall et al. (2013), Cor. 9 / the paper's Thm 3."""
    return math.sqrt(2.0 * math.log(2.0 / delta))


@dataclass(frozen=True, slots=True)
class GaussianProcessMechanism:
    """Add σ·U to a function, U a sample path of the zero-mean GP with covariance k0 (unit diagonal).

    ``rkhs_sensitivity`` is the bound Δ on ‖f_D − f_D′‖ in the RKHS of k0 over neighbours. The noise
    sd per point is σ = max(σ_classic, σ_analytic) for ``calibration="classic"`` (the paper's
    σ = Δ√(2 ln(2/δ))/ε, floored by the exact value where the classic constant is not valid, i.e.
    ε beyond ≈ 8–10) or σ = σ_analytic for ``"analytic"`` (Balle & Wang's exact calibration for ℓ2
    sensitivity Δ).

    Notes
    -----
    Neighbouring relation: the caller's, under which ``rkhs_sensitivity`` holds.
    Sensitivity: Δ ≥ sup ‖f_D − f_D′‖_ℋ for the RKHS ℋ of k0 (the caller derives it).
    Guarantee: (ε, δ)-DP for the whole function (Hall, Rinaldo & Wasserman 2013, Cor. 9): for any
    finite set of points X, f(X) + σU(X) is the Gaussian mechanism with covariance σ²k0(X, X) whose
    Mahalanobis distance between neighbours is ‖(k0(X,X))^{-1/2}(f_D − f_D′)(X)‖₂ ≤ ‖f_D − f_D′‖_ℋ
    ≤ Δ (the RKHS interpolant of the values has norm at most that of f_D − f_D′). Every finite
    marginal is therefore the Gaussian mechanism at ℓ2 sensitivity Δ and noise σ, which is (ε, δ)-DP
    by Balle & Wang (2018, Thm 8) for σ ≥ σ_analytic, and by Hall et al. for the classic constant
    where it is valid. Releasing many points costs nothing extra as long as they share ONE sample
    path (one call of :meth:`release`); a second call is a new release.

    ``paths`` = r > 1 releases r functions f_1 … f_r at once (e.g. K − 1 treatment contrasts) with r
    independent paths: the GP over the product domain {1 … r} × X with covariance
    1{j = j′}·k0(x, x′), whose RKHS is the direct sum ℋ^r with ‖(f_j)‖² = Σ_j ‖f_j‖²_ℋ. The same
    argument applies there, so ``rkhs_sensitivity`` must bound √(Σ_j ‖f_j,D − f_j,D′‖²_ℋ) (the caller
    derives it, e.g. √r times the per-function bound).

    References
    ----------
    Hall, Rinaldo & Wasserman (2013), "Differential privacy for functions and functional data",
    JMLR 14, Cor. 9. Balle & Wang (2018), "Improving the Gaussian mechanism". Schröder et al.
    (2025), "Differentially private learners for heterogeneous treatment effects", Thm 3, Alg. 1.
    """

    epsilon: float
    delta: float
    rkhs_sensitivity: float
    bandwidth: float
    calibration: Literal["classic", "analytic"] = "classic"
    stage: str = "gaussian_process"
    paths: int = 1
    """How many functions are released jointly (independent paths); the sensitivity covers all."""

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        if self.paths < 1:
            raise ValueError(f"paths must be >= 1, got {self.paths!r}")
        check_sensitivity(self.rkhs_sensitivity)
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta must be in (0, 1) for the GP mechanism, got {self.delta!r}")
        if not (math.isfinite(self.bandwidth) and self.bandwidth > 0):
            raise ValueError(f"bandwidth must be finite and > 0, got {self.bandwidth!r}")
        if self.calibration not in ("classic", "analytic"):
            raise ValueError(f"calibration must be 'classic' or 'analytic', got {self.calibration!r}")
        check_noise_scale(self.stage, self.epsilon, self.sigma)

    @property
    def sigma_classic(self) -> float:
        """Δ√(2 ln(2/δ))/ε (may be invalid, i.e. too small, for ε beyond ≈ 8)."""
        return self.rkhs_sensitivity * classic_gp_constant(self.delta) / self.epsilon

    @property
    def sigma_analytic(self) -> float:
        """The exact (Balle–Wang) σ for ℓ2 sensitivity Δ."""
        return analytic_gaussian_sigma(self.epsilon, self.delta, self.rkhs_sensitivity)

    @property
    def sigma(self) -> float:
        """The per-point noise standard deviation."""
        if self.calibration == "analytic":
            return self.sigma_analytic
        return max(self.sigma_classic, self.sigma_analytic)

    def event(self) -> PrivacyEvent:
        """Return the cost of this mechanism."""
        joint = ({} if self.paths == 1 else {
            "paths": self.paths,
            "sensitivity_norm": "norm of the direct sum of the paths' RKHSs of k0(x,x')="
                                "exp(-|x-x'|^2/(2h^2)): sqrt(sum of squared RKHS distances)",
            "covariance": "sigma^2 * k0 for each path, independent paths"})
        return PrivacyEvent(
            kind="gaussian_process",
            stage=self.stage,
            epsilon=self.epsilon,
            delta=self.delta,
            sensitivity=self.rkhs_sensitivity,
            norm="l2",
            noise_scale=self.sigma,
            params={
                "calibration": self.calibration,
                "sensitivity_norm": "RKHS norm of k0(x,x')=exp(-|x-x'|^2/(2h^2))",
                "kernel": "gaussian",
                "bandwidth": self.bandwidth,
                "covariance": "sigma^2 * k0",
                **joint,
            },
        )

    @staticmethod
    def noise_curve(noise_scale: float, shift: float, params: Mapping[str, Any]) -> PrivacyCurve:
        """The privacy map of σ·U, U a GP path with covariance k0: the Gaussian pair at μ = shift/σ,
        ``shift`` the RKHS distance of the two functions (every finite marginal is the Gaussian
        mechanism with Mahalanobis distance ≤ shift/σ; class Notes)."""
        return PrivacyCurve("gaussian", loss_ratio(shift, noise_scale))

    def privacy_loss(self, shift: float) -> PrivacyCurve:
        """The privacy curve of this release when its input moves by ``shift`` (ℓ2)."""
        return self.noise_curve(self.sigma, shift, {})

    def release_weights(self, weights: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
        """Finite feature map variant: return w + σξ, ξ ~ N(0, I) (w of shape (paths, m) when
        ``paths`` > 1: one weight vector per function).

        For a kernel k(x, x′) = ζ(x)ᵀζ(x′) with ‖ζ(x)‖ ≤ 1 (e.g. normalised random Fourier
        features from a public seed) a GP path with covariance σ²k is σζ(x)ᵀξ, so the private
        function x ↦ ζ(x)ᵀ(w + σξ) is this release. It is the Gaussian mechanism on w with ℓ2
        sensitivity ``rkhs_sensitivity`` (a bound on ‖w_D − w_D′‖₂), hence (ε, δ)-DP at σ.
        """
        return np.asarray(self.release_weights_many(weights, 1, rng=rng)[0], dtype=np.float64)

    def release_weights_many(self, weights: npt.ArrayLike, count: int, *,
                             rng: np.random.Generator) -> FloatArray:
        """``count`` independent :meth:`release_weights` draws, shape (count, len(weights))."""
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != self._value_ndim or (w.ndim == 2 and w.shape[0] != self.paths):
            raise ValueError(f"weights must have shape {self._shape_word}, got {w.shape}")
        return w + self.sigma * rng.standard_normal((count, *w.shape))

    @property
    def _value_ndim(self) -> int:
        """1 (one function) or 2 (``paths`` functions, one row each)."""
        return 1 if self.paths == 1 else 2

    @property
    def _shape_word(self) -> str:
        return "1-d, (d,)" if self.paths == 1 else f"({self.paths}, d)"

    def noise_cholesky(self, gram: FloatArray) -> FloatArray:
        """Lower Cholesky factor of k0(X, X) + τI with the smallest jitter τ ≥ 1e-10·d that works."""
        g = np.asarray(gram, dtype=np.float64)
        d = g.shape[0]
        tau = JITTER_START * max(d, 1)
        eye = np.eye(d)
        for _ in range(20):
            try:
                return np.asarray(np.linalg.cholesky(g + tau * eye), dtype=np.float64)
            except np.linalg.LinAlgError:
                tau *= 10.0
        raise ValueError("the query Gram matrix is not positive semi-definite (not a kernel matrix)")

    def release(
        self,
        values_at_points: npt.ArrayLike,
        *,
        rng: np.random.Generator,
        gram: npt.ArrayLike | None = None,
        points: npt.ArrayLike | None = None,
    ) -> FloatArray:
        """Return f(X) + σ·U(X) for ONE GP path U, given f's values at the d points X (with
        ``paths`` = r > 1: the values of r functions, shape (r, d), and r independent paths).

        Give either ``points`` (d × q, in the coordinates the kernel is defined on) or ``gram`` =
        k0(X, X) (d × d). Duplicate points get identical noise (same path).
        """
        out = self.release_many(values_at_points, 1, rng=rng, gram=gram, points=points)
        return np.asarray(out[0], dtype=np.float64)

    def release_many(
        self,
        values_at_points: npt.ArrayLike,
        count: int,
        *,
        rng: np.random.Generator,
        gram: npt.ArrayLike | None = None,
        points: npt.ArrayLike | None = None,
    ) -> FloatArray:
        """``count`` independent :meth:`release` draws (independent paths), shape (count, d) or
        (count, paths, d)."""
        vals = np.asarray(values_at_points, dtype=np.float64)
        if vals.ndim != self._value_ndim or (vals.ndim == 2 and vals.shape[0] != self.paths):
            raise ValueError(f"values_at_points must have shape {self._shape_word}, got "
                             f"{vals.shape}")
        if (gram is None) == (points is None):
            raise ValueError("give exactly one of gram= and points=")
        if points is not None:
            pts = np.atleast_2d(np.asarray(points, dtype=np.float64))
            uniq, inverse = np.unique(pts, axis=0, return_inverse=True)
            k = gaussian_kernel(uniq, uniq, self.bandwidth)
        else:
            k = np.asarray(gram, dtype=np.float64)
            inverse = np.arange(k.shape[0])
        if k.ndim != 2 or k.shape[0] != k.shape[1] or inverse.shape[0] != vals.shape[-1]:
            raise ValueError("the kernel matrix / points do not match values_at_points")
        chol = self.noise_cholesky(k)
        draws = (chol @ rng.standard_normal((k.shape[0], count * self.paths))).T
        noise = draws[:, np.ravel(inverse)]
        if vals.ndim == 2:
            noise = noise.reshape(count, self.paths, -1)
        return vals + self.sigma * noise


PATH_NUGGET = 1e-8
"""Independent extra variance (relative to k0's unit diagonal) at every new point of an iterative
path: keeps the conditional covariance positive definite; it only ever adds noise."""


class GaussianProcessPath:
    """The corrected Algorithm 2 (spec §3.5, E4): answer queries one batch at a time from ONE GP path.

    Stores the *unit noise* values u(x) already drawn (not the released outputs) and draws the noise
    at new points from the GP conditional u_new | u_old ~ N(V ᵀC⁻¹u_old, K_new − VᵀC⁻¹V), with
    C = k0(P, P) + τI over the stored points P. Every answer is f(x) + σ·u(x); a point asked before
    returns its stored value. All answers together are one draw of a GP with covariance
    σ²(k0 + τ·1{x = x′}) ⪰ σ²k0 at the queried points, so any number of queries costs the single
    (ε, δ) of ``mechanism`` (post-processing of one GP path; extra independent noise never hurts).

    Notes
    -----
    Neighbouring relation, sensitivity and guarantee: those of ``mechanism``
    (:class:`GaussianProcessMechanism`). The object holds the curator's state (the stored noise and,
    through the caller, the non-private function): it is as sensitive as the data and must never be
    written to outputs or logs; only the answers are releasable.
    """

    def __init__(self, mechanism: GaussianProcessMechanism, *, max_points: int = 20_000) -> None:
        self.mechanism = mechanism
        self.max_points = max_points
        self._points = np.zeros((0, 0))
        self._u = np.zeros(0)

    @property
    def n_points(self) -> int:
        """How many distinct points the path has been evaluated at."""
        return int(self._u.shape[0])

    def _lookup(self, pts: FloatArray) -> npt.NDArray[np.int64]:
        """Index of each row of ``pts`` among the stored points, −1 when new."""
        idx = np.full(pts.shape[0], -1, dtype=np.int64)
        if self.n_points == 0:
            return idx
        for i, row in enumerate(pts):
            hit = np.flatnonzero(np.all(self._points == row, axis=1))
            if hit.size:
                idx[i] = int(hit[0])
        return idx

    def _draw(self, new: FloatArray, rng: np.random.Generator) -> FloatArray:
        h = self.mechanism.bandwidth
        k_nn = gaussian_kernel(new, new, h) + PATH_NUGGET * np.eye(new.shape[0])
        if self.n_points == 0:
            mean = np.zeros(new.shape[0])
            cov = k_nn
        else:
            c = gaussian_kernel(self._points, self._points, h) + PATH_NUGGET * np.eye(self.n_points)
            v = gaussian_kernel(self._points, new, h)
            chol = np.linalg.cholesky(c)
            w = np.linalg.solve(chol, v)
            mean = w.T @ np.linalg.solve(chol, self._u)
            cov = k_nn - w.T @ w
            cov = 0.5 * (cov + cov.T)
        lower = self.mechanism.noise_cholesky(cov)
        return mean + lower @ rng.standard_normal(new.shape[0])

    def release(self, values_at_points: npt.ArrayLike, points: npt.ArrayLike, *,
                rng: np.random.Generator) -> FloatArray:
        """Return f(x) + σ·u(x) at ``points`` (d × q) given f's values there, extending the path."""
        vals = np.asarray(values_at_points, dtype=np.float64)
        pts = np.atleast_2d(np.asarray(points, dtype=np.float64))
        if vals.ndim != 1 or pts.shape[0] != vals.shape[0]:
            raise ValueError("values_at_points must be 1-d with one value per point")
        if self.n_points and pts.shape[1] != self._points.shape[1]:
            raise ValueError("points have a different dimension than the stored path")
        uniq, inverse = np.unique(pts, axis=0, return_inverse=True)
        idx = self._lookup(uniq)
        new_rows = np.flatnonzero(idx < 0)
        if new_rows.size:
            if self.n_points + new_rows.size > self.max_points:
                raise ValueError(f"the path would exceed max_points = {self.max_points}")
            u_new = self._draw(uniq[new_rows], rng)
            start = self.n_points
            self._points = uniq[new_rows] if start == 0 else np.vstack([self._points, uniq[new_rows]])
            self._u = np.concatenate([self._u, u_new])
            idx[new_rows] = np.arange(start, start + new_rows.size)
        return vals + self.mechanism.sigma * self._u[idx[np.ravel(inverse)]]
