"""synth-control ``method: capped``: neighbour searches against the sensitivities the plan states.

Every search takes the planned sensitivity from the plan itself (``capped_plan.mechanisms_of``)
and the released values from the production code (``capped.prepare`` / ``released_values``), so
a change to either that breaks a bound fails here. Random and corner neighbours never exceed the
bounds; the planted pairs of docs/proofs/synth_control_estimand.md §6 reach them; a greedy search
over one donor's cells never exceeds them either.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpcausal.commands.synth_control import capped
from dpcausal.commands.synth_control.capped_audit import conditioning_sets
from dpcausal.commands.synth_control.capped_plan import mechanisms_of, scales_of
from dpcausal.commands.synth_control.layout import build_layout
from dpcausal.commands.synth_control.spec import SynthControlSpec

pytestmark = pytest.mark.statistical
SLACK = 1e-9
LO, HI = 10.0, 50.0


def setup(n: int, t0: int, h: int, k: int, **section: Any) -> tuple[Any, Any, dict[str, float]]:
    """(spec, layout, planned sensitivity by stage) for an n-donor panel."""
    units = ["T", *[f"D{i}" for i in range(n)]]
    frame = pd.DataFrame({"unit": np.repeat(units, t0 + h), "time": np.tile(np.arange(t0 + h), n + 1)})
    spec = SynthControlSpec.model_validate({
        "data": {"path": "p.csv", "columns": {"unit": "unit", "time": "time", "outcome": "y"}},
        "bounds": {"outcome": [LO, HI]}, "privacy": {"epsilon": 1.0, "delta": 1e-6},
        "synth_control": {"target": "T", "treatment_time": t0, "method": "capped", "k": k,
                          "releases": {"fit": True}, **section}})
    layout = build_layout(spec, frame, None)
    planned = {m.event().stage: m.event().sensitivity for m in mechanisms_of(spec, layout).all()}
    return spec, layout, planned


def values(spec: Any, layout: Any, x: np.ndarray, y: np.ndarray,
           chosen: np.ndarray | None = None) -> dict[str, np.ndarray]:
    scales = scales_of(spec, layout)
    prep = capped.prepare(x, y, scales, layout.t0)
    k = spec.synth_control.k
    sel = capped.nearest(prep.d, k) if chosen is None else chosen
    slices = capped.block_slices(layout.h, spec.synth_control.releases.path_blocks)
    return capped.released_values(prep, sel, k, layout.t0, slices)


def shifts(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, float]:
    """Each stage's change in its event's norm (ℓ1 for Laplace, ℓ2 for a Gaussian path)."""
    return {capped.STAGE_AVERAGE: float(abs(a[capped.STAGE_AVERAGE] - b[capped.STAGE_AVERAGE])[0]),
            capped.STAGE_FIT: float(abs(a[capped.STAGE_FIT] - b[capped.STAGE_FIT])[0]),
            "path_l1": float(np.abs(a[capped.STAGE_PATH] - b[capped.STAGE_PATH]).sum())}


def check(found: dict[str, float], planned: dict[str, float], m: int) -> None:
    per = planned[capped.STAGE_AVERAGE]
    assert found[capped.STAGE_AVERAGE] <= per * (1 + SLACK) + 1e-12
    assert found[capped.STAGE_FIT] <= planned[capped.STAGE_FIT] * (1 + SLACK) + 1e-12
    assert found["path_l1"] <= m * per * (1 + SLACK) + 1e-12


def random_panel(rng: np.random.Generator, n: int, periods: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.uniform(LO - 5, HI + 5, (n, periods))
    if rng.uniform() < 0.3:  # near ties
        x[: n // 2] = np.round(x[: n // 2] / 10) * 10
    y = rng.uniform(LO, HI, periods)
    return x, y


@pytest.mark.parametrize("band", [None, 0.1, 0.6])
def test_random_donor_replacements_never_exceed_the_nearest_bound(band: float | None) -> None:
    rng = np.random.default_rng(7)
    for _ in range(150):
        n, t0, h = int(rng.integers(1, 7)), int(rng.integers(1, 6)), int(rng.integers(1, 5))
        k = int(rng.integers(1, n + 1))
        spec, layout, planned = setup(n, t0, h, k, **({"band": band} if band else {}))
        assert planned[capped.STAGE_AVERAGE] == pytest.approx(
            min(HI - LO, 2 * band * (HI - LO) if band else np.inf) / k)
        for _ in range(20):
            x, y = random_panel(rng, n, t0 + h)
            xp = x.copy()
            j = int(rng.integers(n))
            xp[j] = (rng.choice([LO - 1, HI + 1], t0 + h) if rng.uniform() < 0.5
                     else rng.uniform(LO - 5, HI + 5, t0 + h))
            check(shifts(values(spec, layout, x, y), values(spec, layout, xp, y)), planned, h)


def greedy_search(spec: Any, layout: Any, rng: np.random.Generator, steps: int) -> float:
    """Maximise |Δ average| over one donor's replacement by coordinate moves to the bounds."""
    n, periods = layout.n, layout.periods
    x, y = random_panel(rng, n, periods)
    j = int(rng.integers(n))
    xp = x.copy()
    best = 0.0
    for _ in range(steps):
        t = int(rng.integers(periods))
        trial = xp.copy()
        trial[j, t] = rng.choice([LO, HI, float(y[t]), rng.uniform(LO, HI)])
        gap = shifts(values(spec, layout, x, y), values(spec, layout, trial, y))
        if gap[capped.STAGE_AVERAGE] >= best:
            best, xp = gap[capped.STAGE_AVERAGE], trial
    return best


