"""Issue 24: the standard normal law and the analytic Gaussian σ in plain floats
(:mod:`dpcausal.mechanisms.normal`), checked against ``scipy.special`` over wide grids.

The σ is privacy-critical: on every grid point it must never be below the σ that scipy's δ gives
(the root of ``ndtr``/``log_ndtr``'s δ(σ) = δ, found here by bisection to 1e-15), scipy's δ at it
must be ≤ δ, and it may exceed that root only by a tiny relative amount (the rigorous error
bounds and the 2e-12 margin).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, special

from dpcausal.mechanisms import normal
from dpcausal.mechanisms.curve import gaussian_delta, gaussian_epsilon
from dpcausal.mechanisms.gaussian import analytic_gaussian_sigma

EPSILONS = (1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 3.0, 8.0, 20.0, 50.0, 300.0)
DELTAS = (1e-15, 1e-10, 1e-7, 1e-5, 1e-3, 0.05, 0.5, 0.9)
SENSITIVITIES = (1e-3, 1.0, 7.0, 1e3)


def _grid_x() -> np.ndarray:
    rng = np.random.default_rng(24)
    return np.concatenate([np.linspace(-37.0, 37.0, 20_001), rng.uniform(-37.0, 37.0, 20_000),
                           rng.normal(0.0, 1.0, 5_000), [0.0, -1e-300, 1e-300]])


def test_ndtr_agrees_with_scipy_within_its_stated_error() -> None:
    for x in _grid_x():
        ref = float(special.ndtr(x))
        assert abs(normal.ndtr(float(x)) - ref) <= normal.ndtr_rel_error(float(x)) * ref, x


def test_log_ndtr_agrees_with_scipy_within_its_stated_error() -> None:
    xs = np.concatenate([_grid_x(), -np.geomspace(37.0, 1e150, 3_000), [-36.999, -37.001]])
    for x in xs:
        ref = float(special.log_ndtr(x))
        got = normal.log_ndtr(float(x))
        assert abs(got - ref) <= normal.log_ndtr_abs_error(float(x)), (x, got, ref)


def test_upper_quantile_is_never_below_scipy_and_within_a_few_ulps() -> None:
    tails = np.concatenate([np.geomspace(1e-300, 0.5, 2_000), [0.025, 0.05, 0.005, 0.4999]])
    for tail in tails:
        ref = -float(special.ndtri(tail))
        got = normal.upper_quantile(float(tail))
        assert got >= ref, tail
        assert got <= ref * (1 + 1e-13) + 1e-14, (tail, got, ref)
    assert normal.upper_quantile(0.5) == 0.0
    with pytest.raises(ValueError, match="tail"):
        normal.upper_quantile(0.6)


def _scipy_delta(sigma: float, eps: float, sens: float) -> float:
    mu = sens / sigma
    return float(special.ndtr(mu / 2 - eps / mu)
                 - math.exp(eps + special.log_ndtr(-mu / 2 - eps / mu)))


def _scipy_root(eps: float, delta: float, sens: float) -> float:
    """The smallest σ (to a relative 1e-15) with scipy's δ(σ) ≤ δ: bisection."""
    lo, hi = sens * 1e-9, sens
    while _scipy_delta(hi, eps, sens) > delta:
        lo, hi = hi, 2.0 * hi
    while hi / lo - 1.0 > 1e-15:
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if _scipy_delta(mid, eps, sens) > delta else (lo, mid)
    return hi


def test_gaussian_delta_is_never_below_scipys() -> None:
    for mu in np.geomspace(1e-4, 60.0, 120):
        for eps in (0.0, *EPSILONS):
            ref = max(0.0, float(special.ndtr(mu / 2 - eps / mu)
                                 - math.exp(eps + special.log_ndtr(-mu / 2 - eps / mu))))
            got = gaussian_delta(float(mu), eps)
            assert got >= ref, (mu, eps)
            p = float(special.ndtr(mu / 2 - eps / mu))
            # the bounds are relative to p = Φ(a): ≤ ~(|a| + 2)·(μ/2 + ε/μ)·12u of it
            assert got - ref <= 1e-11 * p + 1e-300, (mu, eps, got, ref)


