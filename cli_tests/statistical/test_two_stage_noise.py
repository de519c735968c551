"""Noise law of two-stage's objective perturbation, recovered from released θ (interior solutions).

For an interior solution Pθ + c = 0, so b = 2g − n·Pθ... exactly: b = n·(2g/n − Pθ) where P, g are
the (test-only, non-private) stage-2 statistics. ‖b‖ must follow Gamma(p, 1/β) (Gamma-norm noise)
and each coordinate N(0, σ²) (Gaussian); three-arm KS: true scale passes, 0.7× and 1.3× fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from cli_tests.helpers import assert_three_arm, ks_three_arm
from cli_tests.unit.test_two_stage_method import frame, make_spec
from dpcausal.commands.two_stage import plan as ts_plan
from dpcausal.commands.two_stage.calibration import calibrate
from dpcausal.commands.two_stage.privacy import mechanism, stability_bounds
from dpcausal.commands.two_stage.setup import build_setup, prepare
from dpcausal.commands.two_stage.solver import qp_terms, sufficient_stats
from dpcausal.commands.two_stage.stage1 import compute_weights
from dpcausal.commands.two_stage.stage2 import fit_theta
from dpcausal.mechanisms._rng import noise_generator

pytestmark = pytest.mark.statistical


def _recovered_noise(noise: str, delta: float, draws: int) -> tuple[np.ndarray, float]:
    spec = make_spec(weights="ipw-rct", l1_radius=50.0, epsilon=2.0, noise=noise, delta=delta,
                     gamma=1e4)
    n = 60
    df = frame(n, seed=2)
    plan = ts_plan.plan(spec, n, {}, rng=np.random.default_rng(0))
    setup = build_setup(spec)
    data = prepare(spec, setup, df, None)
    w = compute_weights(spec, setup, data)
    bounds = stability_bounds(spec, setup, n)
    cal = calibrate(n=n, dim=setup.fmap.dim, m_x=1.0, m_inf=setup.m_inf, m_y=setup.m_y,
                    l1_radius=setup.l1_radius,
                    epsilon=2.0, delta=delta, eps_split=0.5, noise=noise, bounds=bounds,
                    mode="safe")
    assert cal.scale == pytest.approx(plan.details["noise_scale"])
    gamma = float(plan.details["gamma"])
    h, g = sufficient_stats(data.x, data.t, w)
    p, _ = qp_terms(h, g, n, gamma, np.zeros(setup.fmap.dim))
    noise_rng = noise_generator(12345)
    out = []
    for _ in range(draws):
        mech = mechanism(spec, cal, setup.fmap.dim)
        b = mech.release(np.zeros(setup.fmap.dim), rng=noise_rng)
        theta = fit_theta(setup, data, w, gamma, b)
        out.append(2.0 * g - n * (p @ theta))
    return np.array(out), cal.scale


def test_gamma_norm_law() -> None:
    b, scale = _recovered_noise("gamma", 0.0, 3000)
    dim = b.shape[1]
    norms = np.linalg.norm(b, axis=1)
    pv = ks_three_arm(norms, lambda x, s: stats.gamma.cdf(x, a=dim, scale=s), scale)
    assert_three_arm(pv)
    # direction uniform on the sphere: mean direction ≈ 0
    dirs = b / norms[:, None]
    assert np.abs(dirs.mean(axis=0)).max() < 0.08


def test_gaussian_law() -> None:
    b, sigma = _recovered_noise("gaussian", 1e-6, 1500)
    pv = ks_three_arm(b.ravel(), lambda x, s: stats.norm.cdf(x, scale=s), sigma)
    assert_three_arm(pv)
