"""cate's ATE with a public residual clip r (``cate.ate.residual_clip``, issue #19): the scores'
bounds over the whole domain with Y − μ̂_a clipped to [−r, r], the neighbour search on the real
release path, the ε → ∞ limit, the plan, the spec's refusals, and ``audit privacy``."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy import special

from cli_tests.helpers import invoke, write_yaml
from cli_tests.unit.test_cate_ate import (
    COVS,
    make_spec,
    observational,
    release,
)
from dpcausal.commands.cate.ate_scores import (
    NuisanceRanges,
    centred_range,
    residual_corners,
    score_parts,
)
from dpcausal.commands.cate.ate_setup import build_ate_setup, public_units
from dpcausal.commands.cate.method import plan
from dpcausal.errors import SpecError

Y_BOUNDS = (-3.0, 7.0)


def _old_centred_range(weights: str, y_bounds: tuple[float, float], ranges: NuisanceRanges,
                       center: float = 0.0) -> tuple[float, float]:
    """main's centred_range before the residual clip, verbatim in its arithmetic (the reference
    for r = None)."""
    e_lo, e_hi = ranges.e
    lows, highs = [], []

    def quad(c0: float, c1: float, c2: float) -> tuple[float, float]:
        pts = [e_lo, e_hi]
        if c2 != 0.0 and e_lo < -c1 / (2.0 * c2) < e_hi:
            pts.append(-c1 / (2.0 * c2))
        vals = [c0 + c1 * t + c2 * t * t for t in pts]
        return min(vals), max(vals)

    for m1, m0, y in itertools.product(ranges.mu1, ranges.mu0, y_bounds):
        for a in (0, 1):
            if weights == "clipped":
                vals = [(m1 - m0 + (y - m1) / e if a == 1 else m1 - m0 - (y - m0) / (1.0 - e))
                        - center for e in (e_lo, e_hi)]
                lows.append(min(vals))
                highs.append(max(vals))
                continue
            delta = m1 - m0
            lo, hi = (quad(y - m1, delta - (y - m1) - center, center - delta) if a == 1
                      else quad(0.0, delta - (y - m0) - center, center - delta))
            lows.append(lo)
            highs.append(hi)
    return min(lows), max(highs)


def _random_ranges(rng: np.random.Generator) -> NuisanceRanges:
    e = tuple(np.sort(rng.uniform(0.05, 0.95, 2)))
    m0 = tuple(np.sort(rng.uniform(-3, 7, 2)))
    m1 = tuple(np.sort(rng.uniform(-3, 7, 2)))
    return NuisanceRanges(e, m0, m1)  # type: ignore[arg-type]


@pytest.mark.parametrize("weights", ["clipped", "overlap"])
def test_without_a_clip_the_bounds_and_scores_are_mains_bit_for_bit(weights: str) -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        ranges = _random_ranges(rng)
        center = float(rng.uniform(-5, 5))
        assert (centred_range(weights, Y_BOUNDS, ranges, center)  # type: ignore[arg-type]
                == _old_centred_range(weights, Y_BOUNDS, ranges, center))
    n = 1000
    a = rng.integers(0, 2, n).astype(float)
    y, m0, m1 = (rng.uniform(-3, 7, n) for _ in range(3))
    e = rng.uniform(0.1, 0.9, n)
    u, _ = score_parts(weights, a, y, e, m0, m1)  # type: ignore[arg-type]
    if weights == "clipped":
        old = m1 - m0 + a * (y - m1) / e - (1.0 - a) * (y - m0) / (1.0 - e)
    else:
        old = e * (1.0 - e) * (m1 - m0) + a * (1.0 - e) * (y - m1) - (1.0 - a) * e * (y - m0)
    np.testing.assert_array_equal(u, old)


@pytest.mark.parametrize("weights", ["clipped", "overlap"])
def test_clipped_scores_never_leave_their_bound_which_they_attain(weights: str) -> None:
    """Random and adversarial (μ̂₁, μ̂₀, ê, a, y) — the ends and kinks of the ranges, y at its
    bounds, at μ̂ ± r and just beyond — never leave [L, H]; the dense search reaches its ends."""
    rng = np.random.default_rng(1)
    for trial in range(150):
        ranges = _random_ranges(rng)
        r = float(rng.choice([0.3, 1.0, 2.5, 6.0, 9.9]))
        center = float(rng.uniform(-5, 5)) if trial % 2 else 0.0
        lo, hi = centred_range(weights, Y_BOUNDS, ranges, center,  # type: ignore[arg-type]
                               residual_clip=r)
        n = 20_000
        ev = rng.uniform(*ranges.e, n)
        m0 = rng.uniform(*ranges.mu0, n)
        m1 = rng.uniform(*ranges.mu1, n)
        a = rng.integers(0, 2, n).astype(float)
        own = np.where(a == 1, m1, m0)
        kind = rng.integers(0, 4, n)
        y = np.select([kind == 0, kind == 1, kind == 2],
                      [rng.choice(Y_BOUNDS, n), own + rng.choice([-r, r], n),
                       own + rng.choice([-1, 1], n) * r * rng.uniform(1.0, 3.0, n)],
                      rng.uniform(*Y_BOUNDS, n))
        y = np.clip(y, *Y_BOUNDS)  # Y is clipped to its bounds before scoring
        # the corners where the extremes lie (each arm's (μ̂, ρ) corners × the other's ends × ê)
        corners = []
        for arm, mine, other in ((1, ranges.mu1, ranges.mu0), (0, ranges.mu0, ranges.mu1)):
            for (m, rho), mo, e in itertools.product(residual_corners(mine, Y_BOUNDS, r), other,
                                                     ranges.e):
                yy = float(np.clip(m + rho, *Y_BOUNDS))
                corners.append((e, mo if arm else m, m if arm else mo, float(arm), yy))
        cg = np.array(corners).T
        ev, m0, m1, a, y = (np.concatenate([s, c]) for s, c in zip((ev, m0, m1, a, y), cg,
                                                                   strict=True))
        u, v = score_parts(weights, a, y, ev, m0, m1, residual_clip=r)  # type: ignore[arg-type]
        dev = u - center * v
        assert dev.min() >= lo - 1e-9
        assert dev.max() <= hi + 1e-9
        assert dev.max() - dev.min() >= 0.9 * (hi - lo)
        # a clip never widens the bound, and one beyond the outcome range changes nothing
        plain = centred_range(weights, Y_BOUNDS, ranges, center)  # type: ignore[arg-type]
        assert plain[0] - 1e-9 <= lo and hi <= plain[1] + 1e-9
        wide = centred_range(weights, Y_BOUNDS, ranges, center,  # type: ignore[arg-type]
                             residual_clip=10.0)
        assert wide == pytest.approx(plain, abs=1e-9)


def test_the_clip_shrinks_the_range_as_predicted() -> None:
    """μ̂ ≡ c, ê ≡ ζ: R = 2·min(r, h)/ζ (h = half the outcome range), the audit's planted case."""
    c, z = 2.0, 0.1
    ranges = NuisanceRanges((z, z), (c, c), (c, c))
    for r in (0.5, 2.0, 4.9):
        lo, hi = centred_range("clipped", Y_BOUNDS, ranges, residual_clip=r)
        assert (lo, hi) == pytest.approx((-r / z, r / z))


