"""``audit privacy``'s adapter for cate's ATE (``dpcausal/commands/cate/audit_ate.py``): its gray-box
values are the release's real pre-noise quantities given the fixed releases it states, and its
planted pairs attain the score stages' sensitivities."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpcausal.commands.cate import audit_ate
from dpcausal.commands.cate.ate_estimate import unit
from dpcausal.commands.cate.ate_scores import NuisanceRanges, centred_range
from dpcausal.commands.cate.ate_setup import build_ate_setup, nuisance_learners
from dpcausal.commands.cate.estimate import clip_rows
from dpcausal.commands.cate.method import plan
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.errors import SpecError
from dpcausal.learners.dp_ridge import DPRidgeArms

COVS = ["x0", "x1", "x2"]
Y_LO, Y_HI = -5.0, 10.0


def make_spec(**ate: Any) -> CateSpec:
    return CateSpec.model_validate({
        "data": {"path": "d.csv", "columns": {"outcome": "Y", "treatment": "A",
                                              "covariates": COVS}},
        "bounds": {"outcome": [Y_LO, Y_HI], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 4.0, "delta": 1e-6},
        "cate": {"estimand": "ate", "propensity_clip": 0.1, "ate": ate}})


def frame(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 3))
    a = rng.binomial(1, 0.4, n).astype(float)
    y = rng.uniform(Y_LO, Y_HI, n)
    return pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2], "A": a, "Y": y})


def inputs(spec: CateSpec, data: pd.DataFrame) -> dict[str, Any]:
    pl = plan(spec, len(data), {}, rng=np.random.default_rng(0))
    return audit_ate.pre_noise(spec, data, pl, {})


@pytest.mark.parametrize("outcome", ["means", "ridge", "pooled"])
def test_nuisance_inputs_are_the_non_private_fits(outcome: str) -> None:
    spec = make_spec(outcome_model=outcome)
    data = frame()
    got = inputs(spec, data)
    setup = build_ate_setup(spec, len(data))
    x, a, y = clip_rows(spec, setup, data)
    prop, out = nuisance_learners(setup)
    assert prop is not None and out is not None
    np.testing.assert_array_equal(got[prop.stage], prop.fit_nonprivate(x, a))
    if isinstance(out, DPRidgeArms):
        np.testing.assert_array_equal(got[out.stage], out.fit_nonprivate(x, a, y).ravel())
    elif outcome == "pooled":
        r = y - 0.5 * (Y_LO + Y_HI)
        np.testing.assert_allclose(got[f"{out.stage}.sum"], [r.sum()], rtol=1e-12)
    else:
        r = y - 0.5 * (Y_LO + Y_HI)
        np.testing.assert_allclose(got[f"{out.stage}.sums"], [r[a == 0].sum(), r[a == 1].sum()],
                                   rtol=1e-12)
        np.testing.assert_array_equal(got[f"{out.stage}.counts"], [(a == 0).sum(), (a == 1).sum()])


def test_score_inputs_are_the_sums_at_the_stated_fixed_releases() -> None:
    """ê ≡ κ, μ̂ ≡ c, τ̃ = 0: the estimate's input is Σu/R and the variance's Σu²/E², with u the
    AIPW score computed here independently."""
    spec = make_spec(groups=[{"name": "low", "where": {"x0": [0.0, 0.5]}}])
    data = frame()
    got = inputs(spec, data)
    kappa, c = 0.1, 0.5 * (Y_LO + Y_HI)
    a, y = data["A"].to_numpy(), data["Y"].to_numpy()
    u = a * (y - c) / kappa - (1 - a) * (y - c) / (1 - kappa)
    lo, hi = centred_range("clipped", (Y_LO, Y_HI), NuisanceRanges((kappa, kappa), (c, c), (c, c)))
    assert lo == pytest.approx(-(Y_HI - c) / kappa) and hi == pytest.approx((Y_HI - c) / kappa)
    n = len(data)
    r_u = unit(hi - lo, n, max(-lo, hi))
    e2 = max(-lo, hi) ** 2
    assert got["cate.ate.estimate"][0] == pytest.approx(u.sum() / r_u, rel=1e-12)
    assert got["cate.ate.variance"][0] == pytest.approx((u * u).sum() / unit(e2, n, e2),
                                                        rel=1e-12)
    low = data["x0"].to_numpy() <= 0.5
    r_e = unit(max(-lo, hi), n, max(-lo, hi))
    assert got["cate.ate.groups.sums"][0] == pytest.approx(u[low].sum() / r_e, rel=1e-12)


@pytest.mark.parametrize(("weights", "clip"), [("clipped", None), ("overlap", None),
                                               ("clipped", 3.0), ("overlap", 3.0)])
def test_planted_pairs_attain_the_score_sensitivities_and_never_exceed_them(
        weights: str, clip: float | None) -> None:
    """(With a residual clip r the planted rows' residuals Y − c reach ±r: still attained.)"""
    spec = make_spec(weights=weights, residual_clip=clip,
                     groups=[{"name": "low", "where": {"x0": [0.0, 0.6]}},
                             {"name": "high", "where": {"x0": [0.4, 1.0]}}])
    data = frame()
    pl = plan(spec, len(data), {}, rng=np.random.default_rng(0))
    sens = {ev.stage: ev.sensitivity for ev in pl.events}
    l2 = {ev.stage for ev in pl.events if ev.norm == "l2"}
    reached: dict[str, float] = {}
    for _, d, dp in audit_ate.neighbours(spec, data, np.random.default_rng(1), 16):
        one = audit_ate.pre_noise(spec, data if d is None else d, pl, {})
        two = audit_ate.pre_noise(spec, dp, pl, {})
        for stage, value in one.items():
            diff = np.abs(np.asarray(value) - np.asarray(two[stage]))
            shift = np.linalg.norm(diff) if stage in l2 else diff.sum(axis=-1).max()
            reached[stage] = max(reached.get(stage, 0.0), float(shift) / sens[stage])
    assert max(reached.values()) <= 1.0 + 1e-9, reached
    want = ["estimate", "variance", "groups.sums"] + (["denominator"] if weights == "overlap"
                                                      else [])
    for stage in want:
        assert reached[f"cate.ate.{stage}"] > 0.999, reached
    # two overlapping groups (m = 2) that cover every row: a pair moves the sizes and squared
    # sums in at most 2 of the 2m = 4 units
    assert reached["cate.ate.groups.sizes"] == pytest.approx(0.5, rel=1e-6)


def test_group_points() -> None:
    spec = make_spec(groups=[{"name": "a", "where": {"x0": [0.0, 0.5]}},
                             {"name": "b", "where": {"x0": [0.5, 1.0], "x1": [0.0, 0.3]}},
                             {"name": "c", "where": {"x2": [0.9, 1.0]}}])
    setup = build_ate_setup(spec, 100)
    most, p, q = audit_ate.group_points(setup)
    assert audit_ate._members(setup, most) == {0, 1, 2}
    assert len(audit_ate._members(setup, p) ^ audit_ate._members(setup, q)) == 3


def test_the_objective_perturbation_propensity_is_refused_with_its_field() -> None:
    # its loss is a density ratio of the perturbed solve: no pre-noise value to audit (exit 2, not 1)
    spec = make_spec(propensity_learner="objective")
    with pytest.raises(SpecError, match="objective perturbation") as err:
        audit_ate.synthesize(spec, 50, np.random.default_rng(0))
    assert err.value.field == "cate.ate.propensity_learner"


def test_the_planted_outcome_pair_attains_the_pooled_means_sensitivity() -> None:
    """outcome_model: pooled — Y at the top vs the bottom on a quiet background moves the one sum by
    2h: the stated sensitivity (less its rounding allowance), never more."""
    spec = make_spec(outcome_model="pooled")
    data = frame()
    pl = plan(spec, len(data), {}, rng=np.random.default_rng(0))
    stage = "cate.ate.nuisance.outcome.sum"
    (sens,) = [ev.sensitivity for ev in pl.events if ev.stage == stage]
    reached = 0.0
    for where, d, dp in audit_ate.neighbours(spec, data, np.random.default_rng(1), 16):
        one = audit_ate.pre_noise(spec, data if d is None else d, pl, {})[stage]
        two = audit_ate.pre_noise(spec, dp, pl, {})[stage]
        shift = float(np.abs(np.asarray(one) - np.asarray(two)).sum()) / sens
        assert shift <= 1.0, where
        reached = max(reached, shift)
    assert reached > 0.999
