"""select-policy privacy: the spillover fixtures (spec §3), adversarial neighbour search on the
certified learners, exact EM likelihood ratios, the value-release noise law, and concentration at
huge ε on simulated data."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.tree import DecisionTreeRegressor

from cli_tests.helpers import assert_three_arm, ks_three_arm, sample_data_module
from dpcausal.commands.select_policy.estimate import compute_utilities
from dpcausal.commands.select_policy.library import build_library, paper160
from dpcausal.commands.select_policy.privacy import choice_mechanism, value_mechanism
from dpcausal.commands.select_policy.scores import dr_score
from dpcausal.commands.select_policy.setup import build_setup
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.learners.certificate import certify_spillover
from dpcausal.mechanisms import ExponentialMechanism

_sim = sample_data_module("select_policy_sim")  # the simulator that made the sample data
RareRegionDGP = _sim.RareRegionDGP
simulated_covariates = _sim.simulated_covariates

pytestmark = pytest.mark.statistical
NAMES = [f"x{j + 1}" for j in range(20)]
PAPER = {"lambda_mu": 50.0, "lambda_e": 50.0, "effective_bounds": False}
"""The paper's setting (App. G.4): fixed penalties, clips at the spec's ranges."""


def max_log_ratio(u_d: np.ndarray, u_dp: np.ndarray, epsilon: float, delta: float) -> float:
    """Exact max_π |log p_D(π) − log p_D′(π)| of the exponential mechanism."""
    em = ExponentialMechanism(epsilon, delta)
    return float(np.max(np.abs(np.log(em.probabilities(u_d)) - np.log(em.probabilities(u_dp)))))


# ---------------------------------------------------------------- separation fixtures (spec §3)
def c_fixture(n_total: int, n: int, two_policy: bool) -> tuple[np.ndarray, np.ndarray]:
    """Constructions C.1/C.2: utilities (π₀ ≡ control, π₁ ≡ treated) under S and S′."""
    big_n = float(n_total)
    b_hi, c_hi = big_n ** -4, 2 * big_n ** -4

    def mu1(train_x: np.ndarray, x: np.ndarray) -> np.ndarray:
        trig = float(np.any((train_x > b_hi) & (train_x <= c_hi)))
        ind = (x <= b_hi).astype(float)
        return ind * (2 * trig - 1) if two_policy else ind * trig

    m = n_total - n
    s = np.full(m, 0.5)
    s[0] = 1.5 * big_n ** -4  # the one record in C_N
    s_prime = s.copy()
    s_prime[0] = 0.5
    x_sc = np.zeros(n)
    treated, y = np.zeros(n, dtype=bool), np.zeros(n)  # A = control, Y = 0
    half = np.full(n, 0.5)
    out = []
    for train in (s, s_prime):
        m1 = mu1(train, x_sc)
        u = [dr_score(np.full(n, pol), np.zeros(n), m1, half, treated, y).sum()
             for pol in (False, True)]
        out.append(np.array(u))
    return out[0], out[1]


@pytest.mark.parametrize("n", [10, 50, 100, 1000])
def test_c1_move_is_exactly_n(n: int) -> None:
    u_d, u_dp = c_fixture(2 * n, n, two_policy=False)
    assert abs(u_d[1] - u_dp[1]) == n


@pytest.mark.parametrize(("n", "delta0", "eps", "golden"),
                         [(10, 2, 1.0, 2.5), (100, 22, 1.0, 2.2727), (50, 22, 1.0, 1.1364)])
def test_c2_naive_calibration_violates_dp(n: int, delta0: float, eps: float,
                                          golden: float) -> None:
    u_d, u_dp = c_fixture(2 * n, n, two_policy=True)
    assert u_d.tolist() == [0.0, n]
    assert u_dp.tolist() == [0.0, -n]
    llr = max_log_ratio(u_d, u_dp, eps, delta0)
    assert llr == pytest.approx(golden, abs=1e-4)
    assert llr == pytest.approx(eps * n / (2 * delta0))
    assert llr > eps  # violation iff n > 2Δ₀


@pytest.mark.parametrize("n", [10, 100, 1000])
def test_c2_trivial_certificate_is_private(n: int) -> None:
    u_d, u_dp = c_fixture(2 * n, n, two_policy=True)
    cert = certify_spillover(d=1, m=n, n=n, zeta=0.5, y_bounds=(0.0, 1.0), mu_bounds=(-1.0, 1.0),
                             beta_mu=2.0, beta_e=0.0, certificate_type="trivial")
    assert max_log_ratio(u_d, u_dp, 1.0, cert.delta_cert) <= 1.0 * (1 + 1e-9)


def one_nn_fixture(n: int) -> tuple[np.ndarray, np.ndarray]:
    """App. F: clipped 1-NN outcome model on action-1 training records; anchor at x₀."""
    rng = np.random.default_rng(n)
    x0 = np.zeros(2)
    train_x = np.vstack([x0, rng.uniform(5, 10, (30, 2))])
    y_s = np.concatenate([[1.0], rng.uniform(0, 1, 30)])
    y_sp = y_s.copy()
    y_sp[0] = 0.0
    x_sc = np.repeat(x0[None, :], n, axis=0)
    treated, y = np.zeros(n, dtype=bool), np.zeros(n)
    half = np.full(n, 0.5)
    out = []
    for ys in (y_s, y_sp):
        nn = np.argmin(((x_sc[:, None, :] - train_x[None]) ** 2).sum(-1), axis=1)
        mu1 = np.clip(ys[nn], 0, 1)
        out.append(np.array([dr_score(np.full(n, pol), np.zeros(n), mu1, half, treated, y).sum()
                             for pol in (True, False)]))
    return out[0], out[1]


@pytest.mark.parametrize(("n", "eps", "golden", "violates"),
                         [(120, 1.0, 9.307, True), (12, 1.0, 0.620, False),
                          (30, 0.5, 0.809, True)])
def test_nearest_neighbour_spillover(n: int, eps: float, golden: float, violates: bool) -> None:
    u_d, u_dp = one_nn_fixture(n)
    assert u_d.tolist() == [n, 0.0]
    assert u_dp.tolist() == [0.0, 0.0]
    naive = max_log_ratio(u_d, u_dp, eps, 6.0)  # 2B_ψ with ζ = 1/2, Y, μ ∈ [0, 1]
    assert naive == pytest.approx(golden, abs=1e-3)
    assert (naive > eps) is violates
    trivial = max(6.0, 3.0 * n)  # ρ = (1 + 1/ζ)·1
    assert max_log_ratio(u_d, u_dp, eps, trivial) <= eps


# ------------------------------------------------- certified learners through the real code path
def spec_for(n_rows: int, **section: Any) -> SelectPolicySpec:
    # index split: these tests place the anchor in the first m rows (the nuisance block)
    sec = {"treated": 1, "control": 0, "library": {"generator": "paper160", "seed": 7},
           "split": {"kind": "index"}}
    sec.update(section)
    return SelectPolicySpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": NAMES}},
        "bounds": {"outcome": [0.0, 1.0], "covariates": [-3.0, 3.0]},
        "privacy": {"epsilon": 1.0}, "select_policy": sec})


def frame_of(x: np.ndarray, a: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    f = pd.DataFrame(x, columns=NAMES)
    f["A"], f["Y"] = a.astype(int), y
    return f


@pytest.fixture(scope="module")
def pool() -> tuple[np.ndarray, RareRegionDGP]:
    x, q = simulated_covariates(5)
    return x, RareRegionDGP(20, q)


@pytest.mark.parametrize("lam", [5.0, 50.0])
def test_adversarial_neighbours_never_exceed_delta_cert(pool: Any, lam: float) -> None:
    """Spec §9.6–9.7: replacements in either block, corners, extreme Y, both actions. λ = 5: a
    demanding certificate; λ = 50: the effective clip ranges bind Δ (ζ′ ≈ 0.32, μ̂ in
    [0.18, 0.82]), so the tightened Δ is what the search tests."""
    x_pool, dgp = pool
    rng = np.random.default_rng(0)
    m = n = 300
    x = x_pool[rng.choice(len(x_pool), m + n, replace=False)]
    a, y = dgp.sample(x, rng)
    spec = spec_for(m + n, lambda_mu=lam, lambda_e=lam)
    setup = build_setup(spec, m + n, {})
    if lam == 50.0:
        assert setup.nuisances is not None and setup.nuisances.zeta > 0.3
        assert setup.utility_sensitivity < build_setup(
            spec_for(m + n, **PAPER), m + n, {}).utility_sensitivity / 3
    base = compute_utilities(spec, setup, frame_of(x, a, y), {})
    rare = np.flatnonzero(dgp.region(x_pool) > 0)
    ratios = []
    for trial in range(24):
        i = int(rng.integers(0, m)) if trial % 2 == 0 else int(rng.integers(m, m + n))
        x2, a2, y2 = x.copy(), a.copy(), y.copy()
        kind = trial % 3
        x2[i] = rng.choice([-3.0, 3.0], 20) if kind == 0 else x_pool[rng.choice(rare)]
        a2[i] = int(trial // 3) % 2
        y2[i] = 1.0 - y[i] if kind == 2 else float(rng.integers(0, 2))
        u2 = compute_utilities(spec, setup, frame_of(x2, a2, y2), {})
        move = float(np.max(np.abs(u2 - base)))
        assert move <= setup.utility_sensitivity
        llr = max_log_ratio(base, u2, 1.0, setup.utility_sensitivity)
        assert llr <= 1.0 * move / setup.utility_sensitivity * (1 + 1e-9) + 1e-12
        ratios.append(move / setup.utility_sensitivity)
    assert max(ratios) < 1.0


def test_spillover_recipe_unstable_vs_certified(pool: Any) -> None:
    """Spec §3.5: an anchor in the rare region, Y = 1 vs 0; scoring blocks from the rare pool."""
    x_pool, dgp = pool
    rng = np.random.default_rng(1)
    region = dgp.region(x_pool) > 0
    common, rare = x_pool[~region], x_pool[region]
    m = 1500
    xs = np.vstack([rare[:1], common[rng.choice(len(common), m - 1, replace=False)]])
    a_s, y_s = dgp.sample(xs, rng, noise_sd=0.04)
    a_s[0] = 1
    lib = build_library({"policies": paper160(NAMES, 7, rare_threshold=dgp.q95)}, NAMES,
                        where="g", source={})
    spec = spec_for(2 * m, **PAPER)
    setup = build_setup(spec, 2 * m, {})
    moves, naive_llr, cert_llr = [], [], []
    sizes = [300, 700, 1200, 2000, 3000]
    for n in sizes:
        x_sc = rare[rng.choice(len(rare), n, replace=True)]
        a_sc, y_sc = dgp.sample(x_sc, rng)
        pair_u = []
        cert_u = []
        for anchor_y in (1.0, 0.0):
            ys = y_s.copy()
            ys[0] = anchor_y
            # unstable learner: a fully grown regression tree per arm (deterministic)
            mus = [np.clip(DecisionTreeRegressor(random_state=0).fit(
                xs[a_s == arm], ys[a_s == arm]).predict(x_sc), 0, 1) for arm in (0, 1)]
            e1 = np.full(n, float(np.clip(a_s.mean(), 0.1, 0.9)))
            dec = lib.decisions(x_sc)
            pair_u.append(np.array([dr_score(dec[:, k], mus[0], mus[1], e1, a_sc == 1,
                                             y_sc).sum() for k in range(lib.size)]))
            sp_n = spec_for(m + n, **PAPER)
            set_n = build_setup(sp_n, m + n, {})
            cert_u.append(compute_utilities(
                sp_n, set_n, frame_of(np.vstack([xs, x_sc]), np.concatenate([a_s, a_sc]),
                                      np.concatenate([ys, y_sc])), {}))
        moves.append(float(np.max(np.abs(pair_u[0] - pair_u[1]))))
        naive_llr.append(max_log_ratio(pair_u[0], pair_u[1], 1.0, 22.0))
        cmove = float(np.max(np.abs(cert_u[0] - cert_u[1])))
        delta_n = build_setup(spec_for(m + n, **PAPER), m + n, {}).utility_sensitivity
        assert cmove <= delta_n
        cert_llr.append(max_log_ratio(cert_u[0], cert_u[1], 1.0, delta_n))
    assert stats.pearsonr(sizes, moves)[0] > 0.95
    assert moves[-1] > 22.0  # crosses the naive floor 2B_ψ
    assert naive_llr[-1] > 1.0  # naive EM is not 1-DP on this pair
    assert max(cert_llr) <= 1.0
    assert setup.utility_sensitivity == pytest.approx(28.614, abs=1e-3)


# ---------------------------------------------------------------- mechanisms as used here
def test_em_sampler_matches_exact_probabilities() -> None:
    em = ExponentialMechanism(1.0, 5.0)
    p = em.probabilities([10.0, 0.0])
    assert p == pytest.approx([0.731059, 0.268941], abs=1e-6)
    rng = np.random.default_rng(2)
    draws = np.array([em.release([10.0, 0.0], rng=rng) for _ in range(20_000)])
    counts = np.bincount(draws, minlength=2)
    assert stats.chisquare(counts, 20_000 * p).pvalue > 1e-4


def test_value_release_laplace_three_arm() -> None:
    spec = spec_for(3000, value_release={"epsilon": 0.5})
    setup = build_setup(spec, 3000, {})
    mech = value_mechanism(setup, 0.5)
    assert mech.scale == pytest.approx(setup.utility_sensitivity / 1500 / 0.5)
    rng = np.random.default_rng(3)
    sample = np.array([mech.release(np.zeros(1), rng=rng)[0] for _ in range(4000)])
    pv = ks_three_arm(sample, lambda x, s: stats.laplace.cdf(x, scale=s), mech.scale)
    assert_three_arm(pv)


def test_huge_epsilon_concentrates_on_best_true_policy(pool: Any) -> None:
    x_pool, dgp = pool
    rng = np.random.default_rng(4)
    n_rows = 400_000
    x = x_pool[rng.choice(len(x_pool), n_rows, replace=True)]
    a, y = dgp.sample(x, rng)
    # weakly regularised nuisances (λ = 0.01): with λ = 50 the linear nuisances are biased
    # enough (both misspecified) that the DR argmax is the true second-best policy
    spec = spec_for(n_rows, library={"generator": "paper160", "seed": 7,
                                     "rare_threshold": dgp.q95}, lambda_mu=0.01, lambda_e=0.01)
    spec = spec.model_copy(update={"privacy": spec.privacy.model_copy(update={"epsilon": 1e7})})
    setup = build_setup(spec, n_rows, {})
    u = compute_utilities(spec, setup, frame_of(x, a, y), {})
    em = choice_mechanism(setup, 1e7)
    p = em.probabilities(u)
    v_true = dgp.policy_values(setup.library.decisions(x_pool), x_pool)
    best = int(np.argmax(v_true))
    assert p[best] > 0.999
    picks = {em.release(u, rng=np.random.default_rng(s)) for s in range(20)}
    assert picks == {best}
    # at ε = 1 the same data gives a much flatter distribution (privacy has a price)
    assert choice_mechanism(setup, 1.0).probabilities(u).max() < 0.5
    assert math.isfinite(float(u.sum()))


# ---------------------------------------------------------------- black-box audit, regret, DR
def clopper_pearson(k: int, n: int, alpha: float = 1e-4) -> tuple[float, float]:
    lo = stats.beta.ppf(alpha / 2, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


@pytest.mark.parametrize(("delta_kind", "violates"), [("naive", True), ("trivial", False)])
def test_black_box_audit_on_c2(delta_kind: str, violates: bool) -> None:
    """Spec §9.12: sample the EM on D and D′; Clopper–Pearson LCB/UCB against e^ε."""
    n, eps, draws = 100, 1.0, 4000
    u_d, u_dp = c_fixture(2 * n, n, two_policy=True)
    delta = 2.0 if delta_kind == "naive" else 6.0 * n  # naive 2·max|ψ| vs trivial certificate
    em = ExponentialMechanism(eps, delta)
    rng_a, rng_b = np.random.default_rng(10), np.random.default_rng(11)
    k_d = sum(em.release(u_d, rng=rng_a) == 1 for _ in range(draws))
    k_dp = sum(em.release(u_dp, rng=rng_b) == 1 for _ in range(draws))
    worst = 0.0
    for kd, kdp in ((k_d, k_dp), (draws - k_d, draws - k_dp)):
        lo_d, _ = clopper_pearson(kd, draws)
        _, hi_dp = clopper_pearson(kdp, draws)
        worst = max(worst, lo_d / hi_dp)
    assert (worst > math.exp(eps)) is violates


def test_lemma5_regret_quantile() -> None:
    """Spec §9.13: the (1 − β) quantile of max U − U(π̂) is ≤ 2Δ(log M + log 1/β)/ε."""
    rng = np.random.default_rng(12)
    u = rng.uniform(0, 100, 160)
    em = ExponentialMechanism(1.0, 28.6)
    gaps = np.array([u.max() - u[em.release(u, rng=rng)] for _ in range(5000)])
    beta = 0.05
    assert np.quantile(gaps, 1 - beta) <= 2 * 28.6 * (math.log(160) + math.log(1 / beta)) / 1.0


def test_dr_identity_with_one_correct_nuisance(pool: Any) -> None:
    """Spec §9.14: correct ê with wrong μ̂, or correct μ̂ with wrong ê: mean ψ ≈ V(π)."""
    x_pool, dgp = pool
    rng = np.random.default_rng(13)
    x = x_pool[rng.choice(len(x_pool), 100_000, replace=True)]
    a, y = dgp.sample(x, rng)
    mu0, mu1 = dgp.mu(x)
    e1 = dgp.propensity(x)
    lib = build_library({"policies": paper160(NAMES, 7, rare_threshold=dgp.q95)}, NAMES,
                        where="g", source={})
    dec = lib.decisions(x)
    wrong_mu, wrong_e = np.full(len(x), 0.3), np.full(len(x), 0.5)
    for k in (0, 1, 14, 16, 40):
        truth = float(mu0 @ ~dec[:, k] + mu1 @ dec[:, k]) / len(x)
        for m0, m1, e in ((wrong_mu, wrong_mu, e1), (mu0, mu1, wrong_e)):
            psi = dr_score(dec[:, k], m0, m1, e, a == 1, y)
            se = psi.std() / math.sqrt(len(psi))
            assert abs(psi.mean() - truth) < 5 * se + 1e-3
