"""How wide the privacy noise is: (1 − α) half-widths from each mechanism's public law.

Every function here is post-processing of public parameters (a noise scale, a dimension, the
number of candidates, n and a strong-convexity constant): it reads no data and costs no ε. A
half-width h is exact when P(|noise| ≤ h) = 1 − α for the stated law, and a *bound* when only
P(|noise| ≤ h) ≥ 1 − α holds (``exponential_utility_gap`` over the utilities, and
``objective_perturbation_bound``); callers label the latter ``bound: true``.

The laws, with Z the noise added to a released scalar or to a linear functional aᵀθ:

- Laplace of scale b on a scalar: P(|Z| > t) = e^{−t/b}, so h = b·ln(1/α).
- Laplace on aᵀθ (independent coordinates): Σ a_i L_i, by Gil-Pelaez inversion of its
  characteristic function ∏ 1/(1 + a_i²b²u²).
- Gaussian N(0, σ²I): aᵀZ ~ N(0, σ²‖a‖²), h = ‖a‖·σ·z_{1−α/2}. The Gaussian-process mechanism's
  noise at a point is Gaussian with sd σ·sqrt(k(x, x)) (:func:`gp_pointwise_sd`).
- ℓ2-Laplace (radius R ~ Gamma(d, s) × a uniform direction u): aᵀZ has the law of ‖a‖·R·u₁
  (rotation invariance). With u₁ = cos φ, φ of density ∝ sin^{d−2}φ on [0, π],
  P(|R u₁| > t) = ∫₀^{π/2} Q(d, t/(s cos φ)) sin^{d−2}φ dφ / ∫₀^{π/2} sin^{d−2}φ dφ,
  Q the regularised upper incomplete gamma function: a smooth bounded integrand, integrated
  adaptively, then inverted by Brent's method. For d = 1 the law is Laplace(s).
- Exponential mechanism (Gumbel-max at temperature T: P(k) ∝ exp(u_k/T)): over all utility
  vectors, sup P(u(chosen) < max u − t) = (K − 1)e^{−t/T}/(1 + (K − 1)e^{−t/T}) (every other
  candidate just below max u − t), so t = T·ln((K − 1)(1 − α)/α) gives P(u(chosen) ≥ max u − t)
  ≥ 1 − α for every utility vector, with equality in that worst case.
- Objective perturbation min F(θ) + bᵀθ/n over a convex set, F γ-strongly convex: the
  minimisers with and without b differ by ‖Δθ‖₂ ≤ ‖b‖₂/(nγ) (add the two first-order optimality
  conditions), so |aᵀΔθ| ≤ ‖a‖₂·q_{1−α}(‖b‖)/(nγ) with probability ≥ 1 − α; over an ℓ1 ball of
  radius λ₁ also |aᵀΔθ| ≤ ‖a‖_∞·2λ₁ always. ‖b‖ ~ Gamma(d, s) (ℓ2-Laplace) or σ·χ_d (Gaussian).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.mechanisms import projection_law

UNIT = 2.0 ** -53
"""The unit roundoff of float64."""


def check_alpha(alpha: float) -> None:
    """Raise ValueError unless 0 < α < 1."""
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def _check_scale(scale: float) -> None:
    if not (math.isfinite(scale) and scale >= 0.0):
        raise ValueError(f"a noise scale must be finite and >= 0, got {scale!r}")


def laplace_halfwidth(scale: float, alpha: float) -> float:
    """h with P(|L| ≤ h) = 1 − α for L ~ Laplace(0, b): h = b·ln(1/α)."""
    check_alpha(alpha)
    _check_scale(scale)
    return scale * math.log(1.0 / alpha)


def gaussian_halfwidth(sigma: float, alpha: float) -> float:
    """h with P(|Z| ≤ h) = 1 − α for Z ~ N(0, σ²): h = σ·z_{1−α/2}, z rounded up
    (:func:`dpcausal.mechanisms.normal.upper_quantile`: no scipy on the plan path, issue 24)."""
    from dpcausal.mechanisms.normal import upper_quantile

    check_alpha(alpha)
    _check_scale(sigma)
    return sigma * upper_quantile(alpha / 2.0)


def gp_pointwise_sd(sigma: float, kernel_diagonal: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The sd of a Gaussian-process release at each point: σ·sqrt(k(x, x)).

    ``kernel_diagonal`` is k(x, x) of the noise covariance at each point: 1 + τ for a path of
    the unit-diagonal kernel k0 with jitter τ, ‖ζ(x)‖² for a finite feature map ζ.
    """
    diag = np.asarray(kernel_diagonal, dtype=np.float64)
    if np.any(~np.isfinite(diag)) or np.any(diag < 0):
        raise ValueError("kernel_diagonal must be finite and >= 0")
    return np.asarray(sigma * np.sqrt(diag), dtype=np.float64)