@pytest.mark.parametrize("ate", [{"propensity": 0.4, "outcome_model": "means"}, {},
                                 {"weights": "overlap"}])
def test_the_clip_shrinks_the_public_units(ate: dict[str, Any]) -> None:
    """(The neighbour search with r set: test_cate_ate::test_score_stage_never_moves_more_than_its_unit.)"""
    clipped = build_ate_setup(make_spec(residual_clip=1.5, **ate), 400)
    plain = build_ate_setup(make_spec(**ate), 400)
    for key in ("estimate", "e_max"):
        assert public_units(clipped, ate.get("propensity"))[key] < 0.8 * public_units(
            plain, ate.get("propensity"))[key]


def test_at_huge_epsilon_the_estimate_is_an_independent_clipped_aipw() -> None:
    r = 1.0
    frame = observational(600, 4)
    doc = release(make_spec(eps=1e9, residual_clip=r), frame)
    fit = doc["nuisance_models"]["fits"][0]
    s = np.clip(frame[COVS].to_numpy(), 0.0, 1.0)
    xt = np.column_stack([np.ones(len(s)), s - 0.5]) / math.sqrt(1 + 3 / 4) * (1 - 8 * 2.0**-53)
    e = np.clip(special.expit(xt @ np.array(fit["propensity_theta"])), 0.1, 0.9)
    th = np.array(fit["outcome_theta"])
    mu = [np.clip(fit["outcome_center"] + xt @ th[arm], -5, 10) for arm in (0, 1)]
    a, y = frame["A"].to_numpy(), frame["Y"].to_numpy()
    rho = [np.clip(y - mu[arm], -r, r) for arm in (0, 1)]
    psi = mu[1] - mu[0] + a * rho[1] / e - (1 - a) * rho[0] / (1 - e)
    assert doc["estimate"] == pytest.approx(float(psi.mean()), abs=1e-6)
    assert doc["estimate"] == pytest.approx(2.0, abs=0.3)  # symmetric normal noise: no bias
    assert doc["residual_clip"] == r  # ate.json says the clip and its caveat
    assert "residuals clipped to [-1, 1]" in doc["total_interval"]["assumes"]
    plain = release(make_spec(eps=1e9), frame)
    assert plain["residual_clip"] is None
    assert "clipped" not in plain["total_interval"]["assumes"]