def test_greedy_search_never_exceeds_the_nearest_bound() -> None:
    rng = np.random.default_rng(11)
    for n, t0, h, k in [(3, 3, 2, 1), (4, 4, 3, 2), (5, 2, 2, 4), (2, 5, 1, 2)]:
        spec, layout, planned = setup(n, t0, h, k)
        for _ in range(15):
            assert greedy_search(spec, layout, rng, 60) <= planned[capped.STAGE_AVERAGE] * (1 + SLACK)


def planted(layout: Any, k: int, at: str, band: float | None) -> tuple[np.ndarray, ...]:
    """The pair of docs/proofs/synth_control_estimand.md §6 (as the audit plants it)."""
    n, t0, periods = layout.n, layout.t0, layout.periods
    y = np.full(periods, (LO + HI) / 2 if at == "middle" else LO)
    lo_t, hi_t = capped.intervals(y, LO, HI, None if band is None else band * (HI - LO))
    far = np.concatenate([hi_t[:t0], lo_t[t0:]])
    x = np.vstack([y if i < k - 1 else far for i in range(n)])
    x[n - 1] = np.concatenate([y[:t0], hi_t[t0:]])
    xp = x.copy()
    xp[n - 1] = far
    return x, xp, y


@pytest.mark.parametrize(("n", "k", "band"), [(5, 2, None), (6, 3, 0.1), (4, 4, None), (3, 1, 0.3)])
def test_planted_pairs_attain_the_nearest_bound(n: int, k: int, band: float | None) -> None:
    spec, layout, planned = setup(n, 4, 3, k, **({"band": band} if band else {}))
    x, xp, y = planted(layout, k, "middle", band)
    got = shifts(values(spec, layout, x, y), values(spec, layout, xp, y))
    assert got[capped.STAGE_AVERAGE] == pytest.approx(planned[capped.STAGE_AVERAGE], rel=1e-12)
    assert got["path_l1"] == pytest.approx(3 * planned[capped.STAGE_AVERAGE], rel=1e-12)
    if band is None:
        x, xp, y = planted(layout, k, "low end", band)
        got = shifts(values(spec, layout, x, y), values(spec, layout, xp, y))
        assert got[capped.STAGE_FIT] == pytest.approx(planned[capped.STAGE_FIT], rel=1e-12)


