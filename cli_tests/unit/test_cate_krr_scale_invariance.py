"""Both second stages (exact kernel, random features) are invariant to the outcome scale (review
of issue 13's solver): scaling ρ-weighted pseudo-outcomes by a power of two scales every Newton
iterate exactly, so the certified Newton result must be the same, bit for bit, times that power —
not the guaranteed fallback because the line search's objective overflowed (|r|² > 1.8e308 once
|r| ≳ 1.3e154) or underflowed to 0 (which disables the damping and lets the active set cycle).
The random-feature solver's line-search sums cross engine batches and its certificate and
projection take 2-norms, which overflowed the same way (review5)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from cli_tests.unit.test_engine_cate import ListEngine
from dpcausal.commands.cate import krr
from dpcausal.commands.cate.krr_accuracy import KrrAccuracy
from dpcausal.commands.cate.rff import FourierFeatures, guaranteed_descent, solve_rff
from dpcausal.commands.cate.rff_accuracy import RffAccuracy, feature_error
from dpcausal.solvers.backend import InMemory


def _problem(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.uniform(size=(n, 2))
    rho = rng.uniform(0.0, 0.9, n)
    phi = np.sin(4.0 * s[:, 0]) + rng.standard_cauchy(n)
    return s, rho, phi


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("power", [600, -600])
@pytest.mark.parametrize("lam0", [1e-3, 1e-1])
def test_newton_is_exactly_scale_equivariant(squared: bool, power: int, lam0: float) -> None:
    """On the old code, at 2**600 (≈ 4e180) the objective is inf/nan, every line search shrinks the
    step to 1e-8 and Newton never certifies: all such runs took the public fallback (slow: N·n²)."""
    n, h = 60, 0.5
    s, rho, phi = _problem(5, n)
    scale = 2.0 ** power
    c = None if squared else 0.5
    lw = 2.0 * float(np.max(rho * np.abs(phi))) if squared else 2.0 * 0.5 * 0.9
    base_acc = KrrAccuracy(n, 2, h, lam0, lw, squared)
    scaled_acc = KrrAccuracy(n, 2, h, lam0, lw * scale, squared)
    assert base_acc.problem() is None and scaled_acc.problem() is None
    base = krr.fit_krr(s, rho, phi, bandwidth=h, lam0=lam0, huber_c=c, accuracy=base_acc)
    assert base.iterations <= 100  # Newton certified at the unit scale
    scaled = krr.fit_krr(s, rho, phi * scale, bandwidth=h, lam0=lam0,
                         huber_c=None if c is None else c * scale, accuracy=scaled_acc)
    assert scaled.iterations == base.iterations
    np.testing.assert_array_equal(scaled.alpha, base.alpha * scale)


@pytest.mark.parametrize("squared", [False, True])
def test_rff_newton_is_exactly_scale_equivariant(squared: bool) -> None:
    from dpcausal.commands.cate.rff import fit_rff_streaming

    n, h, lam0, m = 60, 0.5, 1e-2, 32
    s, rho, phi = _problem(5, n)
    scale = 2.0 ** 600
    feats = FourierFeatures.draw(2, m, h, 0)
    c = None if squared else 0.5
    lw = 2.0 * float(np.max(rho * np.abs(phi))) if squared else 2.0 * 0.5 * 0.9
    fe = feature_error(feats.omega)
    base_acc = RffAccuracy(n, 2 * m, lam0, lw, squared, fe)
    scaled_acc = RffAccuracy(n, 2 * m, lam0, lw * scale, squared, fe)
    assert base_acc.problem() is None and scaled_acc.problem() is None
    base = fit_rff_streaming(feats, s, rho, phi, lam0=lam0, huber_c=c, accuracy=base_acc)
    scaled = fit_rff_streaming(feats, s, rho, phi * scale, lam0=lam0,
                               huber_c=None if c is None else c * scale, accuracy=scaled_acc)
    assert scaled.iterations == base.iterations
    np.testing.assert_array_equal(scaled.w, base.w * scale)


def _rff_problem(squared: bool, scale: float, lam0: float = 1e-2) -> tuple[Any, ...]:
    n, h, m = 60, 0.5, 32
    s, rho, phi = _problem(5, n)
    feats = FourierFeatures.draw(2, m, h, 0)
    c = None if squared else 0.5
    lw = 2.0 * float(np.max(rho * np.abs(phi))) if squared else 2.0 * 0.5 * 0.9
    acc = RffAccuracy(n, 2 * m, lam0, lw * scale, squared, feature_error(feats.omega))
    assert acc.problem() is None
    return feats, s, rho, phi * scale, lam0, None if c is None else c * scale, acc


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("power", [600, -600])
def test_rff_engine_newton_is_exactly_scale_equivariant(squared: bool, power: int) -> None:
    """review5: on the engine path the line search's loss sums (added across batches), its
    s²J and the certificate's norms overflowed at 2^600 (every solve fell back) and underflowed
    at 2^−600; now the batched solve takes the same steps and passes at every scale."""
    runs = []
    for scale in (1.0, 2.0**power):
        feats, s, rho, phi, lam0, c, acc = _rff_problem(squared, scale)
        cuts = [0, 7, 8, 31, s.shape[0]]  # uneven batches, one of a single row
        engine = ListEngine([(a, (s[a:b], rho[a:b], phi[a:b]))
                             for a, b in itertools.pairwise(cuts)])
        fit = solve_rff(engine, feats, n=s.shape[0], lam0=lam0, huber_c=c, accuracy=acc, rows=16)
        runs.append((fit, engine.passes))
    (base, base_passes), (scaled, scaled_passes) = runs
    assert base.iterations < 20  # Newton certified at the unit scale
    assert (scaled.iterations, scaled_passes) == (base.iterations, base_passes)
    np.testing.assert_array_equal(scaled.w, base.w * 2.0**power)
    assert scaled.grad_norm == base.grad_norm * 2.0**power


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("power", [600, -600])
def test_rff_fallback_is_exactly_scale_equivariant(squared: bool, power: int) -> None:
    """review5: the guaranteed fallback's projection onto the ball R took ‖w‖ unscaled, which is
    ∞ once ‖w‖ ≳ 1.3e154, and so projected every iterate to w = 0 (a result nowhere near the
    minimiser); its steps must be those of the unit scale, times the scale."""
    fits = []
    for scale in (1.0, 2.0**power):
        feats, s, rho, phi, lam0, c, acc = _rff_problem(squared, scale, lam0=0.3)
        start = np.full(feats.dim, 10.0 * acc.radius)  # outside the ball: the first step projects
        fits.append(guaranteed_descent(InMemory((s, rho, phi), s.shape[0]), feats, start,
                                       n=s.shape[0], lam0=lam0, huber_c=c, accuracy=acc))
    base, scaled = fits
    assert float(np.linalg.norm(base.w)) > 0.0
    assert scaled.iterations == base.iterations
    np.testing.assert_array_equal(scaled.w, base.w * 2.0**power)


def test_huber_value_does_not_square_residuals_beyond_c() -> None:
    """A residual far outside c entered r·r in the branch np.where discards: an overflow (a
    RuntimeWarning on stderr) although ℓ_c(r) = 2c|r| − c² is finite."""
    c = 1e-100
    r = np.array([-3e200, 5e-101, 2e200])
    with np.errstate(all="raise"):
        value = krr.huber_value(r, c)
    np.testing.assert_array_equal(value, [2.0 * c * 3e200 - c * c, 5e-101 * 5e-101,
                                          2.0 * c * 2e200 - c * c])


@pytest.mark.parametrize("power", [-528, -600])
def test_rff_certificate_refuses_a_gradient_whose_squares_underflow(power: int) -> None:
    """review5, a false certificate: ‖ĝ‖ was computed unscaled, so at outcome scales ≲ 1e-158
    (outcome bounds a CLI spec accepts) a gradient 100× the stop tolerance had squares that
    underflowed to 0 and was accepted: the solve returned a point ~1e4–1e6·d* from the minimiser
    (w = 0 before any step at 2^−600), outside the τ/λ0 the sensitivity adds."""
    feats, *_, acc = _rff_problem(False, 2.0**power)
    grad = np.zeros(feats.dim)
    grad[:4] = 100.0 * acc.stop_tol
    assert not acc.accepts(np.zeros(feats.dim), grad)
    assert acc.accepts(np.zeros(feats.dim), grad * 1e-3)
