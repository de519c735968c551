"""cate with estimand: ate — spec, plan, score bounds, sensitivities, intervals, the ε → ∞ limit."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from cli_tests.helpers import assert_coverage_three_arm, coverage_three_arm
from dpcausal.accounting.budget import compose_events
from dpcausal.audit.blackbox import RecordingGuard
from dpcausal.commands.cate.ate_estimate import fit_models, release_all, score_rows
from dpcausal.commands.cate.ate_interval import (
    normal_laplace_cdf,
    total_halfwidth,
    variance_inflation,
)
from dpcausal.commands.cate.ate_scores import NuisanceRanges, centred_range, score_parts
from dpcausal.commands.cate.ate_setup import build_ate_setup, max_overlap, unit_mechanisms
from dpcausal.commands.cate.estimate import clip_rows
from dpcausal.commands.cate.method import plan, run
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.errors import SpecError
from dpcausal.mechanisms import NoiseGuard
from dpcausal.spec.load import load_spec

COVS = ["x0", "x1", "x2"]


def observational(n: int, seed: int, effect: float = 2.0) -> pd.DataFrame:
    """Confounded data: x in [0, 1]³, logistic propensity, linear outcome, Y in [-5, 10]."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 3))
    e = special.expit(-0.5 + 1.5 * x[:, 0] - x[:, 1])
    a = rng.binomial(1, e).astype(float)
    y = np.clip(1.0 + 2.0 * x[:, 0] + x[:, 2] + effect * a + rng.normal(0, 1.0, n), -5, 10)
    return pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2], "A": a, "Y": y})


def make_spec(eps: float = 5.0, delta: float = 1e-6, **ate: Any) -> CateSpec:
    cate = ate.pop("cate", {})
    return CateSpec.model_validate({
        "data": {"path": "d.csv", "columns": {"outcome": "Y", "treatment": "A",
                                              "covariates": COVS}},
        "bounds": {"outcome": [-5.0, 10.0], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": eps, "delta": delta},
        "cate": {"estimand": "ate", "ate": ate, **cate}})


def release(spec: CateSpec, frame: pd.DataFrame, seed: int = 0) -> dict[str, Any]:
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    guard = NoiseGuard(pl, test_seed=seed)
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0), noise=guard)
    guard.check_all_drawn()
    doc: dict[str, Any] = rel.documents["ate.json"]
    return doc


# ---------------------------------------------------------------------------------------- spec


