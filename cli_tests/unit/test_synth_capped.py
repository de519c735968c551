"""synth-control ``method: capped``: the estimator, its plan, the release and its intervals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from cli_tests.helpers import assert_coverage_three_arm, coverage_three_arm
from dpcausal.commands.synth_control import capped
from dpcausal.commands.synth_control.capped_plan import mechanisms_of, scales_of
from dpcausal.commands.synth_control.capped_run import halfwidth
from dpcausal.commands.synth_control.layout import build_layout
from dpcausal.commands.synth_control.method import METHOD
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import SpecError
from dpcausal.mechanisms import NoiseGuard
from dpcausal.mechanisms._rng import noise_generator


def panel(n: int = 6, t0: int = 8, h: int = 5, seed: int = 0) -> pd.DataFrame:
    """A long panel: donors D0..D(n−1), the target T equal to the mean of D0 and D1 plus 3 after."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(20, 80, (n, 1)) + np.linspace(0, 10, t0 + h) + rng.normal(0, 0.5, (n, t0 + h))
    y = x[:2].mean(axis=0) + np.where(np.arange(t0 + h) >= t0, 3.0, 0.0)
    units = ["T", *[f"D{i}" for i in range(n)]]
    return pd.DataFrame({"unit": np.repeat(units, t0 + h), "time": np.tile(np.arange(t0 + h), n + 1),
                         "y": np.vstack([y, x]).ravel()})


def make_spec(path: Path | str = "p.csv", t0: int = 8, eps: float = 1.0, delta: float = 0.0,
              **section: Any) -> SynthControlSpec:
    return SynthControlSpec.model_validate({
        "data": {"path": str(path), "columns": {"unit": "unit", "time": "time", "outcome": "y"}},
        "bounds": {"outcome": [0.0, 100.0]}, "privacy": {"epsilon": eps, "delta": delta},
        "synth_control": {"target": "T", "treatment_time": t0, "method": "capped", **section}})


def plan_of(spec: SynthControlSpec, frame: pd.DataFrame) -> Any:
    return METHOD.plan(spec, len(frame), {"panel": frame[["unit", "time"]]},
                       rng=np.random.default_rng(0))


def test_nearest_ranks_by_distance_then_index() -> None:
    d = np.array([0.3, 0.1, 0.3, 0.0, 0.1])
    np.testing.assert_array_equal(capped.nearest(d, 3), [0, 1, 0, 1, 1])
    np.testing.assert_array_equal(capped.nearest(d, 4), [1, 1, 0, 1, 1])  # tie: lower index


def test_one_donor_change_swaps_at_most_one() -> None:
    """Lemma 1 of the proof, on random distances with ties."""
    rng = np.random.default_rng(1)
    for _ in range(3000):
        n = int(rng.integers(1, 9))
        k = int(rng.integers(1, n + 1))
        d = rng.choice([0.0, 0.5, 1.0, 2.0], n) if rng.uniform() < 0.5 else rng.uniform(0, 1, n)
        dp = d.copy()
        j = int(rng.integers(n))
        dp[j] = rng.choice([0.0, 0.5, 1.0, 2.0, rng.uniform(0, 3)])
        s, sp = capped.nearest(d, k), capped.nearest(dp, k)
        diff = np.flatnonzero(s != sp)
        assert len(diff) in (0, 2)
        if len(diff) == 2:
            assert j in diff
        if s[j] and sp[j]:
            assert np.array_equal(s, sp)


def test_intervals_band_and_blocks() -> None:
    y = np.array([-5.0, 10.0, 50.0, 99.0, 200.0])
    lo, hi = capped.intervals(y, 0.0, 100.0, None)
    assert np.all(lo == 0.0) and np.all(hi == 100.0)
    lo, hi = capped.intervals(y, 0.0, 100.0, 20.0)
    np.testing.assert_allclose(lo, [0, 0, 30, 79, 80])
    np.testing.assert_allclose(hi, [20, 30, 70, 100, 100])
    assert [(s.start, s.stop) for s in capped.block_slices(7, 3)] == [(0, 2), (2, 5), (5, 7)]
    assert len(capped.block_slices(4, None)) == 4 and len(capped.block_slices(2, 5)) == 2


