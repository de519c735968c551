"""select-policy units: DR scores, score bounds, library, chunked utilities, split, plan purity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpcausal.commands.select_policy import plan as sp_plan
from dpcausal.commands.select_policy.library import build_library, h_rare, paper160
from dpcausal.commands.select_policy.privacy import neighbouring
from dpcausal.commands.select_policy.scores import (
    dr_gammas,
    dr_score,
    utilities_from_gammas,
)
from dpcausal.commands.select_policy.setup import build_setup, split_indices
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.errors import DataError, MissingBoundsError, SpecError
from dpcausal.learners.certificate import score_bounds
from dpcausal.spec.split import RowSplit

NAMES = [f"x{j + 1}" for j in range(20)]
PAPER = {"lambda_mu": 50.0, "lambda_e": 50.0, "effective_bounds": False}
"""The paper's setting (App. G.4): fixed penalties, clips at the spec's ranges (golden numbers)."""


def make_spec(**section: Any) -> SelectPolicySpec:
    sec = {"treated": 1, "control": 0, "library": {"generator": "paper160", "seed": 7}}
    sec.update(section)
    doc: dict[str, Any] = {
        "data": {"path": "d.csv", "columns": {"outcome": "Y", "treatment": "A",
                                               "covariates": NAMES}},
        "bounds": {"outcome": [0.0, 1.0], "covariates": [-3.0, 3.0]},
        "privacy": {"epsilon": 1.0},
        "select_policy": sec,
    }
    return SelectPolicySpec.model_validate(doc)


def test_dr_score_hand_values() -> None:
    one = np.ones(1)
    # μ̂₁ = 0.6, ê₁ = 0.25, π = 1: A = 1, Y = 1 → 2.2; A = 0 → 0.6
    assert dr_score(np.array([True]), 0 * one, 0.6 * one, 0.25 * one, np.array([True]),
                    one)[0] == pytest.approx(2.2)
    assert dr_score(np.array([True]), 0 * one, 0.6 * one, 0.25 * one, np.array([False]),
                    one)[0] == pytest.approx(0.6)
    # π = 0, A = 0, Y = 0, μ̂₀ = 0.3, ê₀ = 0.75 (ê₁ = 0.25) → −0.1
    assert dr_score(np.array([False]), 0.3 * one, 0 * one, 0.25 * one, np.array([False]),
                    0 * one)[0] == pytest.approx(-0.1)


def test_score_bound_and_lemma2_on_random_nuisances() -> None:
    rng = np.random.default_rng(0)
    b_mu, r, b_psi = score_bounds(0.1, (0.0, 1.0), (0.0, 1.0))
    assert (b_mu, r, b_psi) == (1.0, 1.0, 11.0)
    n = 200_000
    mu0, mu1, mu0b, mu1b = (rng.uniform(0, 1, n) for _ in range(4))
    e1, e1b = rng.uniform(0.1, 0.9, n), rng.uniform(0.1, 0.9, n)
    treated, y = rng.uniform(size=n) < 0.5, rng.choice([0.0, 1.0, 0.5], n)
    pi = rng.uniform(size=n) < 0.5
    psi = dr_score(pi, mu0, mu1, e1, treated, y)
    assert np.abs(psi).max() <= b_psi
    assert psi.min() >= -9.0 - 1e-12
    assert psi.max() <= 10.0 + 1e-12
    psib = dr_score(pi, mu0b, mu1b, e1b, treated, y)
    dmu = np.maximum(np.abs(mu0 - mu0b), np.abs(mu1 - mu1b))
    de = np.abs(e1 - e1b)
    assert np.all(np.abs(psi - psib) <= (1 + 10) * dmu + 100 * r * de + 1e-12)
    g0, g1 = dr_gammas(mu0, mu1, e1, treated, y)
    np.testing.assert_allclose(np.where(pi, g1, g0), psi, atol=1e-12)


def test_library_parse_hash_and_decisions() -> None:
    doc = {"policies": [
        {"name": "all", "type": "constant", "treat": True},
        {"name": "none", "type": "constant", "treat": False},
        {"name": "t", "type": "threshold", "covariate": "x2", "op": ">=", "threshold": 0.5},
        {"name": "t2", "type": "threshold", "covariate": "x2", "op": "<", "threshold": 0.5},
        {"name": "lin", "type": "linear", "weights": {"x1": 1.0, "x3": -2.0}, "intercept": 0.5},
        {"name": "linc", "type": "linear", "weights": {"x1": 1.0, "x3": -2.0}, "intercept": 0.5,
         "complement": True},
    ]}
    lib = build_library(doc, NAMES, where="lib.yaml", source={})
    assert lib.size == 6
    assert lib.sha256 == build_library(doc, NAMES, where="x", source={"a": 1}).sha256
    doc2 = {"policies": [dict(p) for p in doc["policies"]]}
    doc2["policies"][2]["threshold"] = 0.6
    assert build_library(doc2, NAMES, where="x", source={}).sha256 != lib.sha256
    x = np.zeros((3, 20))
    x[:, 0] = [0.0, 1.0, -1.0]
    x[:, 1] = [0.5, 0.49, 2.0]
    x[:, 2] = [0.25, 0.0, 0.0]
    dec = lib.decisions(x)
    assert dec[:, 0].all()
    assert not dec[:, 1].any()
    assert dec[:, 2].tolist() == [True, False, True]
    assert dec[:, 3].tolist() == [False, True, False]
    assert dec[:, 4].tolist() == [True, True, False]  # 0 − 0.5 + 0.5 = 0 ≥ 0
    assert (dec[:, 5] == ~dec[:, 4]).all()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"policies": []}, "non-empty"),
        ({"policies": [{"name": "a", "type": "tree"}]}, "type must be one of"),
        ({"policies": [{"name": "a", "type": "threshold", "covariate": "zz", "op": ">=",
                        "threshold": 0}]}, "'zz' is not in data.columns.covariates"),
        ({"policies": [{"name": "a", "type": "constant", "treat": True},
                       {"name": "a", "type": "constant", "treat": False}]}, "repeated: a"),
        ({"policies": [{"name": "a", "type": "constant", "treat": True, "x": 1}]}, "unknown"),
        ({"policies": [{"name": "a", "type": "linear", "weights": {"x1": "big"}}]},
         "finite number"),
        ({"polices": []}, "unknown top-level"),
    ],
)
def test_library_errors_name_the_file(doc: Any, message: str) -> None:
    with pytest.raises(SpecError, match=r"lib\.yaml") as err:
        build_library(doc, NAMES, where="lib.yaml", source={})
    assert message in str(err.value)


def test_paper160_is_public_seeded_and_sized() -> None:
    a, b, c = paper160(NAMES, 7), paper160(NAMES, 7), paper160(NAMES, 8)
    assert len(a) == 160
    assert a == b
    assert a[18:] != c[18:]
    assert [p["type"] for p in a[:18]].count("threshold") == 12
    for p in a[18:]:
        w = np.array(list(p["weights"].values()))
        assert np.linalg.norm(w) == pytest.approx(1.0)
        assert len(w) in (8, 20)
    sparse = sum(len(p["weights"]) == 8 for p in a[18:])
    assert 80 < sparse < 120  # ~70% of 142
    x = np.random.default_rng(0).standard_normal((50_000, 20))
    assert np.mean(h_rare(x) >= a[16]["threshold"]) == pytest.approx(0.05, abs=0.005)


@pytest.mark.parametrize("chunk", [1024, 4096, 100_000])
def test_chunked_utilities_equal_direct_sum(chunk: int) -> None:
    rng = np.random.default_rng(1)
    n = 5000
    lib = build_library({"policies": paper160(NAMES, 3)}, NAMES, where="g", source={})
    x = rng.standard_normal((n, 20))
    mu0, mu1, e1 = rng.uniform(0, 1, n), rng.uniform(0, 1, n), rng.uniform(0.1, 0.9, n)
    treated, y = rng.uniform(size=n) < 0.4, rng.uniform(0, 1, n)
    g0, g1 = dr_gammas(mu0, mu1, e1, treated, y)
    u = utilities_from_gammas(lib, x, g0, g1, chunk_rows=chunk)
    dec = lib.decisions(x)
    ref = np.array([dr_score(dec[:, k], mu0, mu1, e1, treated, y).sum() for k in range(lib.size)])
    np.testing.assert_allclose(u, ref, rtol=1e-10, atol=1e-8)


def test_plan_is_pure_in_public_inputs_and_golden() -> None:
    spec = make_spec(**PAPER)
    plans = [sp_plan.plan(spec, 3000, {}, rng=np.random.default_rng(s)) for s in (0, 1)]
    assert plans[0].details == plans[1].details
    det = plans[0].details
    assert det["m"] == det["n"] == 1500
    assert round(det["rho_star"], 7) == 0.0190761
    assert round(det["delta_cert"], 3) == 28.614
    assert det["M"] == 160
    # regret privacy term 2Δ(log M + log 1/β)/(nε), spec §4: 0.308 in the paper setting
    assert det["regret_privacy_term"] == pytest.approx(0.308, abs=1e-3)
    ev = plans[0].events[0]
    assert ev.kind == "exponential"
    assert ev.noise_scale == pytest.approx(2 * det["delta_cert"])
    assert plans[0].neighbouring["relation"] == "replace-one"
    assert "D_tr" in plans[0].neighbouring["protected"]


def test_value_release_is_a_second_event() -> None:
    plan = sp_plan.plan(make_spec(value_release={"epsilon": 0.5}, **PAPER), 3000, {},
                   rng=np.random.default_rng(0))
    assert [e.kind for e in plan.events] == ["exponential", "laplace"]
    assert plan.events[1].sensitivity == pytest.approx(plan.details["delta_cert"] / 1500)
    assert plan.cost.epsilon == pytest.approx(1.5)


def test_regimes_frozen_fixed_and_trivial() -> None:
    frozen = build_setup(make_spec(regime="frozen", frozen_model=Path("m.json")), 3000, {})
    assert frozen.utility_sensitivity == 22.0
    assert (frozen.m, frozen.n) == (0, 3000)
    assert "NOT protected" in neighbouring(frozen, RowSplit())["protected"]
    fixed = build_setup(make_spec(regime="fixed", fixed_scores={
        "treated": "q1", "control": "q0", "bound": 3.0}), 3000, {})
    assert fixed.utility_sensitivity == 6.0
    trivial = build_setup(make_spec(certificate="trivial", **PAPER), 3000, {})
    assert trivial.utility_sensitivity == pytest.approx(1500 * 22.0)


def test_missing_bounds_refused_and_sizes_checked() -> None:
    spec = make_spec()
    no_y = spec.model_copy(update={"bounds": spec.bounds.model_copy(update={"outcome": None})})
    with pytest.raises(MissingBoundsError, match=r"bounds\.outcome"):
        build_setup(no_y, 3000, {})
    no_x = spec.model_copy(update={"bounds": spec.bounds.model_copy(
        update={"covariates": {"x1": (0.0, 1.0)}})})
    with pytest.raises(MissingBoundsError, match="x2"):
        build_setup(no_x, 3000, {})
    with pytest.raises(DataError, match="both blocks"):
        build_setup(spec, 1, {})
    with pytest.raises(SpecError, match="delta"):
        sp_plan.plan(spec.model_copy(update={"privacy": spec.privacy.model_copy(
            update={"delta": 1e-6})}), 3000, {}, rng=np.random.default_rng(0))


def test_positional_splits_are_reproducible_and_the_default_is_secret() -> None:
    tr, sc = split_indices(make_spec(split={"kind": "index"}), 10, 5)
    assert tr.tolist() == [0, 1, 2, 3, 4]
    assert sc.tolist() == [5, 6, 7, 8, 9]
    spec = make_spec(split={"kind": "seeded", "seed": 3})
    a, b = split_indices(spec, 100, 40), split_indices(spec, 100, 40)
    assert a[0].tolist() == b[0].tolist()
    assert len(a[0]) == 40
    assert sorted(a[0].tolist() + a[1].tolist()) == list(range(100))
    draws = {tuple(split_indices(make_spec(), 100, 40)[0]) for _ in range(5)}
    assert len(draws) == 5  # a fresh secret permutation per run (C(100, 40) ≈ 1.4e28 subsets)


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="frozen_model is required"):
        make_spec(regime="frozen")
    with pytest.raises(ValueError, match=r"split\.seed is required"):
        make_spec(split={"kind": "seeded"})
    with pytest.raises(ValueError, match="now 'seeded'"):
        make_spec(split={"kind": "permute", "seed": 3})
    with pytest.raises(ValueError, match="fixed_scores is only used"):
        make_spec(fixed_scores={"treated": "a", "control": "b", "bound": 1})
