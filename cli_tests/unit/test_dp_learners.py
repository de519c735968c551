"""DP nuisance learners of cate: non-private fits equal references; sensitivity bounds hold."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, Ridge

from cli_tests.helpers import noise_for
from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.dp_logistic import DPLogistic, fit_logistic
from dpcausal.learners.dp_ridge import DPRidgeArms

BOX = BoxFeatures(np.array([0.0, -2.0, 0.0]), np.array([1.0, 2.0, 10.0]))


def _data(m: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(BOX.lo, BOX.hi, size=(m, 3))
    s = BOX.unit(x)
    a = (rng.uniform(size=m) < 1 / (1 + np.exp(-(2 * s[:, 0] - 1)))).astype(float)
    y = 2 * s[:, 1] + a * (1 + s[:, 2]) + rng.normal(0, 0.5, m)
    return x, a, y


def test_box_features_have_norm_at_most_one() -> None:
    x = np.array([[0.0, -2.0, 0.0], [1.0, 2.0, 10.0], [5.0, -9.0, 99.0]])
    xt = BOX.transform(x)
    assert np.all(np.linalg.norm(xt, axis=1) <= 1 + 1e-12)
    assert np.allclose(xt[1], 1 / 2) and np.allclose(xt[2], xt[1] * [1, 1, 0, 1] + [0, 0, 0, 0])


def test_logistic_matches_sklearn() -> None:
    x, a, _ = _data(400, 1)
    lam = 0.05
    theta = fit_logistic(BOX.transform(x), a, lam)
    ref = LogisticRegression(C=1 / (400 * lam), fit_intercept=False, tol=1e-12, max_iter=10_000)
    ref.fit(BOX.transform(x), a)
    assert np.allclose(theta, ref.coef_[0], atol=1e-6)


def test_ridge_arms_match_sklearn() -> None:
    x, a, y = _data(300, 2)
    learner = DPRidgeArms(BOX, 0.05, (-3.0, 6.0), 1.0, 1e-6, 300)
    theta = learner.fit_nonprivate(x, a, y)
    r = np.clip(y, -3, 6) - learner.center
    for arm in (0, 1):
        ref = Ridge(alpha=300 * 0.05, fit_intercept=False, tol=1e-12, solver="cholesky")
        ref.fit(BOX.transform(x), r, sample_weight=(a == arm).astype(float))
        assert np.allclose(theta[arm], ref.coef_, atol=1e-9)
    model = learner.model(theta)
    assert np.all((model.predict(x, 1) >= -3) & (model.predict(x, 1) <= 6))


def _neighbours(x, a, y, rng, n_trials):
    """Random and adversarial replace-one neighbours (corners, both arms, extreme outcomes)."""
    m = len(a)
    for t in range(n_trials):
        j = int(rng.integers(m))
        x2, a2, y2 = x.copy(), a.copy(), y.copy()
        if t % 2:
            x2[j] = np.where(rng.uniform(size=3) < 0.5, BOX.lo, BOX.hi)
            y2[j] = [-1e3, 1e3][t % 4 // 2]
        else:
            x2[j] = rng.uniform(BOX.lo, BOX.hi)
            y2[j] = rng.uniform(-3, 6)
        a2[j] = 1 - a[j] if t % 3 else a[j]
        yield x2, a2, y2


@pytest.mark.parametrize("lam", [0.01, 0.3])
def test_logistic_sensitivity_bound_holds(lam: float) -> None:
    x, a, y = _data(60, 3)
    learner = DPLogistic(BOX, lam, 1.0, 1e-6, 60)
    base = learner.fit_nonprivate(x, a)
    worst = max(np.linalg.norm(learner.fit_nonprivate(x2, a2) - base)
                for x2, a2, _ in _neighbours(x, a, y, np.random.default_rng(4), 120))
    assert 0 < worst <= learner.sensitivity
    assert worst > 0.05 * learner.sensitivity  # the bound is not vacuous


@pytest.mark.parametrize("lam", [0.01, 0.3])
def test_ridge_joint_sensitivity_bound_holds(lam: float) -> None:
    x, a, y = _data(60, 5)
    learner = DPRidgeArms(BOX, lam, (-3.0, 6.0), 1.0, 1e-6, 60)
    base = learner.fit_nonprivate(x, a, y)
    worst = max(np.linalg.norm(learner.fit_nonprivate(x2, a2, y2) - base)
                for x2, a2, y2 in _neighbours(x, a, y, np.random.default_rng(6), 120))
    assert 0 < worst <= learner.sensitivity


def test_released_models_are_noised_with_the_planned_sigma() -> None:
    x, a, _ = _data(200, 7)
    learner = DPLogistic(BOX, 0.05, 0.5, 1e-6, 200)
    base = learner.fit_nonprivate(x, a)
    draws = np.array([learner.fit(x, a, clip=0.05, noise=noise_for(learner.mechanism(), seed=i)
                                  ).theta - base for i in range(400)])
    assert draws.std() == pytest.approx(learner.mechanism().sigma, rel=0.08)
    model = learner.fit(x, a, clip=0.1, noise=noise_for(learner.mechanism(), seed=400))
    p = model.predict(x)
    assert p.min() >= 0.1 and p.max() <= 0.9