def laplace_sum_coverage(t: float, scales: npt.ArrayLike) -> float:
    """P(|Σ_i L_i| ≤ t) for independent L_i ~ Laplace(0, c_i) (Gil-Pelaez inversion).

    With φ(u) = ∏ 1/(1 + c_i²u²) the (real, even) characteristic function,
    P(|S| ≤ t) = (2/π) ∫₀^∞ sin(tu) φ(u)/u du. The integral is split at u₀ = 1/min c: a plain
    adaptive rule on [0, u₀] and QAWF (Fourier integrals) on [u₀, ∞).
    """
    c = np.abs(np.asarray(scales, dtype=np.float64)).ravel()
    c = c[c > 0]
    if t <= 0.0:
        return 0.0
    if c.size == 0:
        return 1.0
    c2 = c * c

    def phi(u: float) -> float:
        return float(np.prod(1.0 / (1.0 + c2 * u * u)))

    from scipy import integrate  # lazy: a plan without this law never loads it

    u0 = 1.0 / float(c.min())
    head, _ = integrate.quad(lambda u: math.sin(t * u) / u * phi(u) if u > 0 else t,
                             0.0, u0, limit=500, epsabs=1e-13, epsrel=1e-11)
    tail, _ = integrate.quad(lambda u: phi(u) / u, u0, math.inf, weight="sin", wvar=t,
                             limlst=200, epsabs=1e-13)
    return min(1.0, max(0.0, 2.0 / math.pi * (float(head) + float(tail))))


def laplace_sum_halfwidth(scales: npt.ArrayLike, alpha: float) -> float:
    """h with P(|Σ_i L_i| ≤ h) = 1 − α, L_i ~ Laplace(0, c_i) independent.

    The noise of aᵀ(θ + L) for i.i.d. Laplace(b) coordinates has ``scales`` = |a_i|·b.
    """
    check_alpha(alpha)
    c = np.abs(np.asarray(scales, dtype=np.float64)).ravel()
    if np.any(~np.isfinite(c)):
        raise ValueError("scales must be finite")
    c = c[c > 0]
    if c.size == 0:
        return 0.0
    if c.size == 1:
        return laplace_halfwidth(float(c[0]), alpha)
    # |S| ≤ Σ|L_i|, and P(Σ|L_i| > Σ c_i ln(k/α)) ≤ α by a union bound: a bracket for the root
    hi = float(c.sum()) * math.log(c.size / alpha) + float(c.max())
    from scipy import optimize  # lazy: see laplace_sum_coverage

    root = optimize.brentq(lambda t: laplace_sum_coverage(t, c) - (1.0 - alpha), 0.0, hi,
                           xtol=1e-12 * hi, rtol=1e-10)
    return float(root)


def l2_laplace_projection_tail(t: float, dim: int, scale: float) -> float:
    """P(|R·u₁| > t) for R ~ Gamma(dim, scale) and u uniform on the unit sphere S^{dim−1}
    (module docstring; :func:`dpcausal.mechanisms.projection_law.projection_tail`)."""
    _check_scale(scale)
    if t <= 0.0:
        return 1.0
    if scale == 0.0:
        return 0.0
    if dim == 1:
        return math.exp(-t / scale)
    return projection_law.projection_tail(t / scale, int(dim))


