"""Issue 16 for select-policy: how sure the choice and the value release are, through the release
path every engine shares (``release_selection``): the printed value gap covers at least its level
and exactly at the worst case (three arms), the value's Laplace interval covers at its rate (three
arms), clamping to the outcome bounds, and the dry run's predictions equal what the release prints."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cli_tests.helpers import assert_coverage_three_arm, coverage_three_arm
from dpcausal.commands.select_policy import plan as sp_plan
from dpcausal.commands.select_policy.estimate import release_selection
from dpcausal.commands.select_policy.setup import build_setup
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.mechanisms import NoiseGuard

ALPHA = 0.05
DRAWS = 2000
NAMES = ["x1", "x2"]
POLICIES = [{"name": "all", "type": "constant", "treat": True},
            {"name": "none", "type": "constant", "treat": False},
            *[{"name": f"x1<{t}", "type": "threshold", "covariate": "x1", "op": "<",
               "threshold": t} for t in (-0.5, 0.0, 0.5)],
            *[{"name": f"x2<{t}", "type": "threshold", "covariate": "x2", "op": "<",
               "threshold": t} for t in (-0.5, 0.0, 0.5)]]
SIDE = {"library": {"policies": POLICIES}}
N_ROWS = 4000


def make_spec(epsilon: float = 1.0, value_epsilon: float | None = None,
              **section: Any) -> SelectPolicySpec:
    sec: dict[str, Any] = {"treated": 1, "control": 0, "library": {"path": "lib.yaml"}, **section}
    if value_epsilon is not None:
        sec["value_release"] = {"epsilon": value_epsilon}
    return SelectPolicySpec.model_validate({
        "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": NAMES}},
        "bounds": {"outcome": [0.0, 10.0], "covariates": [-1.0, 1.0]},
        "privacy": {"epsilon": epsilon}, "accuracy": {"alpha": ALPHA}, "select_policy": sec})


def releases(spec: SelectPolicySpec, utilities: np.ndarray, draws: int = DRAWS
             ) -> tuple[Any, list[dict[str, Any]]]:
    setup = build_setup(spec, N_ROWS, SIDE)
    plan = sp_plan.plan(spec, N_ROWS, SIDE, rng=np.random.default_rng(0))
    docs = [release_selection(spec, setup, utilities * setup.n, plan,
                              noise=NoiseGuard(plan, test_seed=100 + k))[0] for k in range(draws)]
    return plan, docs


@pytest.mark.parametrize("regime", ["learned", "fixed"])
def test_value_gap_is_exact_at_the_worst_case(regime: str) -> None:
    """Every other policy just below best − t: the chosen policy is within t of the best in
    exactly 1 − α of the runs; a gap from 0.7x or 1.3x the temperature misses that rate."""
    extra = {"regime": "fixed", "fixed_scores": {"treated": "q1", "control": "q0", "bound": 5.0}
             } if regime == "fixed" else {}
    spec = make_spec(epsilon=2.0, **extra)
    plan, (doc,) = releases(spec, np.zeros(len(POLICIES)), draws=1)
    t = doc["accuracy"]["value_gap"]
    (pred,) = plan.accuracy
    assert pred.quantity == "value_gap" and pred.halfwidth == t and pred.bound and pred.headline
    names = [p["name"] for p in POLICIES]
    cov = {}
    for f in (0.7, 1.0, 1.3):  # the gap is linear in the temperature: f·t is the f-arm's gap
        values = np.concatenate([[5.0], np.full(len(POLICIES) - 1, 5.0 - f * t * (1 + 1e-9))])
        _, docs = releases(spec, values)
        cov[f] = float(np.mean([names.index(d["selected"]["name"]) == 0 for d in docs]))
    assert_coverage_three_arm(cov, ALPHA)
    # elsewhere a bound: a spread of values is covered at least at the level
    spread = np.linspace(5.0, 5.0 - 3 * t, len(POLICIES))
    _, docs = releases(spec, spread)
    chosen = np.array([spread[names.index(d["selected"]["name"])] for d in docs])
    assert np.mean(chosen >= 5.0 - t) >= 1 - ALPHA - 0.015


def test_value_interval_covers_at_its_rate_and_clamps() -> None:
    spec = make_spec(epsilon=1e6, value_epsilon=0.05)  # ε huge: policy 0 is always chosen
    values = np.concatenate([[9.5], np.full(len(POLICIES) - 1, 1.0)])  # near the bound 10
    plan, docs = releases(spec, values)
    _, value = plan.accuracy
    assert value.quantity == "value" and not value.bound
    raw = np.array([d["value_release"].get("clamped", {}).get("unclamped",
                                                              d["value_release"]["estimate"])
                    for d in docs])
    assert {d["selected"]["name"] for d in docs} == {"all"}
    cov = coverage_three_arm(np.abs(raw - 9.5), lambda f: f * value.halfwidth)
    assert_coverage_three_arm(cov, ALPHA)
    # the printed interval is ±h around the unclamped value, intersected with [0, 10]
    for d, r in zip(docs, raw, strict=True):
        rec = d["value_release"]
        lo, hi = np.clip([r - value.halfwidth, r + value.halfwidth], 0.0, 10.0)
        assert (rec["interval"]["lo"], rec["interval"]["hi"]) == pytest.approx((lo, hi))
        assert 0.0 <= rec["estimate"] <= 10.0
        assert ("clamped" in rec) is not (0.0 <= r <= 10.0)
        if 0.0 <= r <= 10.0:
            assert rec["estimate"] == r  # a value inside the bounds never moves
    assert any("clamped" in d["value_release"] for d in docs)  # h ≈ 1: some land above 10


def test_lower_direction_clamps_on_the_declared_bounds() -> None:
    """outcome_direction lower: the value is reported on Y's own scale, clamped to [0, 10]."""
    spec = make_spec(epsilon=1e6, value_epsilon=1e6, outcome_direction="lower")
    values = np.concatenate([[-3.0], np.full(len(POLICIES) - 1, -9.0)])  # −Y: best is Y = 3
    _, docs = releases(spec, values, draws=1)
    rec = docs[0]["value_release"]
    assert rec["estimate"] == pytest.approx(3.0, abs=1e-3) and "clamped" not in rec
    assert rec["interval"]["lo"] < rec["estimate"] < rec["interval"]["hi"]
    assert rec["interval"]["hi"] - rec["interval"]["lo"] < 1e-3


def test_the_pictures_curve_is_the_value_gaps_formula() -> None:
    """selection.png's guarantee curve is value_gap's own formula: it passes through the released
    (value_gap, 1 − α), starts at a uniform draw's 1/M at t = 0, and is the closed form
    1 − α(t) = 1/(1 + (M − 1)·exp(−t·nε/(2Δ))) of the exponential mechanism's bound."""
    from dpcausal.commands.select_policy.picture import guarantee_curve

    spec = make_spec(epsilon=2.0)
    _, (doc,) = releases(spec, np.zeros(len(POLICIES)), draws=1)
    t, level = guarantee_curve(doc)
    m, priv = len(POLICIES), doc["privacy"]
    assert t[0] == pytest.approx(0.0, abs=1e-12) and level[0] == pytest.approx(1.0 / m)
    closed = 1.0 / (1.0 + (m - 1) * np.exp(-t * priv["n"] * priv["epsilon"]
                                           / (2.0 * priv["sensitivity"])))
    np.testing.assert_allclose(level, closed, rtol=1e-9)
    gap, lv = doc["accuracy"]["value_gap"], doc["accuracy"]["level"]
    assert np.interp(lv, level, t) == pytest.approx(gap, rel=1e-3)
    assert level[-1] >= 0.999