def test_analytic_sigma_never_below_scipys_root_and_tight() -> None:
    for eps in EPSILONS:
        for delta in DELTAS:
            for sens in SENSITIVITIES:
                sigma = analytic_gaussian_sigma(eps, delta, sens)
                ref = _scipy_root(eps, delta, sens)
                assert sigma >= ref, (eps, delta, sens, sigma, ref)  # never less noise
                assert _scipy_delta(sigma, eps, sens) <= delta, (eps, delta, sens)
                # tiny: the error bounds and the 2e-12 margin (≤ ~3e-10 where δ ≪ Φ(a))
                assert sigma <= ref * (1 + 1e-9), (eps, delta, sens, sigma / ref - 1)


def _former(eps: float, delta: float) -> float:
    """The former calibration at Δ = 1: brentq on scipy's δ at rtol 1e-13, times 1 + 1e-12."""
    lo, hi = 1e-6, 1.0
    while _scipy_delta(hi, eps, 1.0) > delta:
        hi *= 2.0
    root = optimize.brentq(lambda s: _scipy_delta(s, eps, 1.0) - delta, lo, hi,
                           xtol=1e-15, rtol=1e-13)
    return float(root) * (1.0 + 1e-12)


def test_analytic_sigma_is_at_most_3e12_above_the_former_brentq_calibration() -> None:
    """Receipts' σ moved up by a relative ≤ ~2e-12 where δ is not ≪ Φ(a)."""
    for eps, delta in ((0.1, 1e-5), (1.0, 1e-6), (3.0, 1e-9), (8.0, 1e-3), (1.0, 1e-7)):
        former = _former(eps, delta)
        ours = analytic_gaussian_sigma(eps, delta, 1.0)
        assert former <= ours <= former * (1 + 3e-12), (eps, delta, ours / former - 1)


def test_receipts_of_the_former_calibration_still_verify() -> None:
    """Verification recomputes ε from a receipt's σ with :func:`gaussian_epsilon`: a σ from
    the former scipy calibration must not be flagged (its ε within the 1e-12 tolerance)."""
    for eps in (0.1, 0.5, 1.0, 3.0, 8.0):
        for delta in (1e-9, 1e-6, 1e-5, 1e-3):
            assert gaussian_epsilon(1.0 / _former(eps, delta), delta) <= eps * (1 + 1e-12) + 1e-12


def _former_projection_halfwidth(dim: int, scale: float, alpha: float) -> float:
    """The former ℓ2-Laplace projection half-width: scipy quad + brentq (rtol 1e-11)."""
    from scipy import integrate

    d = float(dim)
    log_norm = (math.log(0.5 * math.sqrt(math.pi)) + special.gammaln((d - 1.0) / 2.0)
                - special.gammaln(d / 2.0))

    def tail(t: float) -> float:
        if t <= 0.0:
            return 1.0
        x = t / scale

        def integrand(phi: float) -> float:
            cos, sin = math.cos(phi), math.sin(phi)
            if cos <= 0.0 or (sin <= 0.0 and dim > 2):
                return 0.0
            weight = math.exp((d - 2.0) * math.log(sin) - log_norm) if sin > 0.0 else \
                math.exp(-log_norm)
            return float(special.gammaincc(d, x / cos)) * weight

        points = sorted({min(max(math.acos(min(1.0, x / d)), 1e-9), math.pi / 2 - 1e-9),
                         max(math.pi / 2 - 1.0 / math.sqrt(d), 1e-9)})
        val, _ = integrate.quad(integrand, 0.0, math.pi / 2, points=points, limit=500,
                                epsabs=1e-14, epsrel=1e-11)
        return min(1.0, max(0.0, float(val)))

    hi = scale * float(special.gammainccinv(dim, alpha))
    return float(optimize.brentq(lambda t: tail(t) - alpha, 0.0, hi, xtol=1e-13 * hi,
                                 rtol=1e-11))


@pytest.mark.parametrize("dim", [2, 3, 5, 21, 64, 128, 129])
def test_projection_halfwidth_never_below_the_former_scipy_one(dim: int) -> None:
    """owl's accuracy half-width without scipy (≤ 128 dimensions): never narrower than the
    former scipy computation, wider by ≤ ~1e-9 relative; above 128 the former code itself."""
    from dpcausal.mechanisms.noise_law import l2_laplace_projection_halfwidth

    for alpha in (1e-6, 1e-3, 0.05, 0.3, 0.8):
        for scale in (0.01, 37.0):
            former = _former_projection_halfwidth(dim, scale, alpha)
            ours = l2_laplace_projection_halfwidth(dim, scale, alpha)
            assert former <= ours <= former * (1 + 2e-9), (dim, alpha, scale, ours / former - 1)
            if dim > 128:
                assert ours == former