def test_plan_events_shares_and_sensitivities() -> None:
    frame = panel()
    spec = make_spec(eps=2.0, k=2, releases={"fit": True})
    plan = plan_of(spec, frame)
    stages = [e.stage for e in plan.events]
    assert stages == [capped.STAGE_AVERAGE, capped.STAGE_PATH, capped.STAGE_FIT]
    eps = {e.stage: e.epsilon for e in plan.events}
    assert sum(eps.values()) == pytest.approx(2.0)
    assert eps[capped.STAGE_AVERAGE] == pytest.approx(2.0 * 0.5)  # 0.5 / (0.5 + 0.3 + 0.2)
    av = plan.event(capped.STAGE_AVERAGE)
    assert av.sensitivity == pytest.approx(100.0 / 2) and av.noise_scale == pytest.approx(50.0)
    assert plan.event(capped.STAGE_PATH).sensitivity == pytest.approx(5 * 50.0)
    assert plan.guarantee == "pure" and plan.dp_guarantee
    assert plan.predicted().quantity == "average_post_effect"
    assert plan.predicted().halfwidth == pytest.approx(50.0 * np.log(20.0))
    assert plan.neighbouring["relation"] == "replace-one donor"


def test_plan_band_blocks_private_and_gaussian_path() -> None:
    frame = panel()
    spec = make_spec(eps=1.0, delta=1e-6, k=3, band=0.1, weights="private",
                     releases={"path_blocks": 2}, shares={"weights": 1.0, "average": 1.0,
                                                          "path": 2.0})
    plan = plan_of(spec, frame)
    assert [e.stage for e in plan.events] == [capped.STAGE_CHOICE, capped.STAGE_AVERAGE,
                                              capped.STAGE_PATH]
    assert plan.event(capped.STAGE_CHOICE).kind == "subset_exponential"
    assert plan.event(capped.STAGE_CHOICE).sensitivity == pytest.approx(10.0)  # reach = B
    assert plan.event(capped.STAGE_AVERAGE).sensitivity == pytest.approx(20.0 / 3)  # 2B / k
    path = plan.event(capped.STAGE_PATH)
    assert path.epsilon == pytest.approx(0.5)
    assert path.kind == "laplace" and path.sensitivity == pytest.approx(2 * 20.0 / 3)
    assert plan.details["path_values"] == 2
    assert "no effect larger than 10" in plan.details["warning_band"]
    # δ > 0 and a long path: the Gaussian path has the smaller per-value sd
    spec_g = make_spec(eps=1.0, delta=1e-6, k=2, t0=3)
    frame_g = panel(t0=3, h=40)
    assert plan_of(spec_g, frame_g).event(capped.STAGE_PATH).kind == "gaussian"
    assert plan_of(make_spec(eps=1.0, k=2, t0=3), frame_g).event(capped.STAGE_PATH).kind == "laplace"


def test_individual_unit_plan_and_receipt_wording() -> None:
    frame = panel()
    spec = make_spec(privacy_unit="individual", individual={"contribution": 50.0,
                                                            "population": 1000.0}, k=2)
    plan = plan_of(spec, frame)
    assert plan.details["donor_choice"] == "private"  # auto
    assert plan.event(capped.STAGE_AVERAGE).sensitivity == pytest.approx(0.05 / 2)
    assert plan.event(capped.STAGE_CHOICE).sensitivity == pytest.approx(0.05)
    assert "one person" in plan.neighbouring["unit"]
    assert "not a whole donor" in plan.neighbouring["weaker_than"]
    nearest = plan_of(make_spec(privacy_unit="individual", weights="nearest",
                                individual={"contribution": 50.0, "population": 1000.0}), frame)
    assert "swap" in nearest.details["warning_choice"]
    assert nearest.event(capped.STAGE_AVERAGE).sensitivity == pytest.approx(100.0 / 4)


