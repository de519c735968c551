"""Public rounding bounds of the nuisance learners (issue #13, finding 2).

* The a priori error bound of the ridge's Cholesky solve holds against exact rational arithmetic.
* Property tests per learner: random and adversarial neighbour pairs at extreme public scales
  (outcome ranges 1e-6 … 1e9, also far from 0; tiny and huge penalties) — the plan either refuses
  (a function of the public settings alone, the same for both neighbours) or both fits succeed,
  and the stated sensitivity holds.
* Sums are blocked and added exactly rounded, so the bounds do not grow with the row count.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpcausal.commands.owl.estimate import fit_nonprivate
from dpcausal.commands.owl.setup import build_setup, prepare
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.learners import CertifiedLogistic, CertifiedRidge
from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.dp_logistic import DPLogistic
from dpcausal.learners.dp_ridge import DPRidgeArms
from dpcausal.learners.rounding import (
    SUM_CHUNK,
    LogisticAccuracy,
    block_total,
    effective_half_range,
    exact_total,
)

BOX = BoxFeatures(np.zeros(3), np.ones(3))
RANGES = [(0.0, 1e-6), (0.0, 1.0), (0.0, 1e9), (-1e9, 1e9), (1e9, 1e9 + 1e-6)]
PENALTIES = [1e-12, 1e-6, 1e-3, 0.05, 1e4]


def _exact_solve(h: list[list[Fraction]], b: list[Fraction]) -> list[Fraction]:
    """Gaussian elimination in exact rationals."""
    n = len(b)
    a = [[*row, b[i]] for i, row in enumerate(h)]
    for k in range(n):
        piv = next(i for i in range(k, n) if a[i][k] != 0)
        a[k], a[piv] = a[piv], a[k]
        for i in range(k + 1, n):
            f = a[i][k] / a[k][k]
            for j in range(k, n + 1):
                a[i][j] -= f * a[k][j]
    x = [Fraction(0)] * n
    for i in reversed(range(n)):
        x[i] = (a[i][n] - sum(a[i][j] * x[j] for j in range(i + 1, n))) / a[i][i]
    return x


@pytest.mark.parametrize(("lo", "hi", "lam"), [(0.0, 1e9, 1e-6), (1e9, 1e9 + 1e-6, 0.05),
                                               (-1e9, 1e9, 1e-9), (0.0, 1.0, 1e-11)])
def test_ridge_solution_is_within_the_a_priori_bound_of_the_exact_minimiser(
        lo: float, hi: float, lam: float) -> None:
    rng = np.random.default_rng(0)
    m = 40
    x = rng.uniform(size=(m, 3))
    a = (rng.uniform(size=m) < 0.5).astype(float)
    y = rng.uniform(lo, hi, m)
    learner = DPRidgeArms(BOX, lam, (lo, hi), 1.0, 1e-6, m)
    assert learner.problem() is None
    theta = learner.fit_nonprivate(x, a, y)
    xt, r = BOX.transform(x), learner.residuals(y)
    assert np.all(np.abs(r) <= learner.half_range)
    for arm in (0, 1):
        rows = [i for i in range(m) if a[i] == arm]
        p = xt.shape[1]
        h = [[sum((Fraction(float(xt[i, j])) * Fraction(float(xt[i, k])) for i in rows),
                  Fraction(0)) / m + (Fraction(lam) if j == k else 0) for k in range(p)]
             for j in range(p)]
        b = [sum((Fraction(float(r[i])) * Fraction(float(xt[i, j])) for i in rows), Fraction(0))
             / m for j in range(p)]
        exact = np.array([float(v) for v in _exact_solve(h, b)])
        err = float(np.linalg.norm(theta[arm] - exact))
        assert err <= learner.solve_error, (err, learner.solve_error)


def _pairs(m: int, lo: float, hi: float, rng: np.random.Generator, k: int):
    """k neighbour pairs: random rows, and a row moved to a corner with an extreme outcome."""
    x = rng.uniform(size=(m, 3))
    a = (rng.uniform(size=m) < 0.5).astype(float)
    y = rng.uniform(lo, hi, m)
    for t in range(k):
        j = int(rng.integers(m))
        x2, a2, y2 = x.copy(), a.copy(), y.copy()
        if t % 2:
            x2[j] = rng.choice([0.0, 1.0], 3)
            y2[j] = hi if y[j] < 0.5 * (lo + hi) else lo
        else:
            x2[j], y2[j] = rng.uniform(size=3), rng.uniform(lo, hi)
        a2[j] = 1.0 - a[j] if t % 3 else a[j]
        yield (x, a, y), (x2, a2, y2)


@pytest.mark.parametrize(("lo", "hi"), RANGES)
@pytest.mark.parametrize("lam", PENALTIES)
def test_dp_ridge_neighbours_at_extreme_scales(lo: float, hi: float, lam: float) -> None:
    learner = DPRidgeArms(BOX, lam, (lo, hi), 1.0, 1e-6, 50)
    if learner.problem() is not None:  # the plan refuses from public settings: both alike
        return
    rng = np.random.default_rng(int(lam * 1e3) % 97)
    for (x, a, y), (x2, a2, y2) in _pairs(50, lo, hi, rng, 6):
        moved = np.linalg.norm(learner.fit_nonprivate(x, a, y) - learner.fit_nonprivate(x2, a2, y2))
        assert moved <= learner.sensitivity


@pytest.mark.parametrize("lam", PENALTIES)
def test_dp_logistic_neighbours_at_extreme_penalties(lam: float) -> None:
    learner = DPLogistic(BOX, lam, 1.0, 1e-6, 50)
    if learner.problem() is not None:
        assert lam < 1e-4  # only penalties below the public step-budget threshold are refused
        return
    rng = np.random.default_rng(3)
    for (x, a, _), (x2, a2, _) in _pairs(50, 0.0, 1.0, rng, 6):
        moved = np.linalg.norm(learner.fit_nonprivate(x, a) - learner.fit_nonprivate(x2, a2))
        assert moved <= learner.sensitivity


def _sup_cube(dtheta: np.ndarray) -> float:
    return float(abs(dtheta[0]) + np.abs(dtheta[1:]).sum())


@pytest.mark.parametrize(("lo", "hi"), RANGES)
@pytest.mark.parametrize("lam", PENALTIES)
def test_certified_learners_neighbours_at_extreme_scales(lo: float, hi: float, lam: float) -> None:
    m, d = 60, 3
    ridge = CertifiedRidge(lam, (lo, hi), (lo, hi))
    logit = CertifiedLogistic(lam, 0.1)
    rng = np.random.default_rng(5)
    for (x, a, y), (x2, a2, y2) in _pairs(m, lo, hi, rng, 4):
        xt = np.hstack([np.ones((m, 1)), 2 * x - 1])
        xt2 = np.hstack([np.ones((m, 1)), 2 * x2 - 1])
        if ridge.problem(d) is None:
            f1, f2 = ridge.fit(xt, a.astype(np.int8), y), ridge.fit(xt2, a2.astype(np.int8), y2)
            for arm in (0, 1):  # sup over the cube of |Δμ| before clipping ≥ after clipping
                assert _sup_cube(f1.theta[arm] - f2.theta[arm]) <= ridge.beta(m, d)
        if logit.problem(m, d) is None:
            g1, g2 = logit.fit(xt, a == 1), logit.fit(xt2, a2 == 1)
            assert 0.25 * _sup_cube(g1.theta - g2.theta) <= logit.beta(m, d)


def test_extreme_ranges_far_from_zero_widen_the_centred_bound_honestly() -> None:
    """Two adjacent floats at 10⁹ as outcome bounds: fl(lo + hi)/2 rounds onto hi, so a clipped
    outcome at lo sits a whole ulp (= 2h) from the computed centre. The bound on the centred
    outcome as computed includes the centre's rounding (and is attained)."""
    lo = float(np.nextafter(1e9, 2e9))
    hi = float(np.nextafter(lo, 2e9))
    c = 0.5 * (lo + hi)
    worst = max(abs(float(np.clip(v, lo, hi)) - c) for v in (lo, hi))
    assert worst > 0.5 * (hi - lo)
    assert worst <= effective_half_range(lo, hi)