@pytest.mark.parametrize(("cate", "message"), [
    ({"mode": "queries"}, "cate.mode: shapes the τ"),
    ({"grid": {"points": 5}}, "cate.grid: shapes the τ"),
    ({"bandwidth": 1.0}, "cate.bandwidth"),
])
def test_cate_only_fields_are_refused_with_the_ate(cate: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_spec(cate=cate)


def test_ate_section_needs_the_estimand_and_groups_need_distinct_names() -> None:
    with pytest.raises(ValueError, match=r"set cate\.estimand: ate"):
        CateSpec.model_validate({"privacy": {"epsilon": 1.0}, "cate": {
            "grid": {"points": 5}, "ate": {}}})
    with pytest.raises(ValueError, match="'all' is the name"):
        make_spec(groups=[{"name": "all", "where": {"x0": [0, 0.5]}}])
    with pytest.raises(ValueError, match="same name"):
        make_spec(groups=[{"name": "g", "where": {"x0": [0, 0.5]}},
                          {"name": "g", "where": {"x1": [0, 0.5]}}])
    with pytest.raises(ValueError, match="sd_bound goes with variance: bound"):
        make_spec(sd_bound=3.0)


def test_groups_load_from_a_yaml_spec(tmp_path: Path) -> None:
    """Through the strict YAML path (regression: a tuple-typed range refused every YAML list)."""
    path = tmp_path / "spec.yaml"
    path.write_text(
        "data: {path: d.csv, columns: {outcome: Y, treatment: A, covariates: [x0, x1, x2]}}\n"
        "bounds: {outcome: [-5.0, 10.0], covariates: [0.0, 1.0]}\n"
        "privacy: {epsilon: 1.0, delta: 1.0e-6}\n"
        "cate: {estimand: ate, ate: {groups: [{name: g, where: {x0: [0.0, 0.5]}}]}}\n",
        encoding="utf-8")
    spec, _ = load_spec(path, CateSpec)
    assert spec.cate.ate_spec.groups[0].where == {"x0": [0.0, 0.5]}
    path.write_text(path.read_text(encoding="utf-8").replace("[0.0, 0.5]", "[0.5, 0.0]"),
                    encoding="utf-8")
    with pytest.raises(SpecError, match="group 'g', x0: lower bound must be < upper"):
        load_spec(path, CateSpec)


def test_public_refusals_before_any_row() -> None:
    with pytest.raises(SpecError, match="need δ > 0"):
        build_ate_setup(make_spec(delta=0.0), 1000)
    with pytest.raises(SpecError, match="not clipped"):
        build_ate_setup(make_spec(propensity=0.5, cate={"propensity_clip": 0.2}), 1000)
    with pytest.raises(SpecError, match="outside its public bound"):
        build_ate_setup(make_spec(groups=[{"name": "g", "where": {"x0": [2, 3]}}]), 1000)
    with pytest.raises(SpecError, match="'nope', which is not"):
        build_ate_setup(make_spec(groups=[{"name": "g", "where": {"nope": [0, 1]}}]), 1000)
    # a trial's public propensity and the arms' means: pure ε, δ = 0 allowed
    setup = build_ate_setup(make_spec(delta=0.0, propensity=0.4, outcome_model="means"), 1000)
    assert setup.budget.delta_propensity == setup.budget.delta_outcome == 0.0


# ---------------------------------------------------------------------------------------- plan


@pytest.mark.parametrize("rows", ["all", "split", "crossfit"])
def test_every_row_pays_at_most_epsilon(rows: str) -> None:
    spec = make_spec(eps=2.0, nuisance_rows=rows, groups=[{"name": "g", "where": {"x0": [0, .5]}}])
    pl = plan(spec, 1000, {}, rng=np.random.default_rng(0))
    cost = compose_events([e.to_dict() for e in pl.events])
    assert cost.epsilon == pytest.approx(2.0)
    assert cost.delta == pytest.approx(1e-6)
    parts = {e.partition for e in pl.events}
    expected = {"all": {None}, "split": {"cate.ate.rows/nuisance", "cate.ate.rows/scored"},
                "crossfit": {"cate.ate.rows/fold1", "cate.ate.rows/fold2", None}}
    assert parts == expected[rows]


def test_outcome_model_auto_follows_the_penalty_rule() -> None:
    small = build_ate_setup(make_spec(eps=1.0), 300)
    large = build_ate_setup(make_spec(eps=1e9), 300)
    assert small.outcome == "means"
    assert large.outcome == "ridge"
    assert large.outcome_l2 is not None
    assert large.outcome_l2.kept > 0.9


def test_max_overlap_is_the_largest_common_intersection() -> None:
    def box(lo: list[float], hi: list[float]) -> tuple[np.ndarray, np.ndarray]:
        return np.array(lo), np.array(hi)

    disjoint = (box([0, 0], [.4, 1]), box([.5, 0], [1, 1]))
    nested = (box([0, 0], [1, 1]), box([.2, .2], [.4, .4]), box([.3, .3], [.9, .9]))
    chain = (box([0, 0], [.5, 1]), box([.4, 0], [.7, 1]), box([.6, 0], [1, 1]))  # a–b, b–c only
    assert max_overlap(()) == 0
    assert max_overlap(disjoint) == 1
    assert max_overlap(nested) == 3
    assert max_overlap(chain) == 2


# ------------------------------------------------------------------------- score bounds (Lemma 1)


@pytest.mark.parametrize("weights", ["clipped", "overlap"])
def test_score_bounds_hold_and_are_attained(weights: str) -> None:
    rng = np.random.default_rng(1)
    for _ in range(100):
        e = tuple(np.sort(rng.uniform(0.05, 0.95, 2)))
        m0 = tuple(np.sort(rng.uniform(-3, 7, 2)))
        m1 = tuple(np.sort(rng.uniform(-3, 7, 2)))
        ranges = NuisanceRanges(e, m0, m1)  # type: ignore[arg-type]
        center = float(rng.uniform(-5, 5))
        lo, hi = centred_range(weights, (-3.0, 7.0), ranges, center)  # type: ignore[arg-type]
        n = 20_000
        vals = [rng.uniform(*e, n), rng.uniform(*m0, n), rng.uniform(*m1, n)]
        # the vertices and the e-ends are where the extremes are: include them
        grid = np.array(list(itertools.product(e, m0, m1))).T
        ev, m0v, m1v = (np.concatenate([v, g]) for v, g in zip(vals, grid, strict=True))
        y = rng.choice([-3.0, 7.0], ev.size)
        a = rng.integers(0, 2, ev.size).astype(float)
        u, v = score_parts(weights, a, y, ev, m0v, m1v)  # type: ignore[arg-type]
        dev = u - center * v
        assert dev.min() >= lo - 1e-9
        assert dev.max() <= hi + 1e-9
        assert dev.max() - dev.min() >= 0.9 * (hi - lo)


# ------------------------------------------------------------------------------ sensitivities


@pytest.mark.parametrize("clip", [None, 1.5])
@pytest.mark.parametrize("ate", [{"propensity": 0.4, "outcome_model": "means"}, {},
                                 {"weights": "overlap"}])
def test_score_stage_never_moves_more_than_its_unit(ate: dict[str, Any], clip: float | None
                                                    ) -> None:
    """Replace one row by extreme rows (box corners × arms × outcome bounds) with the released
    models fixed: every released statistic moves by at most its unit × planned sensitivity. With
    a residual clip r (cate.ate.residual_clip; the outcome sd is 1) the outcomes also sit around
    μ̂ ≈ 2.5, at μ̂ ± r and beyond."""
    spec = make_spec(eps=3.0, groups=[{"name": "lo", "where": {"x0": [0, .5]}},
                                      {"name": "hi", "where": {"x0": [.4, 1]}}],
                     residual_clip=clip, **ate)
    outs = [-5.0, 10.0]
    if clip is not None:
        outs += [2.5 + k * clip for k in (0.0, -1.0, 1.0, -1.01, 1.01, 3.0)]
    setup, rel, worst = neighbour_search(spec, observational(400, 0), outs)
    mechs = unit_mechanisms(setup)
    assert mechs.variance is not None
    assert mechs.group_sums is not None
    assert worst["u"] <= rel.units["estimate"] * mechs.estimate.l1_sensitivity
    assert worst["q"] <= rel.units["variance"] * mechs.variance.l1_sensitivity
    assert worst["gs"] <= rel.units["groups.sums"] * mechs.group_sums.l1_sensitivity
    assert worst["gn"] <= rel.units["groups.sizes"] * 2 * setup.overlap
    assert worst["u"] > 0.5 * rel.units["estimate"]  # the search reaches the scale of the bound


def neighbour_search(spec: CateSpec, frame: pd.DataFrame, outcomes: list[float]
                     ) -> tuple[Any, Any, dict[str, float]]:
    """(setup, releases, the largest change of each score-stage statistic) when row 7 is replaced
    by box corners × arms × ``outcomes``, the released models fixed."""
    setup = build_ate_setup(spec, len(frame))
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    x, a, y = clip_rows(spec, setup, frame)
    fitted = fit_models(spec, setup, x, a, y, NoiseGuard(pl, test_seed=3))
    base = score_rows(spec, setup, fitted, x, a, y)
    rel = release_all(spec, setup, base, NoiseGuard(pl, test_seed=5))
    worst: dict[str, float] = {}
    for corner in itertools.product([0.0, 1.0], repeat=3):
        for arm, out in itertools.product([0.0, 1.0], outcomes):
            x2, a2, y2 = x.copy(), a.copy(), y.copy()
            x2[7], a2[7], y2[7] = corner, arm, out
            other = score_rows(spec, setup, fitted, x2, a2, y2)
            for name, (s1, s2) in _stats(setup, rel.tau, base, other).items():
                worst[name] = max(worst.get(name, 0.0), float(np.abs(s1 - s2).sum()))
    return setup, rel, worst


def _stats(setup: Any, tau: float, a: Any, b: Any) -> dict[str, tuple[Any, Any]]:
    """The score-stage statistics of two scored data sets, centred at the released τ̃."""
    out = {}
    for key, sc in (("a", a), ("b", b)):
        lo, hi = centred_range(setup.weights, setup.y_bounds, sc.ranges, tau,
                               residual_clip=setup.residual_clip)
        dev = np.clip(sc.u - tau * sc.v, lo, hi)
        member = np.column_stack([np.all((sc.x >= g0) & (sc.x <= g1), axis=1)
                                  for g0, g1 in setup.group_boxes])
        out[key] = {"u": np.array([sc.u.sum()]), "q": np.array([(dev * dev).sum()]),
                    "gs": (member * dev[:, None]).sum(axis=0),
                    "gn": (member * sc.v[:, None]).sum(axis=0)}
    return {k: (out["a"][k], out["b"][k]) for k in out["a"]}


# ------------------------------------------------------------------------------ the interval law


def test_normal_laplace_law_matches_draws() -> None:
    rng = np.random.default_rng(0)
    s, b = 0.7, 0.4
    draws = s * rng.standard_normal(400_000) + rng.laplace(0, b, 400_000)
    grid = np.array([-2.0, -0.5, 0.0, 0.3, 1.5])
    assert np.allclose(normal_laplace_cdf(grid, s, b), [(draws <= g).mean() for g in grid],
                       atol=3e-3)
    h = total_halfwidth(s, b, 0.05)
    assert abs(float(np.mean(np.abs(draws) <= h)) - 0.95) < 2e-3
    assert total_halfwidth(0.0, b, 0.05) == pytest.approx(b * math.log(20))
    assert total_halfwidth(s, 0.0, 0.05) == pytest.approx(s * stats.norm.ppf(0.975))
    # three arms: the interval at 0.7× or 1.3× the Laplace scale misses its level
    for f in (0.7, 1.3):
        assert abs(float(np.mean(np.abs(draws) <= total_halfwidth(s, f * b, 0.05))) - 0.95) > 0.005


@pytest.mark.parametrize(("ratio", "s2_over_b2"), [(1.0, 0.5), (1.0, 3.0), (10.0, 20.0)])
def test_variance_inflation_restores_coverage(ratio: float, s2_over_b2: float) -> None:
    """Monte Carlo of the released interval τ̃ ± H(max(w̃ + kβ, 0)): the calibrated k covers at
    1 − α; the plug-in (k = 0) does not where the variance noise is large."""
    rng = np.random.default_rng(2)
    b, alpha, reps = 1.0, 0.05, 40_000
    beta = ratio * b * b
    s2 = s2_over_b2 * b * b
    err = math.sqrt(s2) * rng.standard_normal(reps) + rng.laplace(0, b, reps)
    w = s2 + rng.laplace(0, beta, reps)
    k = variance_inflation(b, beta, alpha)
    grid = np.linspace(0, 4 * s2 + 20 * beta, 400)
    table = np.array([total_halfwidth(math.sqrt(g), b, alpha) for g in grid])

    def cover(kk: float) -> float:
        h = np.interp(np.maximum(w + kk * beta, 0.0), grid, table)
        return float(np.mean(np.abs(err) <= h))

    assert cover(k) >= 1 - alpha - 0.004
    if ratio >= 1.0 and s2_over_b2 <= 3.0:
        assert cover(0.0) < cover(k)


# ----------------------------------------------------------------------------- the release


def test_at_huge_epsilon_the_estimate_is_an_independent_aipw_of_the_released_models() -> None:
    spec = make_spec(eps=1e9)
    frame = observational(600, 4)
    doc = release(spec, frame)
    fit = doc["nuisance_models"]["fits"][0]
    lo, hi = np.zeros(3), np.ones(3)
    s = (np.clip(frame[COVS].to_numpy(), lo, hi) - lo) / (hi - lo)
    xt = np.column_stack([np.ones(len(s)), s - 0.5]) / math.sqrt(1 + 3 / 4) * (1 - 8 * 2.0**-53)
    e = np.clip(special.expit(xt @ np.array(fit["propensity_theta"])), 0.1, 0.9)
    th = np.array(fit["outcome_theta"])
    mu = [np.clip(fit["outcome_center"] + xt @ th[arm], -5, 10) for arm in (0, 1)]
    a, y = frame["A"].to_numpy(), frame["Y"].to_numpy()
    psi = mu[1] - mu[0] + a * (y - mu[1]) / e - (1 - a) * (y - mu[0]) / (1 - e)
    assert doc["estimate"] == pytest.approx(float(psi.mean()), abs=1e-6)
    assert doc["estimate"] == pytest.approx(2.0, abs=0.3)  # and it recovers the effect
    t = doc["total_interval"]
    half = (t["hi"] - t["lo"]) / 2
    assert half == pytest.approx(1.96 * psi.std() / math.sqrt(len(psi)), rel=0.02)


def test_release_document_and_table() -> None:
    spec = make_spec(eps=4.0, groups=[{"name": "young", "where": {"x0": [0, .5]}}])
    frame = observational(800, 5)
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0),
              noise=NoiseGuard(pl, test_seed=1))
    table = rel.tables["ate"]
    assert list(table.columns) == ["group", "ate", "ate_noise_lo", "ate_noise_hi", "ate_total_lo",
                                   "ate_total_hi", "ate_clamped", "size"]
    assert list(table["group"]) == ["all", "young"]
    assert (table["ate_total_lo"] <= table["ate"]).all()
    assert (table["ate"] <= table["ate_total_hi"]).all()
    assert (table["ate_total_hi"] - table["ate_total_lo"]
            >= table["ate_noise_hi"] - table["ate_noise_lo"] - 1e-12).all()
    doc = rel.documents["ate.json"]
    assert doc["estimand"] == "ATE"
    assert doc["alpha"] == 0.05
    assert doc["n"] == 800
    assert doc["interval"]["kind"] == "noise"
    assert doc["total_interval"]["kind"] == "total"
    assert {e["stage"] for e in doc["events"]} == {e.stage for e in pl.events}
    assert rel.summary["ate"]["estimate"] == doc["estimate"]
    assert rel.summary["ate"]["total_interval"] == doc["total_interval"]
    assert rel.summary["alpha"] == 0.05
    assert [a.quantity for a in pl.accuracy] == ["ate"]
    assert pl.accuracy[0].headline and pl.accuracy[0].bound
    # the release's noise interval is never wider than the dry run's prediction
    noise = doc["interval"]
    assert (noise["hi"] - noise["lo"]) / 2 <= pl.accuracy[0].halfwidth * (1 + 1e-12)


