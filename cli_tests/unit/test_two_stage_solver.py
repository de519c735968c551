"""Stage-2 solver of two-stage: exact KKT point of the ℓ₁-ball QP, versus independent solvers."""

from __future__ import annotations

import numpy as np
import pytest

from dpcausal.commands.two_stage.solver import (
    qp_terms,
    solve_l1_ball_qp,
    stage2_objective,
    sufficient_stats,
)


def _problem(seed: int, n: int = 300, d: int = 6, gamma: float = 1e-3, noise: float = 0.0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, d)) / np.sqrt(d)
    t = x @ rng.normal(0, 5, size=d) + rng.normal(size=n)
    w = rng.uniform(0.2, 3.0, size=n)
    w *= n / w.sum()
    b = rng.normal(0, noise, size=d)
    h, g = sufficient_stats(x, t, w)
    return qp_terms(h, g, n, gamma, b), (x, t, w, b, gamma)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("l1", [0.05, 0.5, 3.0, 1e3])
def test_matches_clarabel_and_kkt(seed: int, l1: float) -> None:
    cp = pytest.importorskip("cvxpy")
    (p, c), _ = _problem(seed, noise=50.0 * (seed % 3))
    sol = solve_l1_ball_qp(p, c, l1)
    assert np.abs(sol.theta).sum() <= l1 * (1 + 1e-9)
    th = cp.Variable(len(c))
    cp.Problem(cp.Minimize(0.5 * cp.quad_form(th, cp.psd_wrap(p)) + c @ th),
               [cp.norm1(th) <= l1]).solve(solver=cp.CLARABEL)
    ref = np.asarray(th.value)
    assert stage2_objective(sol.theta, p, c) <= stage2_objective(ref, p, c) + 1e-9
    assert np.allclose(sol.theta, ref, atol=1e-5 * max(1.0, np.abs(ref).max()))


def test_matches_sklearn_when_unconstrained() -> None:
    """Large λ₁, γ → 0: the weighted least-squares fit (scikit-learn, sample_weight = w)."""
    linear_model = pytest.importorskip("sklearn.linear_model")
    (p, c), (x, t, w, _b, _g) = _problem(1, gamma=1e-12)
    sol = solve_l1_ball_qp(p, c, 1e6)
    ref = linear_model.LinearRegression(fit_intercept=False).fit(x, t, sample_weight=w).coef_
    assert np.allclose(sol.theta, ref, atol=1e-6)
    assert not sol.constraint_active


def test_objective_definition() -> None:
    """½θᵀPθ + cᵀθ equals (1/n)Σw(t − xθ)² + γ/2‖θ‖² + bθ/n up to a constant."""
    (p, c), (x, t, w, b, gamma) = _problem(2, noise=3.0)
    n = len(t)

    def f(theta: np.ndarray) -> float:
        return float(np.mean(w * (t - x @ theta) ** 2) + 0.5 * gamma * theta @ theta + b @ theta / n)

    rng = np.random.default_rng(0)
    th1, th2 = rng.normal(size=6), rng.normal(size=6)
    assert f(th1) - f(th2) == pytest.approx(
        stage2_objective(th1, p, c) - stage2_objective(th2, p, c), rel=1e-10)