def test_sums_are_blocked_and_exactly_rounded() -> None:
    """The learners' sums never run over more than SUM_CHUNK rows, and the blocks' partial sums
    are added exactly rounded: blocks summing to 1, 2⁻⁵³, 2⁻⁵³, 2⁻⁵³ give the correctly rounded
    1 + 2⁻⁵¹, where adding them in turn would give 1."""
    vals = np.zeros(4 * SUM_CHUNK)
    vals[::SUM_CHUNK] = [1.0, 2.0**-53, 2.0**-53, 2.0**-53]
    seen = []

    def stat(rows: slice) -> float:
        seen.append(rows.stop - rows.start)
        return float(vals[rows].sum())

    total = block_total(stat, len(vals))
    assert max(seen) <= SUM_CHUNK
    assert total == math.fsum(vals) == 1.0 + 2.0**-51
    assert sum([stat(slice(i, i + SUM_CHUNK)) for i in range(0, len(vals), SUM_CHUNK)]) == 1.0
    pair = exact_total([(np.array([1.0, 2.0]), 1.0), (np.array([2.0**-53, 0.0]), 2.0**-53),
                        (np.array([2.0**-53, 0.0]), 2.0**-53)])
    assert pair[0][0] == 1.0 + 2.0**-52 and pair[1] == 1.0 + 2.0**-52


