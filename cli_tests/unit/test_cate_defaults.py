"""cate's τ(x) defaults (issue 17): the nuisance penalties and the second-stage λ0 come from the
public total-error rule (learners/penalty.py, shared with the ATE), are unit-free, move to the
smallest guaranteed penalties as ε grows, the dry run states the shrinkage, and at ε = 10⁹ the
release agrees with a non-private DR-learner on an NHEFS-shaped simulation (the old constants
kept under half the effect there)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cli_tests.helpers import sample_data_module
from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.privacy import function_mechanism, nuisance_learners
from dpcausal.commands.cate.setup import build_setup, kernel_mean

bench = sample_data_module("defaults_cate", "benchmarks")
dgp = sample_data_module("defaults_dgp", "benchmarks")
N = dgp.NHEFS_N
OLD = bench.SETTINGS["old (λ = 0.05, λ0 = 1/√n)"]


def grams_spec(epsilon: float) -> object:
    spec = bench.spec_for(epsilon, 1)
    lo, hi = dgp.NHEFS_OUTCOME
    return spec.model_copy(update={"bounds": spec.bounds.model_copy(
        update={"outcome": (1000.0 * lo, 1000.0 * hi)})})


@pytest.mark.parametrize("eps", [1.0, 5.0, 1e9])
def test_kg_to_g_leaves_the_penalties_and_the_relative_noise_unchanged(eps: float) -> None:
    kg, g = bench.spec_for(eps, 1), grams_spec(eps)
    s_kg, s_g = build_setup(kg, N), build_setup(g, N)
    for name in ("propensity_l2", "outcome_l2", "ridge_choice"):
        assert getattr(s_kg, name).l2 == getattr(s_g, name).l2
    assert s_kg.lam0 == s_g.lam0
    assert function_mechanism(g, s_g).sigma == pytest.approx(
        1000 * function_mechanism(kg, s_kg).sigma, rel=1e-9)
    (p_kg, o_kg), (p_g, o_g) = nuisance_learners(kg, s_kg), nuisance_learners(g, s_g)
    assert p_kg.sensitivity == p_g.sensitivity
    assert o_g.sensitivity == pytest.approx(1000 * o_kg.sensitivity, rel=1e-9)


def test_given_penalties_are_kept_and_queries_mode_keeps_one_over_root_n() -> None:
    s = build_setup(bench.spec_for(5.0, 1, **OLD), N)
    assert (s.propensity_l2.l2, s.outcome_l2.l2, s.lam0) == (0.05, 0.05, OLD["ridge"])
    assert s.ridge_choice is None
    assert math.isnan(s.propensity_l2.kept)
    q = build_setup(bench.spec_for(5.0, 1, mode="queries"), N)
    assert q.lam0 == 1.0 / math.sqrt(N - N // 2)


def test_rule_goes_to_small_penalties_as_epsilon_grows_and_the_dry_run_states_shrinkage() -> None:
    kept = {}
    for eps in (1.0, 5.0, 1e9):
        s = build_setup(bench.spec_for(eps, 1), N)
        kept[eps] = (s.propensity_l2.kept, s.outcome_l2.kept, s.ridge_choice.kept)
    assert all(k > 0.95 for k in kept[1e9])
    assert all(a <= b for a, b in zip(kept[1.0], kept[5.0], strict=True))
    pl = plan(bench.spec_for(1.0, 1), N, {"queries": dgp.nhefs(5, np.random.default_rng(0)).x},
              rng=np.random.default_rng(0))
    assert pl.details["second_stage_kept_share_of_effect"] == pytest.approx(kept[1.0][2])
    assert "outcome model's penalty" in pl.details["warning"]  # keeps < ½ at ε = 1
    assert set(pl.assumptions["penalties"]) == {"propensity", "outcome",
                                                "second_stage"}


def test_kernel_mean_is_the_uniform_box_mean_of_the_kernel() -> None:
    rng = np.random.default_rng(0)
    s, t = rng.uniform(size=(2, 200_000, 3))
    h = 0.8
    mc = np.exp(-np.sum((s - t) ** 2, axis=1) / (2 * h * h)).mean()
    assert kernel_mean(3, h) == pytest.approx(mc, abs=3e-3)


def test_huge_epsilon_release_agrees_with_a_nonprivate_dr_learner() -> None:
    """ε = 10⁹: τ̂ averaged over 300 query points is within the stated tolerance (0.6 kg, about
    the reference's own sampling SE) of the non-private DR-learner's on the same halves; the old
    constants (λ = 0.05, λ0 = 1/√n) lose more than half of the ≈ 3.3 kg effect (regression)."""
    q = dgp.nhefs(300, np.random.default_rng(999))
    frame = dgp.nhefs(N, np.random.default_rng(4000)).frame()
    ref = bench.reference_dr(bench.spec_for(1e9, 4000), frame, q.x)
    today = bench.release(bench.spec_for(1e9, 4000), frame, q.x, noise_seed=1)
    old = bench.release(bench.spec_for(1e9, 4000, **OLD), frame, q.x, noise_seed=1)
    assert abs(today.mean() - ref.mean()) < 0.6
    assert old.mean() < 0.5 * (q.y1 - q.y0).mean()