def test_the_plan_prints_r_its_caveat_and_predicts_with_the_clipped_range() -> None:
    spec = make_spec(eps=5.0, residual_clip=2.0)
    pl = plan(spec, 1000, {}, rng=np.random.default_rng(0))
    assert pl.assumptions["residual_clip"] == 2.0
    assert "symmetric" in pl.details["note_residual_clip"]
    base = plan(make_spec(eps=5.0), 1000, {}, rng=np.random.default_rng(0))
    assert "residual_clip" not in base.assumptions
    assert "note_residual_clip" not in base.details
    setup = build_ate_setup(spec, 1000)
    ranges = NuisanceRanges((0.1, 0.9), (-5.0, 10.0), (-5.0, 10.0))
    lo, hi = centred_range("clipped", (-5.0, 10.0), ranges, residual_clip=2.0)
    want = (hi - lo) / (setup.budget.estimate * setup.n_scored) * math.log(1 / 0.05)
    assert pl.accuracy[0].halfwidth == pytest.approx(want, rel=1e-12)
    assert pl.accuracy[0].halfwidth < 0.6 * base.accuracy[0].halfwidth


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf"), float("nan")])
def test_nonsense_clips_are_refused(value: float) -> None:
    with pytest.raises(ValueError, match="residual_clip"):
        make_spec(residual_clip=value)


def test_a_clip_beyond_the_outcome_range_is_refused_with_its_field() -> None:
    with pytest.raises(SpecError, match="never clips") as err:
        build_ate_setup(make_spec(residual_clip=15.0), 1000)
    assert err.value.field == "cate.ate.residual_clip"


def test_a_clip_with_a_constant_outcome_model_is_refused_with_its_field() -> None:
    """With outcome_model: none μ̂ is the middle of the bounds: the clip would truncate Y itself
    (the independent review's biased-interval example), so it is refused before any row is read."""
    with pytest.raises(SpecError, match="outcome_model: none") as err:
        build_ate_setup(make_spec(residual_clip=3.0, outcome_model="none"), 1000)
    assert err.value.field == "cate.ate.residual_clip"
    build_ate_setup(make_spec(residual_clip=3.0, outcome_model="means"), 1000)


def _shipped(workdir: Path, **ate: Any) -> Path:
    doc = yaml.safe_load((workdir / "configs" / "cate_ate.yaml").read_text())
    doc["cate"]["ate"].update(ate)
    return write_yaml(workdir / "r.yaml", doc)


@pytest.mark.parametrize("value", [-3, 95.0, "big"])
def test_the_cli_refuses_a_bad_clip_with_exit_2(workdir: Path, value: Any) -> None:
    res = invoke(["cate", "--spec", str(_shipped(workdir, residual_clip=value)), "--dry-run"])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "residual_clip" in res.stderr
    assert "Traceback" not in res.stderr


def test_the_dry_run_prints_r(workdir: Path) -> None:
    res = invoke(["cate", "--spec", str(_shipped(workdir, residual_clip=24.0)), "--dry-run"])
    assert res.exit_code == 0, res.stderr
    assert "residual_clip" in res.stdout and "24" in res.stdout


def test_audit_privacy_passes_with_a_clip(workdir: Path) -> None:
    import json

    res = invoke(["audit", "privacy", "--spec", str(_shipped(workdir, residual_clip=24.0)),
                  "--json"])
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    ratios = report["gray_box"]["max_sensitivity_ratio_per_stage"]
    assert 0.99 < ratios["cate.ate.estimate"] <= 1.0
    assert 0.99 < ratios["cate.ate.variance"] <= 1.0
    assert report["gray_box"]["max_privacy_loss"] <= 5.0
