"""The Gaussian-process mechanism: parameters, event, calibration and path sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcausal.mechanisms import GaussianProcessMechanism, analytic_gaussian_sigma
from dpcausal.mechanisms.gaussian_process import classic_gp_constant, gaussian_kernel


def test_event_is_gaussian_process_with_the_classic_scale() -> None:
    mech = GaussianProcessMechanism(1.0, 1e-5, 0.2, bandwidth=0.5, stage="s")
    ev = mech.event()
    assert ev.kind == "gaussian_process" and ev.stage == "s" and ev.norm == "l2"
    assert ev.epsilon == 1.0 and ev.delta == 1e-5 and ev.sensitivity == 0.2
    assert ev.noise_scale == pytest.approx(0.2 * math.sqrt(2 * math.log(2 / 1e-5)))
    assert ev.params["bandwidth"] == 0.5 and ev.partition is None


@pytest.mark.parametrize(("eps", "delta"), [(9.0, 1e-2), (9.0, 1e-3), (10.5, 1e-7), (40.0, 1e-6)])
def test_classic_is_floored_by_the_exact_calibration_at_large_epsilon(eps: float, delta: float) -> None:
    mech = GaussianProcessMechanism(eps, delta, 1.0, bandwidth=1.0)
    exact = analytic_gaussian_sigma(eps, delta, 1.0)
    assert mech.sigma_classic < exact  # the classic constant is invalid here (spec amendment)
    assert mech.sigma == exact


@pytest.mark.parametrize(("eps", "delta"), [(0.5, 1e-5), (1.0, 1e-6), (5.0, 1e-5)])
def test_classic_is_the_paper_formula_where_valid(eps: float, delta: float) -> None:
    mech = GaussianProcessMechanism(eps, delta, 0.3, bandwidth=1.0)
    assert mech.sigma == pytest.approx(0.3 * classic_gp_constant(delta) / eps)
    analytic = GaussianProcessMechanism(eps, delta, 0.3, bandwidth=1.0, calibration="analytic")
    assert analytic.sigma <= mech.sigma


@pytest.mark.parametrize(
    "kwargs",
    [dict(epsilon=0.0), dict(delta=0.0), dict(delta=1.0), dict(rkhs_sensitivity=-1.0),
     dict(bandwidth=0.0), dict(calibration="fancy")],
)
def test_bad_parameters_are_refused(kwargs: dict) -> None:
    args = dict(epsilon=1.0, delta=1e-5, rkhs_sensitivity=0.1, bandwidth=1.0) | kwargs
    with pytest.raises(ValueError):  # noqa: PT011
        GaussianProcessMechanism(**args)


def test_gaussian_kernel_has_unit_diagonal_and_the_bandwidth() -> None:
    x = np.array([[0.0, 0.0], [0.3, 0.4]])
    k = gaussian_kernel(x, x, 0.5)
    assert np.allclose(np.diag(k), 1.0)
    assert k[0, 1] == pytest.approx(math.exp(-0.25 / (2 * 0.25)))


def test_points_and_gram_give_the_same_path_and_duplicates_share_noise() -> None:
    mech = GaussianProcessMechanism(1.0, 1e-5, 0.1, bandwidth=0.3)
    pts = np.random.default_rng(0).uniform(size=(12, 2))
    vals = np.arange(12.0)
    a = mech.release(vals, rng=np.random.default_rng(5), points=pts)
    b = mech.release(vals, rng=np.random.default_rng(5), gram=gaussian_kernel(pts, pts, 0.3))
    # np.unique reorders points, so the draws differ in order; both are valid single paths
    assert a.shape == b.shape == (12,)
    dup = np.vstack([pts, pts[:3]])
    out = mech.release(np.zeros(15), rng=np.random.default_rng(1), points=dup)
    assert np.array_equal(out[:3], out[12:])
    with pytest.raises(ValueError, match="exactly one"):
        mech.release(vals, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="1-d"):
        mech.release(np.zeros((2, 2)), rng=np.random.default_rng(0), points=pts[:2])


def test_release_adds_noise_around_the_values() -> None:
    mech = GaussianProcessMechanism(2.0, 1e-5, 1e-3, bandwidth=0.3)
    pts = np.linspace(0, 1, 20)[:, None]
    vals = np.sin(pts[:, 0])
    out = mech.release(vals, rng=np.random.default_rng(3), points=pts)
    assert np.max(np.abs(out - vals)) < 8 * mech.sigma
    assert not np.array_equal(out, vals)
