"""The Gaussian mechanism, with classic and analytic calibration."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent, check_noise_scale
from dpcausal.mechanisms._checks import check_epsilon, check_sensitivity
from dpcausal.mechanisms.curve import PrivacyCurve, gaussian_delta, loss_ratio
from dpcausal.numerics import bracketed_root


def _analytic_delta(sigma: float, epsilon: float, l2_sensitivity: float) -> float:
    """An upper bound on the δ achieved by N(0, σ²) noise at sensitivity Δ (Balle & Wang 2018,
    Theorem 8; :func:`gaussian_delta`, with μ = Δ/σ rounded once)."""
    return gaussian_delta(l2_sensitivity / sigma, epsilon, mu_rel_error=2.0 ** -53)


SIGMA_REL_TOL = 1e-14
"""The root search stops when its bracket [lo, hi] has hi/lo − 1 ≤ this."""
SIGMA_MARGIN = 2e-12
"""The returned σ is the bracket's upper end times (1 + this) (module Notes)."""


def analytic_gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float) -> float:
    """Smallest σ (up to a relative 2e-12, rounded *up*) giving (ε, δ)-DP at ℓ2 sensitivity Δ.

    Solves Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ) = δ; the left side decreases in σ, so the root is
    bracketed and the upper end of the final bracket is returned (never less noise than needed).
    A function of its three public numbers only, solved once per process for each (issue 24: a
    cate plan and its run each search ~70 ridges' σ).

    Notes
    -----
    Privacy-critical. The left side is evaluated as a rigorous upper bound (:func:`gaussian_delta`:
    every rounding of Φ, ln Φ, the arguments and μ = Δ/σ is bounded and added on the side of a
    larger δ), so any σ with that bound ≤ δ is (ε, δ)-DP exactly. The root is bracketed by
    doubling/halving from Δ, then the bracket is shrunk by false position (Illinois variant) in
    (ln σ, ln δ), safeguarded by geometric bisection whenever two steps do not halve it,
    until hi/lo − 1 ≤ :data:`SIGMA_REL_TOL`; δ-bound(hi) ≤ δ holds throughout. The result is hi
    times (1 + :data:`SIGMA_MARGIN`): the former calibration (``scipy.optimize.brentq`` at
    rtol 1e-13 on ``scipy.special``'s δ, times 1 + 1e-12) could end up to ~1e-12 above the exact
    root, and this one is never below it (tested against it on a wide grid of ε, δ and Δ, where
    also scipy's δ at the returned σ is ≤ δ). So receipts' σ differ from before by a relative
    ≤ ~2e-12, always upwards: more noise, never less. Plain floats, no scipy: a plan needs this
    σ, and importing scipy.special and scipy.optimize cost more than planning (issue 24).
    """
    check_epsilon(epsilon)
    check_sensitivity(l2_sensitivity)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1) for the Gaussian mechanism, got {delta!r}")
    if l2_sensitivity == 0.0:
        return 0.0
    return _analytic_sigma(float(epsilon), float(delta), float(l2_sensitivity))


@functools.lru_cache(maxsize=4096)
def _analytic_sigma(epsilon: float, delta: float, l2_sensitivity: float) -> float:
    """:func:`analytic_gaussian_sigma` for checked arguments with Δ > 0."""
    lo, hi = l2_sensitivity * 1e-6, l2_sensitivity
    while _analytic_delta(hi, epsilon, l2_sensitivity) > delta:
        lo, hi = hi, hi * 2.0
    while _analytic_delta(lo, epsilon, l2_sensitivity) <= delta:
        hi, lo = lo, lo / 2.0
    target = math.log(delta)

    def excess(x: float) -> float:  # ln δ-bound(e^x) − ln δ: decreasing in x = ln σ
        value = _analytic_delta(math.exp(x), epsilon, l2_sensitivity)
        return math.log(value) - target if value > 0.0 else -math.inf

    _, x_hi = bracketed_root(excess, math.log(lo), math.log(hi), excess(math.log(lo)),
                             excess(math.log(hi)),
                             lambda a, b: math.exp(b - a) - 1.0 <= SIGMA_REL_TOL)
    hi = math.exp(x_hi)
    while _analytic_delta(hi, epsilon, l2_sensitivity) > delta:  # e^x's rounding
        hi = math.nextafter(hi, math.inf)
    sigma = hi * (1.0 + SIGMA_MARGIN)
    while _analytic_delta(sigma, epsilon, l2_sensitivity) > delta:  # rounding of the product
        sigma *= 1.0 + 1e-15
    return sigma