def test_public_sd_bound_interval() -> None:
    spec = make_spec(eps=1e9, propensity=0.5, outcome_model="none", variance="bound",
                     sd_bound=4.0)
    frame = observational(500, 6)
    frame["A"] = np.random.default_rng(0).binomial(1, 0.5, 500).astype(float)
    doc = release(spec, frame)
    t = doc["total_interval"]
    assert (t["hi"] - t["lo"]) / 2 == pytest.approx(1.959964 * 4.0 / math.sqrt(500), rel=1e-4)
    assert [e["stage"] for e in doc["events"]] == ["cate.ate.estimate"]


def test_outcome_direction_lower_releases_the_effect_on_minus_y() -> None:
    frame = observational(500, 7)
    higher = release(make_spec(eps=3.0), frame, seed=4)
    lower = release(make_spec(eps=3.0, cate={"outcome_direction": "lower"}), frame, seed=4)
    assert lower["estimate"] == pytest.approx(-higher["estimate"])
    for a, b in (("lo", "hi"), ("hi", "lo")):
        assert lower["total_interval"][a] == pytest.approx(-higher["total_interval"][b])
        assert lower["interval"][a] == pytest.approx(-higher["interval"][b])
    assert lower["effect"].startswith("E[Y(control) - Y(treated)]")
    # the same law as the release on −Y with negated bounds: near ε → ∞ (the nuisances' analytic
    # Gaussian noise shrinks like 1/√ε only, so the two agree to its size, not to 1e-6)
    big = release(make_spec(eps=1e9, cate={"outcome_direction": "lower"}), frame)
    spec = make_spec(eps=1e9)
    spec = spec.model_copy(update={"bounds": spec.bounds.model_copy(
        update={"outcome": (-10.0, 5.0)})})
    on_minus_y = release(spec, frame.assign(Y=-frame["Y"]))
    assert big["estimate"] == pytest.approx(on_minus_y["estimate"], abs=0.02)
    assert big["estimate"] == pytest.approx(-2.0, abs=0.4)