@pytest.mark.parametrize("unit", ["donor", "individual"])
def test_fixed_sets_and_the_private_choice_stay_within_their_bounds(unit: str) -> None:
    """weights: private — one item's utility moves by ≤ Δ_u; given any fixed set, the released
    values move by ≤ cell_change/k; one person's cells moved by the full change attain it."""
    rng = np.random.default_rng(19)
    section: dict[str, Any] = {"weights": "private"}
    if unit == "individual":
        section |= {"privacy_unit": "individual",
                    "individual": {"contribution": 300.0, "population": 1000.0}}
    for n, t0, h, k in [(4, 3, 2, 2), (6, 5, 4, 3), (3, 2, 1, 1)]:
        spec, layout, planned = setup(n, t0, h, k, **section)
        scales = scales_of(spec, layout)
        change = scales.cell_change
        assert planned[capped.STAGE_AVERAGE] == pytest.approx(change / k)
        assert planned[capped.STAGE_CHOICE] == pytest.approx(min(change, HI - LO))
        for _ in range(100):
            x, y = random_panel(rng, n, t0 + h)
            x = np.clip(x, LO, HI)
            xp = x.copy()
            j = int(rng.integers(n))
            if unit == "individual":
                xp[j] = np.clip(x[j] + change * rng.choice([-1.0, 1.0], t0 + h), LO, HI)
            else:
                xp[j] = rng.choice([LO, HI], t0 + h)
            d = capped.prepare(x, y, scales, t0).d
            dp = capped.prepare(xp, y, scales, t0).d
            assert np.count_nonzero(d != dp) <= 1
            assert np.max(np.abs(d - dp)) <= planned[capped.STAGE_CHOICE] * (1 + SLACK)
            for chosen in conditioning_sets(n, k):
                check(shifts(values(spec, layout, x, y, chosen), values(spec, layout, xp, y, chosen)),
                      planned, h)
        # attained: a member's post cells moved down by the full change
        x = np.full((n, t0 + h), HI)
        xp = x.copy()
        xp[0, t0:] -= change
        got = shifts(values(spec, layout, x, x[0], conditioning_sets(n, k)[0]),
                     values(spec, layout, xp, x[0], conditioning_sets(n, k)[0]))
        assert got[capped.STAGE_AVERAGE] == pytest.approx(planned[capped.STAGE_AVERAGE])


@pytest.mark.parametrize(("unit", "choice"), [("donor", "nearest"), ("donor", "private"),
                                              ("individual", "private")])
def test_placebo_effects_stay_within_their_l1_bound(unit: str, choice: str) -> None:
    """The n placebo effects move by at most placebo_l1 in ℓ1 (nearest: recomputed sets; private:
    every fixed family of sets); the family with the changed donor in every other set attains
    the private bound; each placebo's distances move as SubsetSelectionFamily assumes."""
    rng = np.random.default_rng(23)
    section: dict[str, Any] = {"weights": choice, "releases": {"placebos": True}}
    if unit == "individual":
        section |= {"privacy_unit": "individual",
                    "individual": {"contribution": 300.0, "population": 1000.0}}
    for n, t0, h, k in [(4, 3, 2, 2), (5, 4, 3, 1), (3, 2, 2, 2)]:
        spec, layout, _ = setup(n, t0, h, k, **section)
        scales = scales_of(spec, layout)
        mechs = mechanisms_of(spec, layout)
        assert mechs.placebos is not None
        bound = mechs.placebos.event().sensitivity
        assert bound == pytest.approx(scales.placebo_l1(n))
        kp = scales.placebo_k(n)
        for _ in range(150):
            x, _ = random_panel(rng, n, t0 + h)
            xp = x.copy()
            j = int(rng.integers(n))
            if unit == "individual":
                xp[j] = np.clip(x[j], LO, HI) + scales.placebo_change * rng.choice([-1.0, 1.0], t0 + h)
            else:
                xp[j] = rng.choice([LO, HI], t0 + h) if rng.uniform() < 0.5 else rng.uniform(LO, HI, t0 + h)
            if choice == "nearest":
                a = capped.placebo_values(x, scales, t0)[1]
                b = capped.placebo_values(xp, scales, t0)[1]
                assert np.abs(a - b).sum() <= bound * (1 + SLACK)
                continue
            xb, xbp = np.clip(x, LO, HI), np.clip(xp, LO, HI)
            d, dp = capped.placebo_distances(xb, t0), capped.placebo_distances(xbp, t0)
            moved = np.abs(d - dp)
            assert moved.max() <= mechs.placebo_choice.event().sensitivity * (1 + SLACK)
            others = [p for p in range(n) if p != j]
            assert all(np.count_nonzero(moved[p] > 1e-12) <= 1 for p in others)
            family = capped.nearest_rows(rng.uniform(size=(n, n - 1)), kp)
            a = capped.placebo_effects(xb, family, kp, t0)
            b = capped.placebo_effects(xbp, family, kp, t0)
            assert np.abs(a - b).sum() <= bound * (1 + SLACK)
        if choice == "private":  # attained: j in every other set, its cells all moved down
            j = 0
            pools = capped.placebo_pools(n)
            family = np.zeros((n, n - 1))
            for p in range(n):
                pos = 0 if p == j else int(np.flatnonzero(pools[p] == j)[0])
                family[p, [(pos + i) % (n - 1) for i in range(kp)]] = 1.0
            x = np.full((n, t0 + h), HI)
            xp = x.copy()
            xp[j] -= scales.placebo_change
            gap = np.abs(capped.placebo_effects(x, family, kp, t0)
                         - capped.placebo_effects(xp, family, kp, t0)).sum()
            assert gap == pytest.approx(bound)