def l2_laplace_projection_halfwidth(dim: int, scale: float, alpha: float) -> float:
    """h with P(|aᵀZ| ≤ h) = 1 − α for ℓ2-Laplace noise Z (Gamma(dim, scale) radius) and ‖a‖ = 1
    (:func:`dpcausal.mechanisms.projection_law.projection_halfwidth`: no scipy up to 128
    dimensions, rounded up by a relative 1e-9).

    Multiply by ‖a‖₂ for another functional (rotation invariance); a coordinate has ‖a‖ = 1.
    """
    check_alpha(alpha)
    _check_scale(scale)
    if not (isinstance(dim, int | np.integer) and dim >= 1):
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    if scale == 0.0:
        return 0.0
    if dim == 1:
        return laplace_halfwidth(scale, alpha)
    hi = l2_laplace_norm_quantile(int(dim), scale, 1.0 - alpha)
    return projection_law.projection_halfwidth(int(dim), scale, alpha, hi)


def l2_laplace_norm_quantile(dim: int, scale: float, level: float) -> float:
    """The ``level`` quantile of ‖Z‖₂ = R ~ Gamma(dim, scale).

    For an integer ``dim`` up to :data:`ERLANG_MAX_DIM` and ``level`` ≥ ½ (an accuracy report's
    1 − α) the Erlang quantile is solved here (:func:`erlang_upper_quantile`), so a plan does not
    import scipy (issue 24); otherwise ``scipy.special.gammaincinv``.
    """
    check_alpha(level)
    _check_scale(scale)
    if isinstance(dim, int | np.integer) and 1 <= dim <= ERLANG_MAX_DIM and level >= 0.5:
        return scale * erlang_upper_quantile(int(dim), 1.0 - level)
    from scipy import special

    return scale * float(special.gammaincinv(dim, level))


ERLANG_MAX_DIM = 10_000
"""Largest integer shape :func:`erlang_upper_quantile` handles (its sum has ``dim`` terms)."""


def erlang_upper_tail(dim: int, x: float) -> float:
    """Q(dim, x) = P(R > x) for R ~ Gamma(dim, 1), integer dim: e^{−x} Σ_{k<dim} x^k/k!, each
    term formed in logs (no overflow) and added exactly rounded (``math.fsum``)."""
    if x <= 0.0:
        return 1.0
    log_x = math.log(x)
    return math.fsum(math.exp(k * log_x - x - math.lgamma(k + 1.0)) for k in range(dim))


def erlang_upper_quantile(dim: int, tail: float) -> float:
    """x with Q(dim, x) = ``tail`` ∈ (0, ½] for R ~ Gamma(dim, 1), integer dim: Newton's method
    safeguarded by bisection on a bracket, to a relative change ≤ 4u (Q is decreasing in x with
    Q′(x) = −x^{dim−1}e^{−x}/(dim − 1)!). Agrees with ``scipy.special.gammainccinv`` to a few
    ulps (tested)."""
    if not 0.0 < tail <= 0.5:
        raise ValueError(f"tail must be in (0, 0.5], got {tail!r}")
    lo, hi = 0.0, float(dim)
    while erlang_upper_tail(dim, hi) > tail:  # Q(dim, dim) ≥ ~½ ≥ tail: expand upwards
        lo, hi = hi, 2.0 * hi
    x = 0.5 * (lo + hi)
    for _ in range(200):
        f = erlang_upper_tail(dim, x) - tail
        if f > 0.0:
            lo = x
        else:
            hi = x
        slope = -math.exp((dim - 1.0) * math.log(x) - x - math.lgamma(float(dim)))
        step = f / slope if slope < 0.0 else math.inf
        new = x - step
        if not lo < new < hi:  # Newton left the bracket: bisect
            new = 0.5 * (lo + hi)
        if abs(new - x) <= 4.0 * UNIT * abs(x) or hi - lo <= 4.0 * UNIT * hi:
            return new
        x = new
    return x


def gaussian_norm_quantile(dim: int, sigma: float, level: float) -> float:
    """The ``level`` quantile of ‖Z‖₂ for Z ~ N(0, σ² I_dim): σ·sqrt(χ²_dim quantile)."""
    from scipy import special

    check_alpha(level)
    _check_scale(sigma)
    return sigma * math.sqrt(2.0 * float(special.gammaincinv(dim / 2.0, level)))  # χ²_dim