def test_noise_interval_covers_at_its_rate() -> None:
    """Issue 16: the printed noise interval of the ATE covers the released estimate's noise at its
    rate (2,000 seeded draws of the release's own Laplace mechanism at its own input; the printed
    scale within 1.5 points of 1 − α, 0.7x and 1.3x outside)."""
    spec = make_spec(eps=2.0)
    frame = observational(600, 8)
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    guard = RecordingGuard(pl, test_seed=3)
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0), noise=guard)
    doc = rel.documents["ate.json"]
    draw = guard.draws["cate.ate.estimate"]
    unit = doc["units"]["estimate"]
    noise = (draw.resample(2000, test_seed=21)[:, 0] - float(np.asarray(draw.value)[0])) * unit
    tau_noise = noise / doc["n"]  # τ̃ = Ũ/n: the noise of the released estimate
    iv = doc["interval"]
    half = (iv["hi"] - iv["lo"]) / 2
    assert iv["lo"] < doc["estimate"] < iv["hi"]  # no clamping here
    cov = coverage_three_arm(np.abs(tau_noise), lambda f: f * half)
    assert_coverage_three_arm(cov, 0.05)


def test_the_shrinkage_warning_points_to_the_objective_learner_only_where_it_applies() -> None:
    # a small ε and n shrink the output learner's propensity model: the dry run's warning names
    # the objective learner; with a public propensity (a trial) there is no model to change
    shrunk = plan(make_spec(eps=0.5), 300, {}, rng=np.random.default_rng(0))
    assert "propensity_learner: objective" in shrunk.details["warning"]
    trial = plan(make_spec(eps=0.5, propensity=0.4, outcome_model="ridge"), 300, {},
                 rng=np.random.default_rng(0))
    assert "outcome model's penalty" in trial.details["warning"]
    assert "propensity_learner: objective" not in trial.details["warning"]
