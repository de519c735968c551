"""Unit tests of the mechanisms' parameters, events and calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from dpcausal.mechanisms import (
    ExponentialMechanism,
    GaussianMechanism,
    L2LaplaceMechanism,
    LaplaceMechanism,
    analytic_gaussian_sigma,
)
from dpcausal.mechanisms._rng import noise_generator
from dpcausal.mechanisms.gaussian import classic_gaussian_sigma


@pytest.mark.parametrize("eps", [0.0, -1.0, math.inf, math.nan])
def test_every_mechanism_refuses_bad_epsilon(eps: float) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        LaplaceMechanism(eps, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        L2LaplaceMechanism(eps, 1.0, 3)
    with pytest.raises(ValueError, match="epsilon"):
        ExponentialMechanism(eps, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        GaussianMechanism(eps, 1e-6, 1.0)


def test_bad_sensitivity_dim_delta_refused() -> None:
    with pytest.raises(ValueError, match="sensitivity"):
        LaplaceMechanism(1.0, -1.0)
    with pytest.raises(ValueError, match="dim"):
        L2LaplaceMechanism(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="delta"):
        GaussianMechanism(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="epsilon < 1"):
        GaussianMechanism(1.5, 1e-6, 1.0, calibration="classic")


def test_mechanisms_are_frozen() -> None:
    mech = LaplaceMechanism(1.0, 2.0)
    with pytest.raises(AttributeError):
        mech.epsilon = 5.0  # type: ignore[misc]


def test_events_state_cost_and_scale() -> None:
    ev = LaplaceMechanism(0.5, 2.0, stage="s").event()
    assert (ev.kind, ev.stage, ev.epsilon, ev.delta, ev.sensitivity, ev.norm, ev.noise_scale) == (
        "laplace", "s", 0.5, 0.0, 2.0, "l1", 4.0)
    ev = L2LaplaceMechanism(2.0, 3.0, 5).event()
    assert ev.noise_scale == 1.5 and ev.params["dim"] == 5 and ev.params["expected_noise_norm"] == 7.5
    ev = ExponentialMechanism(1.0, 2.0).event()
    assert ev.noise_scale == 4.0 and ev.norm == "utility"
    assert ExponentialMechanism(1.0, 2.0, monotonic=True).temperature == 2.0


@pytest.mark.parametrize(("eps", "delta"), [(0.1, 1e-5), (1.0, 1e-6), (3.0, 1e-9), (8.0, 1e-3)])
def test_analytic_gaussian_sigma_is_tight_and_safe(eps: float, delta: float) -> None:
    sigma = analytic_gaussian_sigma(eps, delta, 1.0)

    def achieved(s: float) -> float:
        a, b = 1.0 / (2 * s), eps * s
        return float(special.ndtr(a - b) - math.exp(eps) * special.ndtr(-a - b))

    assert achieved(sigma) <= delta  # safe: never less noise than needed
    assert achieved(sigma * (1 - 1e-6)) > delta * (1 - 1e-3) or achieved(sigma * 0.999) > delta
    if eps < 1:
        assert sigma <= classic_gaussian_sigma(eps, delta, 1.0)


def test_analytic_gaussian_known_value() -> None:
    # Balle & Wang (2018): ε = 1, δ = 1e-5, Δ = 1 gives σ ≈ 3.73.
    assert analytic_gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(3.7306, abs=1e-3)
    # Scale equivariance in Δ.
    assert analytic_gaussian_sigma(1.0, 1e-5, 7.0) == pytest.approx(
        7 * analytic_gaussian_sigma(1.0, 1e-5, 1.0), rel=1e-9)


def test_exponential_probabilities_and_validation() -> None:
    mech = ExponentialMechanism(2.0, 1.0)
    p = mech.probabilities([0.0, 1.0, 2.0])
    assert p.sum() == pytest.approx(1.0)
    assert p[2] / p[1] == pytest.approx(math.exp(2.0 * 1.0 / 2.0))
    with pytest.raises(ValueError, match="finite"):
        mech.release([0.0, math.nan], rng=np.random.default_rng(0))


def test_l2_laplace_refuses_wrong_shape() -> None:
    with pytest.raises(ValueError, match="shape"):
        L2LaplaceMechanism(1.0, 1.0, 3).release(np.zeros(4), rng=np.random.default_rng(0))


def test_noise_generator_unseeded_differs_and_seeded_repeats() -> None:
    # privacy noise comes from ChaCha20 (a CSPRNG), full 20 rounds, never from PCG64
    gen = noise_generator()
    assert type(gen.bit_generator).__name__ == "ChaCha"
    assert gen.bit_generator.state["state"]["rounds"] == 20
    assert type(noise_generator(3).bit_generator).__name__ == "ChaCha"
    a = noise_generator().standard_normal(4)
    b = noise_generator().standard_normal(4)
    assert not np.array_equal(a, b)
    assert np.array_equal(noise_generator(3).standard_normal(4), noise_generator(3).standard_normal(4))
