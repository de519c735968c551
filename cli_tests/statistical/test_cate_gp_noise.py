"""Noise law of the Gaussian-process mechanism (three-arm KS, covariance) and its privacy profile."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from cli_tests.helpers import assert_three_arm, ks_three_arm
from dpcausal.mechanisms import GaussianProcessMechanism
from dpcausal.mechanisms.gaussian_process import gaussian_kernel

pytestmark = pytest.mark.statistical

PTS = np.random.default_rng(11).uniform(size=(15, 2))
H = 0.4


def _whitener(gram: np.ndarray) -> np.ndarray:
    """K^{-1/2} by eigendecomposition (independent of the mechanism's Cholesky)."""
    w, v = np.linalg.eigh(gram)
    return (v / np.sqrt(w)) @ v.T


@pytest.mark.parametrize("calibration", ["classic", "analytic"])
def test_gp_noise_law_three_arm(calibration: str) -> None:
    mech = GaussianProcessMechanism(1.0, 1e-5, 0.05, bandwidth=H, calibration=calibration)
    rng = np.random.default_rng(12)
    gram = gaussian_kernel(PTS, PTS, H)
    vals = np.linspace(-1, 1, len(PTS))
    draws = np.array([mech.release(vals, rng=rng, gram=gram) - vals for _ in range(800)])
    chol = mech.noise_cholesky(gram)  # covariance K + τI (τ: the jitter, ~1e-9)
    white = draws @ _whitener(chol @ chol.T).T
    pvals = ks_three_arm(white.ravel(), lambda x, s: stats.norm.cdf(x / s), mech.sigma)
    assert_three_arm(pvals)


def test_gp_noise_covariance_is_sigma_squared_k0() -> None:
    mech = GaussianProcessMechanism(0.8, 1e-6, 0.1, bandwidth=H)
    rng = np.random.default_rng(13)
    pts = PTS[:8]
    gram = gaussian_kernel(pts, pts, H)
    draws = np.array([mech.release(np.zeros(8), rng=rng, gram=gram) for _ in range(10_000)])
    emp = np.cov(draws.T)
    target = mech.sigma**2 * gram
    assert np.linalg.norm(emp - target) / np.linalg.norm(target) < 0.05


def _delta_of(mu: float, eps: float) -> float:
    """Balle–Wang privacy profile of a Gaussian mechanism with Mahalanobis shift μ."""
    return float(special.ndtr(mu / 2 - eps / mu) - math.exp(eps) * special.ndtr(-mu / 2 - eps / mu))


def test_gp_neighbour_privacy_profile_for_an_rkhs_shift() -> None:
    # Two functions at RKHS distance exactly Δ: f_D = 0, f_D' = Δ·k0(·, c) (‖k0(·,c)‖ = 1).
    eps, delta, sens = 1.0, 1e-3, 0.2
    mech = GaussianProcessMechanism(eps, delta, sens, bandwidth=H)
    c = np.array([[0.5, 0.5]])
    pts = np.vstack([c, PTS[:5]])
    shift = sens * gaussian_kernel(pts, c, H)[:, 0]
    gram = gaussian_kernel(pts, pts, H)
    mu = float(np.linalg.norm(_whitener(mech.sigma**2 * gram + 1e-12 * np.eye(6)) @ shift))
    assert mu <= sens / mech.sigma * (1 + 1e-6)
    assert _delta_of(mu, eps) <= delta
    # empirically: the worst event {projection onto the shift direction > t}
    rng = np.random.default_rng(14)
    a = np.array([mech.release(np.zeros(6), rng=rng, gram=gram) for _ in range(20_000)])
    b = np.array([mech.release(shift, rng=rng, gram=gram) for _ in range(20_000)])
    u = np.linalg.solve(mech.sigma**2 * gram + 1e-12 * np.eye(6), shift)
    pa, pb = a @ u, b @ u
    for t in np.quantile(pb, [0.5, 0.8, 0.95]):
        assert np.mean(pb > t) <= math.exp(eps) * np.mean(pa > t) + delta + 5e-3
