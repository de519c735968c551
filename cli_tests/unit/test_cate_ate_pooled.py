"""cate's ATE with ``outcome_model: pooled`` (issue #19): one DP mean of the outcome over both arms
as μ̂₀ = μ̂₁ — its sensitivity by neighbour search, its noise law (three arms), the plan's event,
the ε → ∞ limit against an independent clipped AIPW, and the residual clip it centres."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import special, stats

from cli_tests.helpers import assert_three_arm, ks_three_arm
from cli_tests.unit.test_cate_ate import COVS, make_spec, observational, release
from dpcausal.commands.cate.ate_scores import NuisanceRanges, centred_range
from dpcausal.commands.cate.ate_setup import (
    build_ate_setup,
    nuisance_learners,
    public_ranges,
    public_units,
)
from dpcausal.commands.cate.method import plan
from dpcausal.learners.dp_means import DPPooledMean
from dpcausal.learners.rounding import effective_half_range
from dpcausal.mechanisms import Draw, NoiseGuard

Y_LO, Y_HI = -5.0, 10.0


def _learner(eps: float = 5.0, **ate: Any) -> tuple[DPPooledMean, Any]:
    spec = make_spec(eps=eps, outcome_model="pooled", **ate)
    setup = build_ate_setup(spec, 400)
    _, out = nuisance_learners(setup)
    assert isinstance(out, DPPooledMean)
    return out, spec


class _Recording:
    """A guard stand-in that keeps the one draw and returns ``value + offset``."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset
        self.calls: list[tuple[Any, Any]] = []

    def release(self, mechanism: Any, value: Any, **_: Any) -> Any:
        self.calls.append((mechanism, np.asarray(value, dtype=np.float64)))
        return np.asarray(value, dtype=np.float64) + self.offset


