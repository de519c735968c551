"""The subset exponential mechanism (synth-control's private donor choice): its law and its loss.

Three arms: the draws follow P(S) ∝ exp(u(S)/T) at the true temperature and are rejected at 0.7×
and 1.3×; the exact loss of a one-item change is within ε, reaches it, and a doubled change
exceeds it (so an understated sensitivity shows).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from cli_tests.helpers import P_ACCEPT, P_REJECT, SCALE_FACTORS
from dpcausal.mechanisms import SubsetExponentialMechanism
from dpcausal.mechanisms._rng import noise_generator

pytestmark = pytest.mark.statistical


def exact_law(u: np.ndarray, k: int, temperature: float) -> dict[tuple[int, ...], float]:
    """P(S) by enumeration."""
    subsets = list(itertools.combinations(range(u.size), k))
    w = np.array([math.exp(float(u[list(s)].sum()) / temperature) for s in subsets])
    return dict(zip(subsets, w / w.sum(), strict=True))


def test_draws_follow_the_law_three_arms() -> None:
    u = np.array([0.0, -0.3, -1.1, 0.4, -0.6, -2.0])
    mech = SubsetExponentialMechanism(2.0, 1.0, 2, stage="s")
    draws = mech.release_many(u, 30_000, rng=noise_generator(11))
    assert np.all(draws.sum(axis=1) == 2)
    seen: dict[tuple[int, ...], int] = {}
    for row in draws:
        key = tuple(int(i) for i in np.flatnonzero(row))
        seen[key] = seen.get(key, 0) + 1
    pvalues = {}
    for factor in SCALE_FACTORS:
        law = exact_law(u, 2, factor * mech.temperature)
        observed = np.array([seen.get(s, 0) for s in law])
        expected = np.array(list(law.values())) * len(draws)
        pvalues[factor] = float(stats.chisquare(observed, expected).pvalue)
    assert pvalues[1.0] > P_ACCEPT, pvalues
    assert pvalues[0.7] < P_REJECT and pvalues[1.3] < P_REJECT, pvalues


def test_inclusion_probabilities_match_enumeration() -> None:
    rng = np.random.default_rng(2)
    for n, k in [(5, 1), (6, 3), (7, 7), (8, 2)]:
        u = rng.normal(0, 1, n)
        mech = SubsetExponentialMechanism(1.5, 0.7, k, stage="s")
        inc = np.zeros(n)
        for s, p in exact_law(u, k, mech.temperature).items():
            inc[list(s)] += p
        np.testing.assert_allclose(mech.inclusion_probabilities(u), inc, rtol=1e-10)


def exact_loss(u: np.ndarray, v: np.ndarray, k: int, temperature: float) -> float:
    a, b = exact_law(u, k, temperature), exact_law(v, k, temperature)
    return max(abs(math.log(a[s]) - math.log(b[s])) for s in a)


def test_exact_loss_of_one_item_is_within_epsilon_and_attained() -> None:
    rng = np.random.default_rng(3)
    eps, delta_u = 1.3, 0.5
    worst = 0.0
    for _ in range(400):
        n = int(rng.integers(2, 7))
        k = int(rng.integers(1, n + 1))
        mech = SubsetExponentialMechanism(eps, delta_u, k, stage="s")
        u = rng.normal(0, 2, n)
        v = u.copy()
        v[rng.integers(n)] += rng.uniform(-delta_u, delta_u) if rng.uniform() < 0.5 else (
            delta_u * rng.choice([-1.0, 1.0]))
        loss = mech.selection_loss(mech.temperature, k, u, v)
        assert loss == pytest.approx(exact_loss(u, v, k, mech.temperature), abs=1e-9)
        assert loss <= eps * (1 + 1e-12)
        worst = max(worst, loss)
    # a rarely chosen item raised by Δ: the subsets holding it gain ε, Z barely moves
    mech = SubsetExponentialMechanism(eps, delta_u, 2, stage="s")
    u = np.array([0.0, 0.0, 0.0, -60.0])
    v = u.copy()
    v[3] += delta_u
    assert mech.selection_loss(mech.temperature, 2, u, v) == pytest.approx(eps, rel=1e-6)
    v[3] += delta_u  # an understated sensitivity (the item moved 2Δ): the loss exceeds ε
    assert mech.selection_loss(mech.temperature, 2, u, v) > 1.9 * eps
    assert worst > 0.5 * eps


def test_event_and_registry_round_trip() -> None:
    from dpcausal.mechanisms.registry import check_event, release_curve

    mech = SubsetExponentialMechanism(0.8, 2.0, 3, stage="synth_control.donor_choice")
    ev = mech.event()
    assert (ev.kind, ev.norm, ev.noise_scale, ev.params["k"]) == (
        "subset_exponential", "utility", 2.5, 3)
    check = check_event(ev)
    assert check.explains(ev) and check.epsilon == pytest.approx(0.8)
    assert release_curve(ev).epsilon(0.0) == pytest.approx(0.8)


def test_refuses_bad_parameters() -> None:
    with pytest.raises(ValueError, match="k must be"):
        SubsetExponentialMechanism(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="> 0"):
        SubsetExponentialMechanism(1.0, 0.0, 2)
    mech = SubsetExponentialMechanism(1.0, 1.0, 3)
    with pytest.raises(ValueError, match="cannot choose"):
        mech.release(np.zeros(2), rng=noise_generator(0))
    with pytest.raises(ValueError, match="finite"):
        mech.release(np.array([0.0, np.nan, 1.0]), rng=noise_generator(0))


def joint_exact_loss(ua: np.ndarray, ub: np.ndarray, k: int, temperature: float) -> float:
    """max over joint outputs of |Σ_i log-ratio_i|, by enumeration."""
    los, his = [], []
    for a, b in zip(ua, ub, strict=True):
        la, lb = exact_law(a, k, temperature), exact_law(b, k, temperature)
        ratios = [math.log(la[s]) - math.log(lb[s]) for s in la]
        los.append(min(ratios))
        his.append(max(ratios))
    return max(sum(his), -sum(los))


def test_subset_family_loss_within_epsilon_under_its_relation() -> None:
    """One selection moves every utility (≤ Δ each), every other moves one utility (≤ Δ): the
    exact joint loss is within ε; a family moved beyond the relation (two full rows) can exceed."""
    from dpcausal.mechanisms import SubsetSelectionFamily

    rng = np.random.default_rng(5)
    eps, delta_u = 1.0, 0.4
    for _ in range(150):
        m, pool = int(rng.integers(1, 4)), int(rng.integers(2, 5))
        k = int(rng.integers(1, pool + 1))
        fam = SubsetSelectionFamily(eps, delta_u, k, m, stage="f")
        u = rng.normal(0, 1, (m, pool))
        v = u.copy()
        j = int(rng.integers(m))
        v[j] += rng.uniform(-delta_u, delta_u, pool)
        for i in range(m):
            if i != j:
                v[i, rng.integers(pool)] += rng.choice([-1.0, 1.0]) * delta_u
        loss = fam.family_loss(fam.temperature, k, u, v)
        assert loss == pytest.approx(joint_exact_loss(u, v, k, fam.temperature), abs=1e-9)
        assert loss <= eps * (1 + 1e-12)
    fam = SubsetSelectionFamily(eps, delta_u, 1, 2, stage="f")  # factor 2k + m − 1 = 3
    u = np.array([[0.0, -50.0], [0.0, -50.0]])
    v = u + np.array([[0.0, 3 * delta_u], [0.0, 3 * delta_u]])  # outside the relation
    assert fam.family_loss(fam.temperature, 1, u, v) > eps
    draws = fam.release_many(np.zeros((2, 3)), 100, rng=noise_generator(1))
    assert draws.shape == (100, 2, 3) and np.all(draws.sum(axis=2) == 1)
