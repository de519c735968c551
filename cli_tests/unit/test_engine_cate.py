"""cate's engine passes against the in-memory solvers: the RFF Huber ridge (damped steps, rows
entering and leaving the inside set), the DP logistic Newton and the ridge sufficient statistics."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from dpcausal.commands.cate import engine as engine_cate
from dpcausal.commands.cate import rff as cate_rff
from dpcausal.commands.cate import rff_pass
from dpcausal.commands.cate.rff import FourierFeatures, fit_rff_streaming, solve_rff
from dpcausal.commands.cate.rff_accuracy import RffAccuracy, feature_error
from dpcausal.engine import split
from dpcausal.engine.base import tree_add
from dpcausal.learners.dp_logistic import fit_logistic
from dpcausal.learners.dp_ridge import fit_ridge_arms, solve_ridge_arms

CUTS = [0, 100, 101, 450, 1003]
"""Uneven batches, one of a single row."""


class ListEngine:
    """The Engine protocol over in-memory batches (``map_sum``/``map_list`` in row order)."""

    def __init__(self, parts: list[tuple[int, Any]]) -> None:
        self.parts = parts
        self.passes = 0
        self.n_rows = sum(p[0].shape[0] for _, p in parts)

    def map_sum(self, stat: Any) -> Any:
        self.passes += 1
        total = None
        for start, part in self.parts:
            total = tree_add(total, stat(part, start))
        return total

    def map_list(self, stat: Any) -> list[Any]:
        self.passes += 1
        return [stat(part, start) for start, part in self.parts]


def _batches(*arrays: np.ndarray) -> ListEngine:
    return ListEngine([(a, tuple(x[a:b] for x in arrays)) for a, b in itertools.pairwise(CUTS)])


def _accuracy(feats: FourierFeatures, n: int, lam0: float, lipschitz_w: float,
              squared: bool = False) -> RffAccuracy:
    return RffAccuracy(n, feats.dim, lam0, lipschitz_w, squared, feature_error(feats.omega))


def test_engine_rff_solver_equals_the_in_memory_solver_with_damped_steps(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(11)
    n = CUTS[-1]
    feats = FourierFeatures.draw(3, 40, 0.5, seed=12)
    s = rng.uniform(size=(n, 3))
    rho = rng.uniform(0.05, 0.9, n)
    phi = 3.0 * rng.standard_cauchy(n)
    lam0, c = 1e-4, 0.05
    acc = _accuracy(feats, n, lam0, 2.0 * c)
    ref = fit_rff_streaming(feats, s, rho, phi, lam0=lam0, huber_c=c, accuracy=acc)
    signs: list[float] = []
    real = rff_pass._add_gram

    def spy(acc: np.ndarray, z: np.ndarray, w: np.ndarray, sign: float, **kw: Any) -> None:
        signs.append(sign)
        real(acc, z, w, sign, **kw)

    monkeypatch.setattr(rff_pass, "_add_gram", spy)
    engine = _batches(s, rho, phi)
    fit = solve_rff(engine, feats, n=n, lam0=lam0, huber_c=c, accuracy=acc, rows=37)
    # both certified: each within d* of the minimiser (the float32 Newton systems of different
    # partitions differ in rounding, so the iterates need not agree bit for bit; issue 24)
    assert np.linalg.norm(fit.w - ref.w) <= 2.0 * acc.target
    assert fit.grad_norm <= acc.stop_tol
    assert engine.passes > fit.iterations + 1  # some steps were damped (one extra pass each)
    assert -1.0 in signs and 1.0 in signs  # rows left and entered the Huber inside set
    # the certificate is the gradient over every row at the returned w, recomputed here
    z = feats.transform(s)
    r = z @ fit.w - phi
    grad = z.T @ (rho * 2.0 * np.clip(r, -c, c)) / n + 2.0 * lam0 * fit.w
    assert np.linalg.norm(grad) <= acc.tol


@pytest.mark.parametrize("huber_c", [None, 1.5])
def test_engine_rff_solver_squared_and_wide_huber(huber_c: float | None) -> None:
    rng = np.random.default_rng(3)
    n = CUTS[-1]
    feats = FourierFeatures.draw(2, 25, 0.4, seed=4)
    s, rho, phi = rng.uniform(size=(n, 2)), rng.uniform(0.05, 0.9, n), rng.normal(0, 3, n)
    acc = _accuracy(feats, n, 0.01, 40.0 if huber_c is None else 2.0 * huber_c, huber_c is None)
    ref = fit_rff_streaming(feats, s, rho, phi, lam0=0.01, huber_c=huber_c, accuracy=acc)
    fit = solve_rff(_batches(s, rho, phi), feats, n=n, lam0=0.01, huber_c=huber_c, accuracy=acc)
    assert np.linalg.norm(fit.w - ref.w) <= 2.0 * acc.target  # both certified (issue 24)
    assert fit.grad_norm <= acc.stop_tol and ref.grad_norm <= acc.stop_tol


@pytest.mark.parametrize("failure", ["iterations", "not-positive-definite"])
def test_rff_solver_falls_back_within_the_target_when_newton_cannot_certify(
    monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """Issue 13: the solver raised SolverError (exit 2 after the data was read) when Newton missed
    its tolerance or a system was not positive definite. Now the guaranteed fallback runs its
    public number of steps (early exit disabled here) and ends within d* of the minimiser."""
    rng = np.random.default_rng(5)
    n = CUTS[-1]
    feats = FourierFeatures.draw(2, 10, 0.4, seed=4)
    s, rho, phi = rng.uniform(size=(n, 2)), rng.uniform(0.05, 0.9, n), rng.normal(0, 3, n)
    acc = _accuracy(feats, n, 0.05, 0.02)
    ref = fit_rff_streaming(feats, s, rho, phi, lam0=0.05, huber_c=0.01, accuracy=acc)
    assert ref.iterations < cate_rff.NEWTON_ITER and ref.grad_norm <= acc.stop_tol
    if failure == "iterations":
        monkeypatch.setattr(cate_rff, "NEWTON_ITER", 1)
    else:
        monkeypatch.setattr(cate_rff, "_newton_direction", lambda lhs, rhs: None)
    monkeypatch.setattr(RffAccuracy, "accepts", lambda self, w, grad: False)
    engine = _batches(s, rho, phi)
    fit = solve_rff(engine, feats, n=n, lam0=0.05, huber_c=0.01, accuracy=acc)
    assert fit.iterations == acc.steps and engine.passes >= acc.steps
    # ref is within d* of w* by its certificate, the fallback by the contraction bound
    assert float(np.linalg.norm(fit.w - ref.w)) <= 2.0 * acc.target
    assert acc.steps < 2000 and acc.target < 1e-6


def test_nuisance_passes_equal_the_in_memory_learners() -> None:
    rng = np.random.default_rng(7)
    n, d = CUTS[-1], 3
    xt = rng.uniform(size=(n, d)) / np.sqrt(d)
    a = (rng.uniform(size=n) < 0.3).astype(float)
    y = rng.uniform(-1, 9, n)
    engine = _batches(xt, a, y)
    for l2 in (1e-3, 0.05):
        theta = engine_cate.fit_propensity(engine, n, d, l2)
        np.testing.assert_allclose(theta, fit_logistic(xt, a, l2), rtol=0, atol=1e-12)
    grams, rhs = engine.map_sum(lambda p, s: engine_cate.ridge_sums(p, s, center=4.0, d=d))
    np.testing.assert_allclose(solve_ridge_arms(grams, rhs, n, 0.05),
                               fit_ridge_arms(xt, a, y - 4.0, 0.05), rtol=0, atol=1e-12)


def test_the_split_is_the_in_memory_permutation_by_global_row_index() -> None:
    """Any cut of the rows into batches selects the same D̃ rows as the in-memory split."""
    from cli_tests.unit.test_cate_method import make_spec
    from dpcausal.commands.cate.estimate import halves
    from dpcausal.commands.cate.setup import build_setup

    spec = make_spec(features="rff", split={"kind": "seeded", "seed": 3}, first_half_fraction=0.4)
    setup = build_setup(spec, 1237)
    bits = engine_cate.nuisance_mask(spec, setup)
    expected = np.zeros(1237, dtype=bool)
    expected[halves(spec, setup)[0]] = True
    for cuts in ([0, 1237], [0, 1, 9, 17, 640, 1000, 1237], [*range(0, 1237, 13), 1237]):
        got = np.concatenate([split.members(bits, a, b - a)
                              for a, b in itertools.pairwise(cuts)])
        np.testing.assert_array_equal(got, expected)
    assert expected.sum() == setup.n_nuisance