@pytest.mark.parametrize(("section", "match"), [
    ({"method": "out", "k": 3}, "only used with method: capped"),
    ({"method": "out", "band": 0.2}, "only used with method: capped"),
    ({"privacy_unit": "individual"}, "individual .* is required"),
    ({"method": "out", "privacy_unit": "individual",
      "individual": {"contribution": 1.0, "population": 1.0}}, "needs method: capped"),
    ({"band": 0.0}, "greater than 0"),
    ({"k": 0}, "greater than or equal to 1"),
])
def test_spec_refusals(section: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        make_spec(**section)


def test_plan_refusals() -> None:
    frame = panel(n=3)
    with pytest.raises(SpecError, match="4 donors cannot be averaged out of the panel"):
        plan_of(make_spec(k=4), frame)
    with pytest.raises(SpecError, match=r"gaussian needs privacy\.delta"):
        plan_of(make_spec(k=2, path_noise="gaussian"), frame)


def run(spec: SynthControlSpec, frame: pd.DataFrame, seed: int) -> Any:
    plan = plan_of(spec, frame)
    guard = NoiseGuard(plan, test_seed=seed)
    rel = METHOD.run(spec, frame, plan, {"panel": frame[["unit", "time"]]},
                     rng=np.random.default_rng(0), noise=guard)
    guard.check_all_drawn()
    return rel


def nonprivate(spec: SynthControlSpec, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    layout = build_layout(spec, frame, None)
    piv = frame.pivot(index="unit", columns="time", values="y")
    x = piv.loc[list(layout.donors)].to_numpy()
    y = piv.loc["T"].to_numpy()
    prep = capped.prepare(x, y, scales_of(spec, layout), layout.t0)
    slices = capped.block_slices(layout.h, spec.synth_control.releases.path_blocks)
    vals = capped.released_values(prep, capped.nearest(prep.d, spec.synth_control.k),
                                  spec.synth_control.k, layout.t0, slices)
    return {**vals, "mean_y_post": np.array([y[layout.t0:].mean()])}


@pytest.mark.parametrize("section", [{"k": 2}, {"k": 2, "weights": "private"},
                                     {"k": 2, "band": 0.2, "releases": {"fit": True}}])
def test_huge_epsilon_equals_the_estimate_without_noise(section: dict[str, Any]) -> None:
    frame = panel()
    spec = make_spec(eps=1e9, **section)
    rel = run(spec, frame, 3)
    ref = nonprivate(spec, frame)
    doc = rel.documents["effect.json"]
    eff = ref["mean_y_post"][0] - ref[capped.STAGE_AVERAGE][0]
    assert doc["average_post_effect"]["estimate"] == pytest.approx(eff, abs=1e-5)
    assert eff == pytest.approx(3.0, abs=1.0)  # D0 and D1 are the nearest: the true effect
    post = rel.tables["counterfactual"].query("period == 'post'")
    np.testing.assert_allclose(post["counterfactual"], ref[capped.STAGE_PATH], atol=1e-5)
    if "weights" in section:
        w = rel.tables["weights"]
        assert list(w.loc[w.weight > 0, "unit"]) == ["D0", "D1"]
    else:
        assert "weights" not in rel.tables
        assert "not released" in doc["chosen_donors"]


def test_release_document_intervals_and_clamping() -> None:
    frame = panel()
    spec = make_spec(eps=0.05, k=2, releases={"fit": True})
    rel = run(spec, frame, 5)
    doc = rel.documents["effect.json"]
    av = doc["average_post_effect"]
    assert av["interval"]["kind"] == "noise" and av["interval"]["level"] == 0.95
    assert av["total_interval"]["kind"] == "total" and av["total_interval"]["bound"] is True
    assert av["total_interval"]["lo"] <= av["interval"]["lo"] + 1e-9
    fit = doc["pre_period_rmspe"]
    assert 0.0 <= fit["estimate"] <= 100.0
    table = rel.tables["counterfactual"]
    post = table[table.period == "post"]
    assert post.counterfactual.between(0.0, 100.0).all()
    assert (post.counterfactual_noise_lo <= post.counterfactual).all()
    assert (post.counterfactual <= post.counterfactual_noise_hi).all()
    np.testing.assert_allclose(post.effect, post.observed - post.counterfactual)
    assert json.dumps(doc)  # JSON-able
    assert rel.figures["synth_control.png"][:4] == b"\x89PNG"


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_printed_halfwidths_cover_at_their_level_three_arms(kind: str) -> None:
    """Issue 16: the intervals written beside each value cover the noise at 1 − α (4,000 draws),
    and those of a 0.7× or 1.3× scale do not."""
    frame = panel(t0=3, h=40)
    spec = make_spec(eps=1.0, delta=1e-6 if kind == "gaussian" else 0.0, k=2, t0=3,
                     path_noise=kind, releases={"fit": True})
    mechs = mechanisms_of(spec, build_layout(spec, frame, None))
    rng = noise_generator(17)
    for mech in (mechs.average, mechs.path, mechs.fit):
        assert mech is not None
        value = np.zeros(1 if mech is not mechs.path else mechs.blocks)
        err = np.abs(mech.release_many(value, 4000, rng=rng)[:, 0])
        scale = mech.event().noise_scale
        hw = halfwidth(mech, 0.05)
        cov = coverage_three_arm(err, lambda f, hw=hw: hw * f)
        assert_coverage_three_arm(cov, 0.05)
        assert hw == pytest.approx(scale * (np.log(20) if kind == "laplace" or mech is not
                                            mechs.path else 1.959964), rel=1e-6)


def test_capped_release_law_is_unit_free() -> None:
    """Rescaling the outcome and its bounds by 1000 scales every noise scale and half-width by
    1000 and changes no ε: the release's law is the same in the outcome's units."""
    frame = panel()
    a = plan_of(make_spec(eps=2.0, k=3, band=0.2, releases={"fit": True}), frame)
    spec_b = make_spec(eps=2.0, k=3, band=0.2, releases={"fit": True})
    spec_b = spec_b.model_copy(update={"bounds": spec_b.bounds.model_copy(
        update={"outcome": (0.0, 100_000.0)})})
    b = plan_of(spec_b, frame)
    assert [e.epsilon for e in a.events] == [e.epsilon for e in b.events]
    for ea, eb in zip(a.events, b.events, strict=True):
        assert eb.noise_scale == pytest.approx(1000 * ea.noise_scale)
    assert b.predicted().halfwidth == pytest.approx(1000 * a.predicted().halfwidth)


@pytest.mark.parametrize("weights", ["nearest", "private"])
def test_placebos_release_and_plan(weights: str) -> None:
    frame = panel(n=6)
    spec = make_spec(eps=1e9, k=2, weights=weights, releases={"placebos": True, "path": False})
    plan = plan_of(spec, frame)
    stages = [e.stage for e in plan.events]
    assert capped.STAGE_PLACEBOS in stages
    assert (capped.STAGE_PLACEBO_CHOICE in stages) == (weights == "private")
    if weights == "private":
        fam = plan.event(capped.STAGE_PLACEBO_CHOICE)
        assert fam.kind == "subset_family" and fam.params["factor"] == 2 * 2 + 6 - 1
    l1 = plan.event(capped.STAGE_PLACEBOS).sensitivity
    assert l1 == pytest.approx(100.0 * (1 + 5 / 2) if weights == "private"
                               else 100.0 + 100.0 + 5 * 100.0 / 2)
    rel = run(spec, frame, 4)
    table = rel.tables["placebos"]
    assert list(table.unit) == [f"D{i}" for i in range(6)]
    layout = build_layout(spec, frame, None)
    piv = frame.pivot(index="unit", columns="time", values="y")
    x = piv.loc[list(layout.donors)].to_numpy()
    _, expected = capped.placebo_values(x, scales_of(spec, layout), layout.t0)
    np.testing.assert_allclose(table.placebo_effect, expected, atol=1e-4)
    doc = rel.documents["effect.json"]["placebos"]
    assert doc["count"] == 6 and 0 < doc["rank_p_value"] <= 1
