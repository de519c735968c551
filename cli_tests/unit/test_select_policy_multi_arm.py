"""select-policy with K ≥ 3 arms (experimental, spec select_policy §2.9): the spec's checks, the
K-arm library, the DR scores and the neighbour search of the utility sensitivity Δ_cert."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from dpcausal.commands.select_policy import multi_arm
from dpcausal.commands.select_policy.estimate import compute_utilities
from dpcausal.commands.select_policy.multi_library import build_multi_library
from dpcausal.commands.select_policy.setup import build_setup
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.errors import DataError, SpecError

ARMS = ["placebo", "low", "high"]
NAMES = ["x1", "x2"]
LIBRARY = {"policies": [
    {"name": "all-placebo", "type": "constant", "arm": "placebo"},
    {"name": "all-low", "type": "constant", "arm": "low"},
    {"name": "all-high", "type": "constant", "arm": "high"},
    {"name": "x1-high-else-placebo", "type": "threshold", "covariate": "x1", "op": ">=",
     "threshold": 0.0, "arm": "high", "else": "placebo"},
    {"name": "lin", "type": "linear", "weights": {"x1": 1.0, "x2": -1.0}, "intercept": 0.2,
     "arm": "low", "else": "high"},
    {"name": "by-score", "type": "argmax", "scores": [
        {"arm": "placebo", "weights": {}, "intercept": 0.0},
        {"arm": "low", "weights": {"x1": 1.0}, "intercept": 0.0},
        {"arm": "high", "weights": {"x2": 1.0}, "intercept": 0.0}]},
]}


def make_spec(**section: Any) -> SelectPolicySpec:
    sec: dict[str, Any] = {"arms": ARMS, "experimental_multi_arm": True,
                           "library": {"path": "lib.yaml"}, "split": {"kind": "index"}}
    sec.update(section)
    return SelectPolicySpec.model_validate({
        "data": {"path": "d.csv", "columns": {"outcome": "Y", "treatment": "A",
                                               "covariates": NAMES}},
        "bounds": {"outcome": [-1.0, 1.0], "covariates": [-1.0, 1.0]},
        "privacy": {"epsilon": 1.0}, "select_policy": sec})


@pytest.mark.parametrize(("section", "words"), [
    ({"experimental_multi_arm": False}, "experimental_multi_arm: true"),
    ({"regime": "frozen", "frozen_model": "m.json"}, "regime frozen takes two arms"),
    ({"library": {"generator": "paper160", "seed": 1}}, "paper160 generator"),
    ({"zeta": 0.4}, "at most 1/K"),
    ({"arms": ["a", "b"]}, "at least three arms"),
    ({"arms": ["a", "b", "a"]}, "distinct"),
    ({"arms": list(range(101)), "zeta": 0.001}, "at most 100 arms"),
    ({"treated": "high"}, "either select_policy.treated"),
    ({"control": "placebo"}, "control is not used with select_policy.arms"),
])
def test_spec_refuses_what_the_k_arm_route_does_not_cover(section: dict[str, Any],
                                                          words: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(words)):
        make_spec(**section)


def test_the_flag_without_arms_is_refused() -> None:
    with pytest.raises(ValidationError, match=re.escape("only used with select_policy.arms")):
        SelectPolicySpec.model_validate({
            "privacy": {"epsilon": 1.0},
            "select_policy": {"treated": 1, "experimental_multi_arm": True,
                              "library": {"generator": "paper160", "seed": 1}}})


def test_library_parse_hash_and_decisions() -> None:
    lib = build_multi_library(LIBRARY, NAMES, tuple(ARMS), where="lib", source={})
    assert lib.size == 6
    assert len(lib.sha256) == 64
    x = np.array([[0.5, -0.5], [-0.5, 0.9], [-0.1, -0.2]])
    dec = lib.decisions(x)
    np.testing.assert_array_equal(dec[:, 0], 0)
    np.testing.assert_array_equal(dec[:, 2], 2)
    np.testing.assert_array_equal(dec[:, 3], [2, 0, 0])          # x1 >= 0: high, else placebo
    np.testing.assert_array_equal(dec[:, 4], [1, 2, 1])          # x1 − x2 + 0.2 >= 0: low
    np.testing.assert_array_equal(dec[:, 5], [1, 2, 0])          # argmax(0, x1, x2)
    # the hash is of the normalised policies: the same library, the same hash
    again = build_multi_library(LIBRARY, NAMES, tuple(ARMS), where="lib", source={})
    assert again.sha256 == lib.sha256


@pytest.mark.parametrize(("policy", "words"), [
    ({"name": "p", "type": "constant", "arm": "medium"}, "must be one of select_policy.arms"),
    ({"name": "p", "type": "constant", "treat": True}, "unknown field"),
    ({"name": "p", "type": "threshold", "covariate": "x1", "op": ">=", "threshold": 0.0,
      "arm": "high"}, "needs 'arm'"),
    ({"name": "p", "type": "argmax", "scores": [{"arm": "low"}, {"arm": "low"}]}, "twice"),
    ({"name": "p", "type": "argmax", "scores": [{"arm": "low", "weights": {"x9": 1.0}},
                                                {"arm": "high"}]}, "not in data.columns"),
    ({"name": "p", "type": "constant", "arm": 1}, "must be one of"),
])
def test_library_errors_name_the_policy(policy: dict[str, Any], words: str) -> None:
    with pytest.raises(SpecError, match=re.escape(words)):
        build_multi_library({"policies": [policy]}, NAMES, tuple(ARMS), where="lib", source={})


def test_dr_scores_hand_values() -> None:
    mu = np.array([[0.2, 0.5, 0.7]])
    e = np.array([[0.25, 0.5, 0.25]])
    gam = multi_arm.dr_gammas(mu, e, np.array([2]), np.array([1.0]))
    np.testing.assert_allclose(gam, [[0.2, 0.5, 0.7 + 0.3 / 0.25]])


def test_rows_outside_the_declared_arms_are_refused_without_values() -> None:
    col = pd.Series(["placebo", "high", "secret-arm", "low"])
    with pytest.raises(DataError) as info:
        multi_arm.arm_codes(col, make_spec().select_policy, path="d.csv", column="A")
    msg = str(info.value)
    assert "secret-arm" not in msg and "first at data row 3" in msg and "select_policy.arms" in msg
    codes = multi_arm.arm_codes(col.iloc[[0, 1, 3]], make_spec().select_policy, path="d.csv",
                                column="A")
    np.testing.assert_array_equal(codes, [0, 2, 1])


def test_an_engine_is_refused_by_the_plan() -> None:
    spec = make_spec().model_copy(update={"engine": {"kind": "local"}})
    with pytest.raises(SpecError, match="in memory only"):
        multi_arm.check_supported(spec)


# ----------------------------------------------------------- the utility sensitivity Δ_cert
def frame_of(x: np.ndarray, a: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    f = pd.DataFrame(x, columns=NAMES)
    f["A"] = np.array(ARMS, dtype=object)[a]
    f["Y"] = y
    return f


def utilities(spec: SelectPolicySpec, x: np.ndarray, a: np.ndarray, y: np.ndarray
              ) -> tuple[np.ndarray, float]:
    side = {"library": LIBRARY}
    setup = build_setup(spec, len(y), side)
    return compute_utilities(spec, setup, frame_of(x, a, y), side), setup.utility_sensitivity


@pytest.mark.statistical
@pytest.mark.parametrize(("section", "floor_active"), [
    ({"lambda_mu": 0.5, "lambda_e": 0.5, "zeta": 0.1}, False),   # a demanding certificate
    ({"lambda_mu": 0.5, "lambda_e": 0.5, "zeta": 0.1, "certificate": "trivial"}, False),
    ({"lambda_mu": 1e4, "lambda_e": 1e4, "zeta": 1 / 3}, True),  # Δ = 2B_ψ
])
def test_neighbour_search_never_exceeds_delta_cert(section: dict[str, Any],
                                                   floor_active: bool) -> None:
    """Replace one row of either block (the split is the first m rows) by a corner of the box,
    any arm (arm switches included) and an extreme Y: max_π |U_D(π) − U_D′(π)| ≤ Δ_cert, so the
    exponential mechanism's log-ratio is ≤ ε (spec §9.6–9.7)."""
    rng = np.random.default_rng(5)
    n_rows = 120
    spec = make_spec(**section)
    x = rng.uniform(-1, 1, (n_rows, 2))
    a = rng.integers(0, 3, n_rows)
    y = np.clip(0.3 * x[:, 0] * (a - 1) + rng.normal(0, 0.3, n_rows), -1, 1)
    base, delta = utilities(spec, x, a, y)
    m = n_rows // 2
    worst = 0.0
    for trial in range(36):
        i = int(rng.integers(0, m)) if trial % 2 == 0 else int(rng.integers(m, n_rows))
        x2, a2, y2 = x.copy(), a.copy(), y.copy()
        x2[i] = rng.choice([-1.0, 1.0], 2) if trial % 3 else x[i]
        a2[i] = (a[i] + 1 + trial % 2) % 3                      # always a different arm
        y2[i] = -np.sign(y[i]) if trial % 4 else y[i]
        u2, _ = utilities(spec, x2, a2, y2)
        move = float(np.abs(u2 - base).max())
        assert move <= delta
        s, s2 = base / (2 * delta), u2 / (2 * delta)
        llr = np.abs((s - np.logaddexp.reduce(s)) - (s2 - np.logaddexp.reduce(s2))).max()
        assert llr <= move / delta * (1 + 1e-9) + 1e-12
        worst = max(worst, move / delta)
    assert worst < 1.0
    if floor_active:
        # a planted scoring-block pair: a row of arm 'high' with Y = 1 against the same row
        # with Y = −1 moves U(all-high) by 2/ê = 2K; Δ = 2B_ψ = 2(1 + 2K), so 6/14 of it
        x2, a2, y2 = x.copy(), a.copy(), y.copy()
        x3, a3, y3 = x.copy(), a.copy(), y.copy()
        a2[-1] = a3[-1] = 2
        y2[-1], y3[-1] = 1.0, -1.0
        u2, _ = utilities(spec, x2, a2, y2)
        u3, _ = utilities(spec, x3, a3, y3)
        assert delta == pytest.approx(14.0)
        assert np.abs(u2 - u3).max() / delta == pytest.approx(6 / 14, rel=1e-3)