def exponential_utility_gap(temperature: float, n_candidates: int, alpha: float) -> float:
    """t with P(u(chosen) ≥ max u − t) ≥ 1 − α for every utility vector (a bound; module doc).

    ``temperature`` is the Gumbel scale T of the mechanism (2Δ_u/ε, or Δ_u/ε when monotonic),
    in utility units; ``n_candidates`` is K, the size of the public candidate set.
    """
    check_alpha(alpha)
    _check_scale(temperature)
    if n_candidates < 1:
        raise ValueError(f"n_candidates must be >= 1, got {n_candidates!r}")
    ratio = (n_candidates - 1) * (1.0 - alpha) / alpha
    return temperature * math.log(ratio) if ratio > 1.0 else 0.0


def objective_perturbation_bound(norm_quantile: float, *, n: int, strong_convexity: float,
                                 a_norm2: float = 1.0, a_norm_inf: float | None = None,
                                 l1_radius: float | None = None) -> float:
    """A (1 − α) bound on |aᵀ(θ_b − θ_0)| for objective perturbation (module docstring).

    Parameters
    ----------
    norm_quantile
        The (1 − α) quantile of ‖b‖₂ (:func:`l2_laplace_norm_quantile` or
        :func:`gaussian_norm_quantile`).
    n
        The divisor of the noise term bᵀθ/n.
    strong_convexity
        γ: the perturbed objective (without b) is γ-strongly convex in θ.
    a_norm2, a_norm_inf
        ‖a‖₂ and ‖a‖_∞ of the functional (a coordinate: 1 and 1).
    l1_radius
        λ₁ when θ is constrained to the ℓ1 ball of that radius: both minimisers lie in it, so
        |aᵀΔθ| ≤ ‖a‖_∞·2λ₁ whatever b is.
    """
    if not (math.isfinite(strong_convexity) and strong_convexity > 0):
        raise ValueError(f"strong_convexity must be finite and > 0, got {strong_convexity!r}")
    bound = a_norm2 * norm_quantile / (n * strong_convexity)
    if l1_radius is not None:
        inf_norm = a_norm2 if a_norm_inf is None else a_norm_inf
        bound = min(bound, inf_norm * 2.0 * l1_radius)
    return float(bound)


def event_halfwidth(event: PrivacyEvent, alpha: float, *, a_norm2: float = 1.0) -> float:
    """The (1 − α) half-width of the noise on one coordinate (or on a functional of ℓ2 norm
    ``a_norm2``) of the release described by ``event`` (its kind, noise scale and dimension).

    Laplace is exact only for a single coordinate (``a_norm2`` must be 1; use
    :func:`laplace_sum_halfwidth` for a functional); the exponential mechanism has no scalar
    noise (use :func:`exponential_utility_gap`).
    """
    if event.kind == "laplace":
        if a_norm2 != 1.0:
            raise ValueError("Laplace noise on a functional: use laplace_sum_halfwidth")
        return laplace_halfwidth(event.noise_scale, alpha)
    if event.kind in ("gaussian", "gaussian_process"):
        return a_norm2 * gaussian_halfwidth(event.noise_scale, alpha)
    if event.kind == "l2_laplace":
        dim = int(event.params["dim"])
        return a_norm2 * l2_laplace_projection_halfwidth(dim, event.noise_scale, alpha)
    raise ValueError(f"no scalar noise half-width for a {event.kind!r} event")


def event_norm_quantile(event: PrivacyEvent, level: float) -> float:
    """The ``level`` quantile of the ℓ2 norm of the noise vector of ``event`` (an ℓ2-Laplace or
    a Gaussian vector with ``params["dim"]``), e.g. b of an objective perturbation."""
    dim = int(event.params["dim"])
    if event.kind == "l2_laplace":
        return l2_laplace_norm_quantile(dim, event.noise_scale, level)
    if event.kind == "gaussian":
        return gaussian_norm_quantile(dim, event.noise_scale, level)
    raise ValueError(f"no noise-vector norm for a {event.kind!r} event")


def law_label(event: PrivacyEvent) -> str:
    """A short description of the noise law of ``event`` for outputs (public parameters only)."""
    if event.kind == "laplace":
        return f"Laplace(b={event.noise_scale:.4g})"
    if event.kind in ("gaussian", "gaussian_process"):
        return f"Gaussian(sigma={event.noise_scale:.4g})"
    if event.kind == "l2_laplace":
        return (f"l2-Laplace projected (d={int(event.params['dim'])}, "
                f"Gamma scale={event.noise_scale:.4g})")
    return f"exponential mechanism (Gumbel scale={event.noise_scale:.4g})"