def test_logistic_certificate_tolerance_is_never_below_its_rounding_allowance() -> None:
    """The old absolute 1e-10 was below the float rounding of the gradient for large m or R; the
    stopping tolerance is now at least 4× the public allowance, whatever the requested one."""
    for m, p, r in [(10, 2, 1.0), (10**7, 21, math.sqrt(21)), (10**9, 51, math.sqrt(51))]:
        acc = LogisticAccuracy(m, p, r, 0.05, 1e-300)
        assert acc.stop_tol >= 4 * acc.grad_allowance > 0
        assert acc.distance == pytest.approx((acc.stop_tol + acc.grad_allowance) / 0.05)


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 1e-6), (-1e9, 1e9), (1e9, 1e9 + 1e-6)])
@pytest.mark.parametrize("gamma", [1e-6, 1.0, 1e6])
def test_owl_neighbours_at_extreme_scales(lo: float, hi: float, gamma: float) -> None:
    """owl's tolerance is relative to the public weight bound W, so neighbours at extreme outcome
    ranges and penalties both solve (no refusal) and stay within Δ = (2W + 2τ)/γ."""
    spec = OwlSpec.model_validate({
        "data": {"path": "t.csv", "columns": {"outcome": "B", "treatment": "A",
                                              "covariates": ["x1", "x2"]}},
        "bounds": {"outcome": [lo, hi], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 1.0}, "owl": {"treated": 1, "propensity": 0.5, "gamma": gamma}})
    setup = build_setup(spec)
    rng = np.random.default_rng(11)
    for t in range(4):
        frame = pd.DataFrame({"x1": rng.uniform(size=30), "x2": rng.uniform(size=30),
                              "A": rng.integers(0, 2, 30), "B": rng.uniform(lo, hi, 30)})
        other = frame.copy()
        other.loc[t, ["x1", "x2", "A", "B"]] = [1.0, 1.0, 1 - int(frame.loc[t, "A"]),
                                                 hi if t % 2 else lo]
        fits = [fit_nonprivate(setup, prepare(spec, setup, f, None), gamma)
                for f in (frame, other)]
        assert np.linalg.norm(fits[0] - fits[1]) <= setup.sensitivity(gamma, len(frame))
