"""The certified multinomial logistic learner (K ≥ 3 arms, spec select_policy §2.9): the reference
solution, the projection, the public solve certificate and the replace-one stability bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from dpcausal.learners.multinomial import CertifiedMultinomial, multinomial_sums


def _data(rng: np.random.Generator, m: int, d: int, k: int = 3
          ) -> tuple[np.ndarray, np.ndarray]:
    x = rng.uniform(-1.0, 1.0, (m, d))
    logits = np.column_stack([x[:, j % d] * (j - 1.0) for j in range(k)])
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    a = (rng.uniform(size=(m, 1)) > np.cumsum(p, 1)).sum(1)
    return np.hstack([np.ones((m, 1)), x]), a


@pytest.mark.parametrize("lam", [50.0, 1.0, 0.01])
def test_equals_sklearn_with_every_entry_penalised(lam: float) -> None:
    """(1/m)Σ loss + (λ/2)‖Θ‖²_F is scikit-learn's multinomial loss with C = 1/(mλ) and the
    intercept as a penalised feature."""
    rng = np.random.default_rng(1)
    m, d = 800, 4
    xt, a = _data(rng, m, d)
    fit = CertifiedMultinomial(lam, 0.05, 3).fit(xt, a)
    ref = LogisticRegression(C=1.0 / (m * lam), fit_intercept=False, tol=1e-12,
                             max_iter=10_000).fit(xt, a)
    np.testing.assert_allclose(fit.theta, ref.coef_, atol=1e-6)
    _, g, _ = multinomial_sums(xt, a, 3, fit.theta.reshape(-1))
    acc = CertifiedMultinomial(lam, 0.05, 3).accuracy(m, d)
    assert np.linalg.norm(g / m + lam * fit.theta.reshape(-1)) <= acc.stop_tol * 1.01


def test_gradient_and_hessian_sums_match_finite_differences() -> None:
    rng = np.random.default_rng(2)
    xt, a = _data(rng, 50, 2, k=4)
    th = rng.normal(size=4 * 3)
    loss, g, h = multinomial_sums(xt, a, 4, th)
    step = 1e-6
    for j in range(th.size):
        e = np.zeros_like(th)
        e[j] = step
        lp, gp, _ = multinomial_sums(xt, a, 4, th + e)
        lm, gm, _ = multinomial_sums(xt, a, 4, th - e)
        assert (lp - lm) / (2 * step) == pytest.approx(g[j], rel=1e-5, abs=1e-6)
        np.testing.assert_allclose((gp - gm) / (2 * step), h[:, j], rtol=1e-5, atol=1e-6)
    assert loss > 0


def test_projection_into_the_floored_simplex() -> None:
    rng = np.random.default_rng(3)
    xt, a = _data(rng, 300, 3, k=4)
    fit = CertifiedMultinomial(1e-3, 0.1, 4).fit(xt, a)
    far = np.hstack([np.ones((50, 1)), rng.uniform(-60, 60, (50, 3))])
    p = fit.predict(far)
    assert p.shape == (50, 4)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    assert p.min() >= 0.1 - 1e-15
    assert p.max() <= 1 - 3 * 0.1 + 1e-15
    # ζ = 1/K: the projection is the constant 1/K and β_e = 0
    flat = CertifiedMultinomial(1.0, 0.25, 4)
    np.testing.assert_allclose(flat.fit(xt, a).predict(far), 0.25, atol=1e-15)
    assert flat.beta(300, 3) == 0.0


def test_public_settings_refuse_before_any_row() -> None:
    assert CertifiedMultinomial(50.0, 0.1, 3).problem(1000, 20) is None
    problem = CertifiedMultinomial(1e-9, 0.1, 3).problem(1000, 20)
    assert problem is not None and "is needed" in problem
    with pytest.raises(ValueError, match="zeta"):
        CertifiedMultinomial(1.0, 0.4, 3)
    with pytest.raises(ValueError, match="K >= 3"):
        CertifiedMultinomial(1.0, 0.1, 2)


def test_beta_closed_form() -> None:
    """β_e = √2(1 − Kζ)R_x²/(mλ) plus the solver slack (1 − Kζ)R_x·D (spec §2.9)."""
    lrn = CertifiedMultinomial(50.0, 0.1, 3)
    m, d = 1500, 20
    rx2 = d + 1
    slack = (1 - 0.3) * np.sqrt(rx2) * lrn.accuracy(m, d).distance
    assert lrn.beta(m, d) == pytest.approx(np.sqrt(2) * 0.7 * rx2 / (m * 50.0) + slack,
                                           rel=1e-12)
    assert slack < 1e-6 * lrn.beta(m, d)


@pytest.mark.statistical
def test_replace_one_neighbour_search_never_exceeds_the_bounds() -> None:
    """Every replace-one neighbour (corners of the box, every arm: arm switches included) moves
    Θ̂ by ≤ 2G/(mλ) + 2D and every projected propensity, at every corner, by ≤ β_e; the worst
    pair found reaches a good fraction of both (the bound is not vacuous)."""
    rng = np.random.default_rng(4)
    k, d = 3, 2
    corners = np.array(list(itertools.product([-1.0, 1.0], repeat=d)))
    ct = np.hstack([np.ones((len(corners), 1)), corners])
    worst_param = worst_pred = 0.0
    for m, lam in ((40, 10.0), (60, 1.0)):
        xt = np.hstack([np.ones((m, 1)), rng.choice([-1.0, 1.0], (m, d))])
        a = rng.integers(0, k, m)
        lrn = CertifiedMultinomial(lam, 0.05, k)
        base = lrn.fit(xt, a)
        p0 = base.predict(ct)
        c = lrn.constants(d)
        param = 2 * c["G"] / (m * lam) + 2 * lrn.accuracy(m, d).distance
        for i in rng.choice(m, 6, replace=False):
            for row in ct:
                for arm in range(k):
                    x2, a2 = xt.copy(), a.copy()
                    x2[i], a2[i] = row, arm
                    fit = lrn.fit(x2, a2)
                    dparam = float(np.linalg.norm(fit.theta - base.theta))
                    dpred = float(np.abs(fit.predict(ct) - p0).max())
                    assert dparam <= param
                    assert dpred <= lrn.beta(m, d)
                    worst_param = max(worst_param, dparam / param)
                    worst_pred = max(worst_pred, dpred / lrn.beta(m, d))
    print(f"worst Θ move {worst_param:.3f} of 2G/(mλ); worst propensity move {worst_pred:.3f} "
          "of β_e")
    assert worst_param >= 0.35
    assert worst_pred >= 0.15
