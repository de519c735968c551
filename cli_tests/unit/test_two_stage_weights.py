"""Stage-1 weights of two-stage: simplex, exactness (KKT), balance improvement, errors."""

from __future__ import annotations

import numpy as np
import pytest

from dpcausal.commands.two_stage import weights as wts
from dpcausal.errors import SolverError


def _confounded(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.clip(rng.normal(size=(n, 4)), -2.0, 2.0) / 2.0
    logit = 1.2 * x[:, 0] - 1.0 * x[:, 1] + 0.3
    a = rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-logit))
    return x, a


def smd(x: np.ndarray, a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """|weighted mean difference| / pooled unweighted sd, per covariate (test-only diagnostic)."""
    m1 = np.average(x[a], axis=0, weights=w[a])
    m0 = np.average(x[~a], axis=0, weights=w[~a])
    sd = np.sqrt(0.5 * (x[a].var(axis=0) + x[~a].var(axis=0)))
    return np.abs(m1 - m0) / sd


def _in_simplex(w: np.ndarray) -> None:
    assert np.all(w >= 0)
    assert w.sum() == pytest.approx(len(w), rel=1e-12)


def test_ipw_rct_two_values() -> None:
    a = np.array([True] * 3 + [False] * 7)
    w = wts.ipw_rct_weights(a, 0.3)
    _in_simplex(w)
    assert len(set(w[a])) == 1
    assert len(set(w[~a])) == 1
    assert w[a][0] / w[~a][0] == pytest.approx(0.7 / 0.3)


def test_ipw_known_true_model_improves_balance() -> None:
    x, a = _confounded(4000, seed=2)
    w = wts.ipw_from_scores(a, 1.2 * x[:, 0] - 1.0 * x[:, 1] + 0.3)
    _in_simplex(w)
    assert smd(x, a, w)[:2].max() < 0.5 * smd(x, a, np.ones(4000))[:2].max()


def test_ipw_known_is_arm_specific() -> None:
    score = np.array([0.5, 0.5, -1.0])
    a = np.array([True, False, True])
    w = wts.ipw_from_scores(a, score)
    u = np.array([1 + np.exp(-0.5), 1 + np.exp(0.5), 1 + np.exp(1.0)])
    assert np.allclose(w, 3 * u / u.sum())


def test_ipw_logit_kkt_and_ball() -> None:
    x, a = _confounded(600)
    feats = np.hstack([np.ones((600, 1)), x])
    w = wts.ipw_logit_weights(a, feats, radius=10.0, ridge=0.01)
    _in_simplex(w)
    # with a tight ball the constraint is active and the solution lies on the sphere
    lam_tight = None

    def fit(radius: float) -> np.ndarray:
        from scipy import optimize, special

        def f(lam: np.ndarray) -> tuple[float, np.ndarray]:
            z = feats @ lam
            val = np.mean(np.logaddexp(0, z) - a * z) + 0.005 * lam @ lam
            return val, feats.T @ (special.expit(z) - a) / 600 + 0.01 * lam

        cons = {"type": "ineq", "fun": lambda lam: radius**2 - lam @ lam}
        res = optimize.minimize(lambda v: f(v)[0], np.zeros(5), jac=lambda v: f(v)[1],
                                constraints=[cons], method="SLSQP",
                                options={"ftol": 1e-14, "maxiter": 500})
        return res.x

    lam_tight = fit(0.3)
    ref = wts.ipw_from_scores(a, feats @ lam_tight)
    got = wts.ipw_logit_weights(a, feats, radius=0.3, ridge=0.01)
    assert np.allclose(got, ref, atol=1e-5)
    assert smd(x, a, w)[:2].max() < smd(x, a, np.ones(600))[:2].max()


@pytest.mark.parametrize("arm_totals", ["equal", "sample"])
def test_ebw_balances_and_totals(arm_totals: str) -> None:
    x, a = _confounded(800, seed=3)
    g = np.hstack([np.ones((800, 1)), x])
    w = wts.ebw_weights(a, g, kappa=0.2, m_g=np.sqrt(5), radius=20.0, ridge=1e-4,
                        arm_totals=arm_totals)
    _in_simplex(w)
    before, after = smd(x, a, np.ones(800)), smd(x, a, w)
    assert after.max() < 0.05 < before.max()
    if arm_totals == "equal":
        assert w[a].sum() == pytest.approx(400.0)


def test_ebw_interior_kkt_identity() -> None:
    """At an interior optimum Σ(w_i/n) b_i − (ḡ, ḡ) = −λ_EBW·λ* (spec §1.4), so imbalance ≤ λ_EBW·R."""
    x, a = _confounded(300, seed=5)
    g = np.hstack([np.ones((300, 1)), x])
    rows = wts.ebw_rows(a, g, 0.2, np.sqrt(5))
    w = wts.ebw_weights(a, g, kappa=0.2, m_g=np.sqrt(5), radius=50.0, ridge=0.5,
                        arm_totals="sample")
    target = np.concatenate([0.2 / np.sqrt(5) * g.mean(0)] * 2)
    imbalance = rows.T @ (w / 300) - target
    assert np.linalg.norm(imbalance) <= 0.5 * 50.0


def test_mmd_simplex_box_and_balance() -> None:
    x, a = _confounded(300, seed=7)
    w = wts.mmd_weights(a, x, bandwidth=1.0, alpha=0.5, ridge=1e-4, box=10.0)
    _in_simplex(w)
    assert w[a].sum() == pytest.approx(150.0)
    assert w.max() <= 5.0 + 1e-9
    assert smd(x, a, w)[:2].max() < smd(x, a, np.ones(300))[:2].max()


def test_mmd_infeasible_is_an_error() -> None:
    x, a = _confounded(100)
    a = np.zeros(100, dtype=bool)
    a[:5] = True
    with pytest.raises(SolverError, match="infeasible"):
        wts.mmd_weights(a, x, bandwidth=1.0, alpha=0.5, ridge=1.0, box=5.0)


def test_mmd_matches_cvxpy_reference() -> None:
    cp = pytest.importorskip("cvxpy")
    x, a = _confounded(120, seed=11)
    got = wts.mmd_weights(a, x, bandwidth=0.8, alpha=0.3, ridge=1e-3, box=8.0)
    n = 120
    i1, i0 = np.flatnonzero(a), np.flatnonzero(~a)
    order = np.concatenate([i0, i1])
    k = wts.rbf_kernel(x[order], x[order], 0.8)
    n0 = len(i0)
    q = k.copy()
    q[:n0, n0:] *= -0.7
    q[n0:, :n0] *= -0.7
    lin = -2 * 0.3 / n**2 * k.sum(1)
    w = cp.Variable(n)
    obj = cp.quad_form(w, cp.psd_wrap(q / n**2)) + lin @ w + 0.5e-3 * cp.sum_squares(w)
    cons = [w >= 0, w <= 8.0, cp.sum(w[:n0]) == n, cp.sum(w[n0:]) == n]
    cp.Problem(cp.Minimize(obj), cons).solve(solver=cp.CLARABEL)
    ref = np.empty(n)
    ref[order] = 0.5 * w.value
    assert np.allclose(got, ref, atol=1e-5)