class _KeepingGuard(NoiseGuard):
    """The real guard, keeping each admitted draw (the mechanism and its pre-noise input)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.draws: list[Draw] = []

    def _admit(self, *args: Any, **kwargs: Any) -> Draw:
        draw = super()._admit(*args, **kwargs)
        self.draws.append(draw)
        return draw


def _sum_input(learner: DPPooledMean, a: np.ndarray, y: np.ndarray) -> float:
    rec = _Recording()
    learner.fit(np.zeros((len(a), len(COVS))), a, y, noise=rec)  # type: ignore[arg-type]
    ((_, value),) = rec.calls
    return float(value[0])


def test_the_sum_never_moves_more_than_its_sensitivity_and_the_extremes_reach_it() -> None:
    """Neighbour search over replace-one pairs (random rows; the outcome's extremes, in one arm
    and across arms; values beyond the bounds): the stated sensitivity 2h (+ rounding) is never
    exceeded, and Y_hi vs Y_lo attains it."""
    learner, _ = _learner()
    rng = np.random.default_rng(0)
    h = effective_half_range(Y_LO, Y_HI)
    worst = 0.0
    for _ in range(200):
        a = rng.binomial(1, 0.3, learner.m).astype(float)
        y = rng.uniform(Y_LO - 3, Y_HI + 3, learner.m)  # clipped by the learner
        i = int(rng.integers(learner.m))
        for (arm1, y1), (arm2, y2) in (((1.0, Y_HI), (1.0, Y_LO)), ((1.0, Y_HI), (0.0, Y_LO)),
                                       ((0.0, Y_HI + 50.0), (1.0, Y_LO - 50.0)),
                                       ((float(rng.integers(2)), rng.uniform(-9, 14)),
                                        (float(rng.integers(2)), rng.uniform(-9, 14)))):
            a1, a2, v1, v2 = a.copy(), a.copy(), y.copy(), y.copy()
            a1[i], v1[i], a2[i], v2[i] = arm1, y1, arm2, y2
            shift = abs(_sum_input(learner, a1, v1) - _sum_input(learner, a2, v2))
            worst = max(worst, shift / learner.sum_sensitivity)
    assert worst <= 1.0
    assert worst > 0.999
    assert learner.sum_sensitivity == pytest.approx(2 * h, rel=1e-9)


def test_the_release_is_the_sum_plus_laplace_at_its_planned_scale() -> None:
    """Three arms: the released sum's noise is Laplace(2h/ε_outcome) — the true scale passes,
    0.7× and 1.3× fail — and the model is c + S̃/m, the same for both arms."""
    learner, spec = _learner()
    setup = build_ate_setup(spec, 400)
    pl = plan(spec, 400, {}, rng=np.random.default_rng(0))
    (event,) = [ev for ev in pl.events if ev.stage == "cate.ate.nuisance.outcome.sum"]
    assert event.epsilon == pytest.approx(setup.budget.outcome)
    assert event.sensitivity == learner.sum_sensitivity
    assert event.params["model"] == "pooled outcome mean (both arms)"
    assert not [ev for ev in pl.events if ev.stage.endswith(("outcome.sums", "outcome.counts"))]
    rng = np.random.default_rng(1)
    a = rng.binomial(1, 0.3, 400).astype(float)
    y = rng.uniform(Y_LO, Y_HI, 400)
    guard = _KeepingGuard(pl, test_seed=3)
    model = learner.fit(np.zeros((400, 3)), a, y, noise=guard)
    (draw,) = guard.draws
    exact = math.fsum(y - 0.5 * (Y_LO + Y_HI))
    assert float(draw.value[0]) == exact
    noise = draw.resample(4000, test_seed=11)[:, 0] - exact
    scale = learner.sum_sensitivity / setup.budget.outcome
    assert_three_arm(ks_three_arm(noise, lambda x, s: stats.laplace.cdf(x, scale=s), scale))
    mu = [model.predict(np.full((2, 3), 0.5), arm) for arm in (0, 1)]
    np.testing.assert_array_equal(mu[0], mu[1])
    assert abs(mu[0][0] - y.mean()) < 20 * scale / 400


def test_the_centre_is_clipped_into_the_bounds() -> None:
    learner, _ = _learner()
    model = learner.fit(np.zeros((400, 3)), np.zeros(400), np.full(400, Y_HI),
                        noise=_Recording(offset=1e9))  # type: ignore[arg-type]
    assert model.predict(np.zeros((1, 3)), 1)[0] == Y_HI


def test_at_huge_epsilon_the_estimate_is_an_independent_clipped_ipw_around_the_pooled_mean(
        ) -> None:
    r = 1.5
    frame = observational(600, 4)
    doc = release(make_spec(eps=1e9, outcome_model="pooled", residual_clip=r), frame)
    fit = doc["nuisance_models"]["fits"][0]
    s = np.clip(frame[COVS].to_numpy(), 0.0, 1.0)
    xt = np.column_stack([np.ones(len(s)), s - 0.5]) / math.sqrt(1 + 3 / 4) * (1 - 8 * 2.0**-53)
    e = np.clip(special.expit(xt @ np.array(fit["propensity_theta"])), 0.1, 0.9)
    th = np.array(fit["outcome_theta"])
    np.testing.assert_array_equal(th[0], th[1])
    c = float(np.clip(fit["outcome_center"] + xt[0] @ th[0], Y_LO, Y_HI))
    a, y = frame["A"].to_numpy(), frame["Y"].to_numpy()
    assert c == pytest.approx(float(np.clip(y, Y_LO, Y_HI).mean()), abs=1e-6)
    rho = np.clip(y - c, -r, r)
    psi = a * rho / e - (1 - a) * rho / (1 - e)
    assert doc["estimate"] == pytest.approx(float(psi.mean()), abs=1e-6)
    assert doc["nuisance_models"]["outcome_model"] == "pooled"


def test_a_residual_clip_with_the_pooled_centre_is_accepted_and_narrows_the_plan() -> None:
    pooled = plan(make_spec(outcome_model="pooled", residual_clip=2.0), 1000, {},
                  rng=np.random.default_rng(0))
    plain = plan(make_spec(outcome_model="pooled"), 1000, {}, rng=np.random.default_rng(0))
    assert pooled.accuracy[0].halfwidth < 0.6 * plain.accuracy[0].halfwidth


def test_a_pure_epsilon_release_with_a_public_propensity_is_allowed() -> None:
    setup = build_ate_setup(make_spec(delta=0.0, propensity=0.4, outcome_model="pooled"), 400)
    assert setup.outcome == "pooled"
    assert setup.budget.delta_outcome == 0.0


@pytest.mark.parametrize("weights", ["clipped", "overlap"])
@pytest.mark.parametrize("r", [None, 0.7, 4.0, 14.0])
@pytest.mark.parametrize("propensity", [None, 0.4])
def test_the_dry_runs_unit_is_the_largest_over_every_tied_centre(
        weights: str, r: float | None, propensity: float | None) -> None:
    """The plan's worst case for μ̂₀ = μ̂₁ = c̃, c̃ anywhere in the bounds, is attained at the
    candidates of public_ranges (a dense grid of c̃ never exceeds it), and is no larger than the
    untied worst case the means model uses."""
    extra: dict[str, Any] = {"weights": weights}
    if r is not None:
        extra["residual_clip"] = r
    if propensity is not None:
        extra["propensity"] = propensity
    setup = build_ate_setup(make_spec(outcome_model="pooled", **extra), 400)
    got = public_units(setup, propensity)["estimate"]
    e = public_ranges(setup, propensity)[0].e
    grid = max(hi - lo for lo, hi in (
        centred_range(weights, setup.y_bounds, NuisanceRanges(e, (c, c), (c, c)),  # type: ignore[arg-type]
                      residual_clip=r) for c in np.linspace(Y_LO, Y_HI, 3001)))
    assert grid <= got <= grid * (1 + 1e-12)
    means = build_ate_setup(make_spec(outcome_model="means", **extra), 400)
    assert got <= public_units(means, propensity)["estimate"]


@pytest.mark.parametrize("outcome", ["pooled", "means", "none"])
def test_a_trial_without_gaussian_stages_is_labelled_pure_whatever_the_specs_delta(
        outcome: str) -> None:
    """(Independent review, finding 3: the label followed privacy.delta, not the events.)"""
    pl = plan(make_spec(delta=1e-6, propensity=0.4, outcome_model=outcome), 400, {},
              rng=np.random.default_rng(0))
    assert all(ev.delta == 0.0 for ev in pl.events)
    assert pl.guarantee == "pure"
    observational = plan(make_spec(delta=1e-6, outcome_model=outcome), 400, {},
                         rng=np.random.default_rng(0))
    assert observational.guarantee == "approximate"


def test_an_outcome_penalty_without_the_ridge_is_refused_with_its_field() -> None:
    """(Independent review, finding 5: cate.nuisance.outcome_l2 was silently ignored.)"""
    from dpcausal.errors import SpecError

    for outcome in ("pooled", "means", "none"):
        with pytest.raises(SpecError, match="outcome_l2") as err:
            build_ate_setup(make_spec(outcome_model=outcome,
                                      cate={"nuisance": {"outcome_l2": 0.01}}), 400)
        assert err.value.field == "cate.nuisance.outcome_l2"
    assert build_ate_setup(make_spec(cate={"nuisance": {"outcome_l2": 0.01}}), 400).outcome \
        == "ridge"
