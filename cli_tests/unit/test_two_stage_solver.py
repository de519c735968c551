"""Stage-2 solver of two-stage: exact KKT point of the ℓ₁-ball QP, versus independent solvers."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from dpcausal.commands.two_stage import exact_qp, solver
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


def _brute_force(p: list, c: list, l1: Fraction) -> list:
    """θ* by enumerating all 3^d active sets exactly (tiny d only)."""
    d = len(c)
    for signs in itertools.product([-1, 0, 1], repeat=d):
        theta = exact_qp.solve_candidate(p, c, l1, list(signs) if any(signs) else None)
        if theta is not None and exact_qp.is_minimiser(p, c, l1, theta):
            return theta
    raise AssertionError("no active set satisfies the KKT conditions")


def test_exact_dual_method_finds_the_minimiser_on_degenerate_problems() -> None:
    """Goldfarb–Idnani in exact arithmetic returns θ* (the unique KKT point, found by enumerating
    every active set) on random, collinear, tied and weakly active problems."""
    rng = np.random.default_rng(1)
    for trial in range(150):
        d = int(rng.integers(1, 5))
        x = rng.normal(size=(20, d))
        if trial % 5 == 0:
            x[:, 0] = x[:, -1]
        p = 2 * x.T @ x / 20 + float(rng.choice([1e-3, 0.1, 1.0])) * np.eye(d)
        c = rng.normal(size=d) * float(rng.choice([0.1, 1.0, 10.0, 1e6]))
        if trial % 7 == 0:
            p, c = np.eye(d), -np.round(np.abs(c)) - 1.0  # ties and zero-margin coordinates
        l1 = Fraction(float(rng.choice([0.01, 0.5, 2.0, 100.0])))
        pf, cf = exact_qp.matrix(p), exact_qp.vector(c)
        theta = exact_qp.dual_active_set(pf, cf, l1)
        assert theta == _brute_force(pf, cf, l1), trial


def test_weakly_active_coordinate_is_exact() -> None:
    """P = I, c = (−2, −1, 0), λ₁ = 1: θ* = (1, 0, 0) with |g₂| = μ (no strict complementarity)."""
    sol = solve_l1_ball_qp(np.eye(3), np.array([-2.0, -1.0, 0.0]), 1.0)
    assert sol.theta.tolist() == [1.0, 0.0, 0.0] and sol.constraint_active


@pytest.mark.parametrize("seed", range(4))
def test_a_failed_float_search_releases_the_same_exact_minimiser(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """When the float64 active-set search fails, the released θ is still θ* (bit for bit the
    verified one). On the old code it was the interior-point start projected on the ball, a point
    the privacy proof does not cover (docs/proofs/two_stage.md §6)."""
    (p, c), _ = _problem(seed, noise=30.0)
    sol = solve_l1_ball_qp(p, c, 0.5)
    assert sol.constraint_active and not sol.exact_dual
    exact = exact_qp.dual_active_set(exact_qp.matrix(p), exact_qp.vector(c), Fraction(0.5))
    assert sol.theta.tolist() == [float(v) for v in exact]
    monkeypatch.setattr(solver, "_kkt_ok", lambda *a, **k: False)
    fallback = solve_l1_ball_qp(p, c, 0.5)
    assert fallback.exact_dual
    assert fallback.theta.tolist() == sol.theta.tolist()


def test_a_wrong_float_candidate_is_caught_by_the_exact_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A float candidate that is not θ* (here: a wrong sign pattern) never reaches the release."""
    (p, c), _ = _problem(3, noise=30.0)
    right = solve_l1_ball_qp(p, c, 0.5)
    monkeypatch.setattr(solver, "_candidate", lambda *a: ([1] * len(c), 1))
    wrong = solve_l1_ball_qp(p, c, 0.5)
    assert wrong.exact_dual and wrong.theta.tolist() == right.theta.tolist()