def classic_gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float) -> float:
    """σ = Δ √(2 ln(1.25/δ)) / ε, valid only for ε < 1 (Dwork & Roth 2014, Theorem A.1)."""
    check_epsilon(epsilon)
    check_sensitivity(l2_sensitivity)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1) for the Gaussian mechanism, got {delta!r}")
    if epsilon >= 1.0:
        raise ValueError(
            f"classic Gaussian calibration needs epsilon < 1 (got {epsilon}); use 'analytic'"
        )
    return l2_sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


@dataclass(frozen=True, slots=True)
class GaussianMechanism:
    """Add i.i.d. N(0, σ²) noise to every coordinate.

    Notes
    -----
    Neighbouring relation: the caller's, under which ``l2_sensitivity`` holds.
    Sensitivity: Δ₂ = max over neighbours ‖f(D) − f(D′)‖₂.
    Guarantee: (ε, δ)-DP. ``analytic`` calibration (default) is the exact privacy profile of the
    Gaussian mechanism (Balle & Wang 2018, Thm 8), solved numerically and rounded up; ``classic`` is
    σ = Δ√(2 ln(1.25/δ))/ε, valid only for ε < 1 and never smaller than analytic.

    References
    ----------
    Balle & Wang (2018), "Improving the Gaussian mechanism for differential privacy".
    Dwork & Roth (2014), "The algorithmic foundations of differential privacy", Thm A.1.
    """

    epsilon: float
    delta: float
    l2_sensitivity: float
    calibration: Literal["analytic", "classic"] = "analytic"
    stage: str = "gaussian"

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_sensitivity(self.l2_sensitivity)
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta must be in (0, 1) for the Gaussian mechanism, got {self.delta!r}")
        if self.calibration not in ("analytic", "classic"):
            raise ValueError(f"calibration must be 'analytic' or 'classic', got {self.calibration!r}")
        check_noise_scale(self.stage, self.epsilon, self.sigma)  # classic refuses epsilon >= 1

    @property
    def sigma(self) -> float:
        """The noise standard deviation."""
        if self.calibration == "classic":
            return classic_gaussian_sigma(self.epsilon, self.delta, self.l2_sensitivity)
        return analytic_gaussian_sigma(self.epsilon, self.delta, self.l2_sensitivity)

    def event(self) -> PrivacyEvent:
        """Return the cost of this mechanism."""
        return PrivacyEvent(
            kind="gaussian",
            stage=self.stage,
            epsilon=self.epsilon,
            delta=self.delta,
            sensitivity=self.l2_sensitivity,
            norm="l2",
            noise_scale=self.sigma,
            params={"calibration": self.calibration},
        )

    @staticmethod
    def noise_curve(noise_scale: float, shift: float, params: Mapping[str, Any]) -> PrivacyCurve:
        """The privacy map of isotropic N(0, σ²) noise: the Gaussian pair at μ = shift/σ (ℓ2)."""
        return PrivacyCurve("gaussian", loss_ratio(shift, noise_scale))

    def privacy_loss(self, shift: float) -> PrivacyCurve:
        """The privacy curve of this release when its input moves by ``shift`` (ℓ2)."""
        return self.noise_curve(self.sigma, shift, {})

    def release(
        self, value: npt.ArrayLike, *, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """Return ``value`` plus N(0, σ²) noise in every coordinate."""
        return np.asarray(self.release_many(value, 1, rng=rng)[0], dtype=np.float64)

    def release_many(
        self, value: npt.ArrayLike, count: int, *, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """``count`` independent releases of ``value``, stacked on a new first axis."""
        arr = np.asarray(value, dtype=np.float64)
        return arr + rng.normal(0.0, self.sigma, size=(count, *arr.shape))
