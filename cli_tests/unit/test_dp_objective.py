"""The objective-perturbation logistic learner (dpcausal/learners/dp_objective.py): its noise law,
the key inequalities of its privacy proof, its certificate, and its use by cate's ATE."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import special, stats

from cli_tests.helpers import assert_three_arm, ks_three_arm
from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.dp_objective import (
    SMOOTHNESS,
    ObjectiveLogistic,
    PerturbedAccuracy,
    chi_norm_bound,
    noise_sigma,
    solve_perturbed,
)
from dpcausal.mechanisms import NoiseGuard


def _box(q: int) -> BoxFeatures:
    return BoxFeatures(np.zeros(q), np.ones(q), centered=True)


def _data(m: int, q: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (m, q))
    a = rng.binomial(1, special.expit(2.0 * (x[:, 0] - 0.5)))
    return x, a.astype(float)


def _guard(learner: ObjectiveLogistic, seed: int) -> NoiseGuard:
    plan = SimpleNamespace(events=(learner.objective().event(), learner.output().event()))
    return NoiseGuard(plan, test_seed=seed)  # type: ignore[arg-type]


def _grad(theta: np.ndarray, x: np.ndarray, a: float) -> np.ndarray:
    return (special.expit(x @ theta) - a) * x


def test_the_noise_vector_recovered_from_released_models_has_the_claimed_law() -> None:
    # b = −(Σ∇ℓ_i(θ*) + Δθ*) exactly at the minimiser; the released θ̃ is within D + the tiny
    # output noise of it, so b recovered from θ̃ is b up to ~1e-3 σ: its law is N(0, σ²)
    learner = ObjectiveLogistic(_box(3), 1.0, 1e-3, 120)
    x, a = _data(120, 3, 0)
    xt = learner.features.transform(x)
    draws = []
    for seed in range(1500):
        theta = learner.fit(x, a, clip=0.0, noise=_guard(learner, seed)).theta
        g = xt.T @ (special.expit(xt @ theta) - a)
        draws.append(-(g + learner.penalty * theta))
    sample = np.concatenate(draws)
    pv = ks_three_arm(sample, lambda v, s: stats.norm.cdf(v, scale=s), learner.sigma)
    assert_three_arm(pv)


@pytest.mark.parametrize("seed", range(5))
def test_a_records_gradient_change_is_at_most_2_and_in_the_span_of_the_two_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    box = _box(4)
    corners = box.transform(rng.integers(0, 2, (50, 4)).astype(float))
    rows = np.vstack([box.transform(rng.uniform(0, 1, (50, 4))), corners])
    for _ in range(400):
        i, j = rng.integers(0, len(rows), 2)
        a, a2 = rng.integers(0, 2, 2)
        theta = rng.normal(0, 30, 5)
        w = _grad(theta, rows[i], a) - _grad(theta, rows[j], a2)
        assert np.linalg.norm(w) <= 2.0
        basis = np.column_stack([rows[i], rows[j]])
        coef = np.linalg.lstsq(basis, w, rcond=None)[0]
        assert np.linalg.norm(basis @ coef - w) <= 1e-12 * max(1.0, np.linalg.norm(w))


@pytest.mark.parametrize("eps", [0.2, 1.0, 4.0])
def test_the_jacobian_ratio_never_exceeds_e_to_the_jacobian_epsilon(eps: float) -> None:
    learner = ObjectiveLogistic(_box(4), eps, 1e-6, 30)
    delta_pen = learner.penalty
    bound = math.exp(learner.epsilon_jacobian)
    assert 1.0 + SMOOTHNESS / delta_pen == pytest.approx(bound, rel=1e-12)
    rng = np.random.default_rng(1)
    box = learner.features
    worst = 0.0
    for _ in range(300):
        x = box.transform(rng.integers(0, 2, (29, 4)).astype(float) if rng.random() < 0.5
                          else rng.uniform(0, 1, (29, 4)))
        theta = rng.normal(0, 3, 5) * (rng.random() < 0.5)  # θ = 0 maximises σ(1 − σ)
        s = special.expit(x @ theta)
        base = (x * (s * (1 - s))[:, None]).T @ x + delta_pen * np.eye(5)
        z, z2 = box.transform(rng.integers(0, 2, (2, 4)).astype(float))
        zeta = special.expit(z @ theta)
        zeta2 = special.expit(z2 @ theta)
        d1 = np.linalg.slogdet(base + zeta * (1 - zeta) * np.outer(z, z))[1]
        d2 = np.linalg.slogdet(base + zeta2 * (1 - zeta2) * np.outer(z2, z2))[1]
        worst = max(worst, abs(d1 - d2))
    assert worst <= math.log(bound) + 1e-12
    # attained: one corner row at θ = 0 against the penalty alone (det(ΔI + βzzᵀ)/det(ΔI))
    corner = box.transform(np.ones((1, 4)))[0]
    one = np.linalg.slogdet(delta_pen * np.eye(5) + SMOOTHNESS * np.outer(corner, corner))[1]
    assert one - 5 * math.log(delta_pen) == pytest.approx(math.log(bound), rel=1e-6)


def test_the_noise_terms_loss_exceeds_its_epsilon_at_most_with_probability_delta() -> None:
    # the exact privacy loss ln p_D(θ*)/p_D′(θ*) at the released minimiser, for a corner
    # neighbour pair, over many draws of b: the share above ε_J + ε_b is at most δ_b
    delta = 0.05
    learner = ObjectiveLogistic(_box(2), 1.0, delta, 25)
    x, a = _data(25, 2, 3)
    xt = learner.features.transform(x)
    z2 = learner.features.transform(np.array([[1.0, 0.0]]))[0]
    a2 = 1.0 - a[-1]
    big = learner.penalty
    acc = learner.accuracy
    rng = np.random.default_rng(5)
    eps1 = learner.epsilon_jacobian + learner.epsilon_noise
    losses = []
    basis = np.linalg.qr(np.column_stack([xt[-1], z2]))[0]  # the span V of the two rows
    for _ in range(4000):
        b = rng.normal(0, learner.sigma, 3)
        theta = solve_perturbed(xt, a, b, acc)
        w = _grad(theta, xt[-1], a[-1]) - _grad(theta, z2, a2)
        bd = -(xt.T @ (special.expit(xt @ theta) - a) + big * theta)
        noise_loss = (np.sum((bd + w) ** 2) - np.sum(bd**2)) / (2 * learner.sigma**2)
        s = special.expit(xt @ theta)
        h = (xt[:-1] * (s[:-1] * (1 - s[:-1]))[:, None]).T @ xt[:-1] + big * np.eye(3)
        s2 = special.expit(z2 @ theta)
        jac = (np.linalg.slogdet(h + s[-1] * (1 - s[-1]) * np.outer(xt[-1], xt[-1]))[1]
               - np.linalg.slogdet(h + s2 * (1 - s2) * np.outer(z2, z2))[1])
        # the proof's pointwise steps: the noise term ≤ (2‖P_V b‖·‖w‖ + ‖w‖²)/(2σ²), the Jacobian
        # term ≤ ε_J (a wrong w, span or penalty breaks these on some draw)
        pv_b = float(np.linalg.norm(basis.T @ bd))
        wn = float(np.linalg.norm(w))
        assert noise_loss <= (2 * pv_b * wn + wn**2) / (2 * learner.sigma**2) * (1 + 1e-9) + 1e-12
        assert abs(jac) <= learner.epsilon_jacobian * (1 + 1e-9)
        losses.append(noise_loss + jac)
    share = float(np.mean(np.asarray(losses) > eps1))
    assert share <= 0.8 * delta
    assert np.max(losses) > 0.3 * eps1  # the check is not vacuous


def test_noise_sigma_solves_the_loss_equation_and_the_truncation_bound_holds() -> None:
    for eps, dlt in ((0.1, 1e-8), (1.0, 1e-6), (5.0, 1e-3)):
        s = noise_sigma(eps, dlt)
        c = math.sqrt(2 * math.log(1 / dlt))
        assert 2 * c / s + 2 / s**2 == pytest.approx(eps, rel=1e-10)
    rng = np.random.default_rng(0)
    for dim in (2, 10, 40):
        norms = np.linalg.norm(rng.normal(0, 3.0, (200_000, dim)), axis=1)
        bound = chi_norm_bound(dim, 3.0, math.log(100.0))
        assert np.mean(norms > bound) <= 0.01
        assert np.mean(norms > bound * 0.85) > 0.001


def test_the_certified_solve_is_within_its_distance_of_the_exact_minimiser() -> None:
    x, a = _data(400, 5, 2)
    learner = ObjectiveLogistic(_box(5), 2.0, 1e-6, 400)
    acc = learner.accuracy
    assert isinstance(acc, PerturbedAccuracy) and learner.problem() is None
    xt = learner.features.transform(x)
    b = np.random.default_rng(4).normal(0, learner.sigma, 6)
    theta = solve_perturbed(xt, a, b, acc)
    ref = theta.copy()
    for _ in range(30):  # more full Newton steps: the exact minimiser to float precision
        s = special.expit(xt @ ref)
        g = (xt.T @ (s - a) + b) / 400 + acc.lam * ref
        h = (xt * (s * (1 - s))[:, None]).T @ xt / 400 + acc.lam * np.eye(6)
        ref = ref - np.linalg.solve(h, g)
    assert np.linalg.norm(theta - ref) <= acc.distance
    assert np.linalg.norm(ref) <= acc.theta_bound
    fallback = solve_perturbed(xt, a, b, PerturbedAccuracy(400, 6, 1.0, acc.lam, 1e-14,
                                                           b_bound=acc.b_bound))
    assert np.linalg.norm(fallback - ref) <= 1e-6


def test_the_penalty_is_far_smaller_than_the_output_perturbations() -> None:
    from dpcausal.learners.penalty import propensity_penalty

    box = _box(9)
    ours = ObjectiveLogistic(box, 0.75, 1e-6, 1500)
    theirs = propensity_penalty(box, 0.75, 1e-6, 1500).l2
    assert ours.l2 * 5 < theirs
    # the plan refuses a setting whose fallback could not be guaranteed, before reading data
    assert ObjectiveLogistic(box, 0.75, 1e-6, 1500).problem() is None
    assert PerturbedAccuracy(10**6, 10, 1.0, 1e-9, 1e-10, b_bound=1.0).problem() is not None


# ------------------------------------------------------------- cate estimand: ate, objective


def _ate_spec(**ate: object) -> object:
    from cli_tests.unit.test_cate_ate import make_spec

    return make_spec(**ate)


def test_the_ate_plan_charges_the_objective_learner_at_the_propensity_budget() -> None:
    from dpcausal.accounting.budget import compose_events
    from dpcausal.commands.cate.ate_setup import build_ate_setup
    from dpcausal.commands.cate.method import plan

    spec = _ate_spec(propensity_learner="objective", outcome_model="means")
    pl = plan(spec, 800, {}, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    setup = build_ate_setup(spec, 800)  # type: ignore[arg-type]
    prop = [e for e in pl.events if ".propensity" in e.stage]
    assert [e.stage for e in prop] == ["cate.ate.nuisance.propensity",
                                       "cate.ate.nuisance.propensity.output"]
    assert prop[0].params["perturbation"] == "objective"
    assert sum(e.epsilon for e in prop) == pytest.approx(setup.budget.propensity, rel=1e-12)
    assert sum(e.delta for e in prop) == pytest.approx(setup.budget.delta_propensity, rel=1e-12)
    cost = compose_events([e.to_dict() for e in pl.events])
    assert (cost.epsilon, cost.delta) == (pytest.approx(5.0), pytest.approx(1e-6))
    assert pl.details["propensity_learner"] == "objective"
    assert "propensity" not in pl.assumptions["penalties"]


def test_the_objective_learner_refuses_a_given_penalty_and_a_public_propensity() -> None:
    from dpcausal.commands.cate.method import plan
    from dpcausal.errors import SpecError

    with pytest.raises(SpecError, match="propensity_l2"):
        plan(_ate_spec(propensity_learner="objective",  # type: ignore[arg-type]
                       cate={"nuisance": {"propensity_l2": 0.01}}),
             800, {}, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="propensity_learner"):
        _ate_spec(propensity_learner="objective", propensity=0.4)


def test_an_ate_release_with_the_objective_learner_is_a_doubly_robust_estimate() -> None:
    from cli_tests.unit.test_cate_ate import observational, release

    frame = observational(3000, 1)
    doc = release(_ate_spec(eps=1e6, propensity_learner="objective"),  # type: ignore[arg-type]
                  frame, seed=2)
    assert abs(doc["estimate"] - 2.0) < 0.15
    lo, hi = doc["total_interval"]["lo"], doc["total_interval"]["hi"]
    assert lo < doc["estimate"] < hi
