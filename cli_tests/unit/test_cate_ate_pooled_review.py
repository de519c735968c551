"""Independent adversarial review of cate's ATE ``outcome_model: pooled`` (issue #19, commit e7a4d8b).

- A neighbour search on the REAL release path (``score`` + ``release_all``: the nuisance fits, the
  scores, every Laplace release; every 20th neighbour through ``method.run``, ate.json included)
  through a guard that returns FIXED outputs — the same on D and D′ —
  at chosen released values: the pooled centre c̃ at either outcome bound, the middle, inside, and
  a noisy sum far beyond the bounds (clipped); ê flat at κ, sloped, or random; τ̃ inside or far
  outside the scores' range. One row (a fitting row, a scored row, or both) is replaced by box
  corners × arms × outcomes at and beyond the bounds and at c̃, c̃ ± r, c̃ ± 1.01r; every stage's
  pre-noise input (statistic / unit) moves by at most its planned sensitivity (ℓ1, or ℓ2 for the
  Gaussian propensity) over every pair, the pooled sum's 2h is attained, and — since every output
  is fixed — the whole release (ate.json, ate.csv, summary, warnings) is identical on every
  neighbour: nothing data-dependent leaves outside a mechanism.
- Lemma 1 / 1′ (``centred_range``) with μ̂₀ = μ̂₁ = c̃: brute force over random bounds, c̃ (at and
  between the bounds), ζ, r and centres τ̃ for the ATE and ATO scores and the centred second
  moment.
- The budget: the plan's (ε, δ) is the spec's for every pooled configuration (parallel composition
  for split/crossfit), the pooled event gets nuisance ε·(1 − propensity_share) and no δ, and a
  public propensity with the pooled centre is pure ε-DP (δ = 0 accepted, the receipt says δ = 0).
- ``audit privacy`` on a pooled spec with the output learner, with and without residual_clip, on
  a pure-ε trial spec, and on the observational example's output-learner twin; the dry run is the
  same for two data sets of one size.
- The dry run's predicted unit (labelled a bound) against the release's with the pooled centre,
  fold centres released apart under crossfit (a regression test for the fix 144bf8c).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import special

from cli_tests.helpers import invoke, write_yaml
from cli_tests.unit.test_cate_ate import COVS, make_spec, observational
from dpcausal.accounting.budget import compose_events
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.cate.ate_estimate import release_all, score
from dpcausal.commands.cate.ate_scores import NuisanceRanges, centred_range, weight_range
from dpcausal.commands.cate.ate_setup import build_ate_setup, public_units
from dpcausal.commands.cate.audit import audit_spec
from dpcausal.commands.cate.method import plan, run
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common import row_split
from dpcausal.learners.dp_means import DPPooledMean
from dpcausal.learners.rounding import effective_half_range
from dpcausal.mechanisms import Draw, NoiseGuard

Y_LO, Y_HI = -5.0, 10.0
C = 0.5 * (Y_LO + Y_HI)
KAPPA = 0.1  # the default cate.propensity_clip
GROUPS = [{"name": "lo", "where": {"x0": [0.0, 0.5]}}, {"name": "hi", "where": {"x0": [0.4, 1.0]}}]
REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------- the real release path


class _Fixed(NoiseGuard):
    """The real guard's plan checks, each mechanism's input kept, and a FIXED output per stage
    (a function of the stage and the public shapes only: the same on every data set)."""

    def __init__(self, pl: PrivacyPlan, outputs: dict[str, Any]) -> None:
        super().__init__(pl, test_seed=0)
        self.inputs: dict[str, np.ndarray] = {}
        self._outputs = outputs

    def _draw(self, draw: Draw) -> Any:
        value = np.asarray(draw.value, dtype=np.float64)
        self.inputs[draw.stage] = value
        for suffix, out in self._outputs.items():
            if draw.stage.endswith(suffix):
                return np.array(out(draw.stage, value.shape) if callable(out) else out,
                                dtype=np.float64).reshape(value.shape)
        return np.zeros_like(value)


def _conditioning(kind: str, pl: PrivacyPlan, setup: Any, rng: np.random.Generator
                  ) -> tuple[dict[str, Any], float]:
    """Fixed released values — the pooled centre c̃ (through its noisy sum S̃ = m(c̃ − c)), the
    propensity model θ̃, the per-unit estimate (hence τ̃) and denominator — and c̃ as the release
    clips it."""
    rows = {ev.stage: int(ev.params["rows"]) for ev in pl.events if "rows" in ev.params}
    c_tilde = {"low": Y_LO, "high": Y_HI, "middle": C, "inside": float(rng.uniform(Y_LO, Y_HI)),
               "beyond": Y_HI + 1e6}[kind]

    def pooled(stage: str, shape: tuple[int, ...]) -> list[float]:
        return [rows[stage] * (c_tilde - C)]

    dim = setup.box.dim
    scale = setup.box.scale
    theta = np.zeros(dim)
    if kind in ("low", "beyond"):
        theta[0] = float(special.logit(KAPPA)) / scale  # ê ≡ κ
    elif kind == "high":
        theta[0], theta[1] = -float(special.logit(KAPPA)) / (2 * scale), 3.0  # ê rises from κ
    else:
        theta = rng.normal(0.0, 3.0, dim)
    n = setup.n_scored
    estimate = {"low": 0.0, "high": 3.0 * n, "middle": -0.4 * n, "inside": float(rng.normal(0, n)),
                "beyond": -50.0 * n}[kind]
    return ({".outcome.sum": pooled, ".propensity": theta, ".estimate": [estimate],
             ".denominator": [float(rng.uniform(0.0, 0.3)) * n]}, min(max(c_tilde, Y_LO), Y_HI))


def _replacements(setup: Any, outcomes: list[float], every_corner: bool) -> list[dict[str, Any]]:
    """Box points × both arms × ``outcomes``: every corner and the centre, or (the default
    run) the lower and upper corners, one mixed corner and the centre."""
    lo, hi = setup.box.lo, setup.box.hi
    if every_corner:
        points = [np.array(p) for p in itertools.product(*zip(lo, hi, strict=True))]
    else:
        mixed = lo.copy()
        mixed[0] = hi[0]
        points = [lo, hi, mixed]
    points.append(0.5 * (lo + hi))
    out = []
    for p, arm, y in itertools.product(points, (0.0, 1.0), outcomes):
        out.append({**{c: float(v) for c, v in zip(COVS, p, strict=True)}, "A": arm, "Y": y})
    return out


def _public(obj: Any) -> str:
    """A release (documents, summary, tables) or the score stage's released values, as text."""
    if hasattr(obj, "documents"):
        obj = {"documents": obj.documents, "summary": obj.summary,
               "tables": {k: t.to_dict(orient="list") for k, t in obj.tables.items()}}
    else:
        obj = dataclasses.asdict(obj)
    return json.dumps(obj, sort_keys=True,
                      default=lambda v: v.tolist() if hasattr(v, "tolist") else repr(v))


def _run(spec: CateSpec, setup: Any, frame: pd.DataFrame, pl: PrivacyPlan,
         outputs: dict[str, Any], whole: bool) -> tuple[dict[str, np.ndarray], str]:
    """(each stage's input, everything released) on ``frame``: the score stage's released
    values, or with ``whole`` the complete release (``method.run``: ate.json, ate.csv, the
    summary); warnings included."""
    guard = _Fixed(pl, outputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if whole:
            out: Any = run(spec, frame, pl, {}, rng=np.random.default_rng(0), noise=guard)
        else:
            out = release_all(spec, setup, score(spec, setup, frame, guard), guard)
    guard.check_all_drawn()
    return guard.inputs, _public(out) + "|".join(str(w.message) for w in caught)


def _rows_to_replace(spec: CateSpec, setup: Any) -> list[int]:
    """A row fitting the nuisances and a scored row (the same row unless ``split``)."""
    if setup.rows != "split":
        return [5]
    first, second = row_split.parts(spec.cate.split, setup.n_total, setup.n_nuisance[0])
    return [int(first[3]), int(second[3])]


def _search(ate: dict[str, Any], kinds: tuple[str, ...], every_corner: bool = False,
            n: int = 160, seed: int = 0) -> tuple[dict[str, float], dict[str, Any]]:
    """(the largest change of each stage's input over every pair of neighbours, divided by its
    planned sensitivity; the plan's events by stage). Asserts that every neighbour's release is
    the same (the outputs are fixed: anything else is data leaving outside a mechanism)."""
    spec = audit_spec(make_spec(eps=3.0, outcome_model="pooled", groups=GROUPS, **ate))
    frame = observational(n, seed)
    setup = build_ate_setup(spec, n)
    pl = plan(spec, n, {}, rng=np.random.default_rng(0))
    events = {ev.stage: ev for ev in pl.events}
    rng = np.random.default_rng(seed + 1)
    r = setup.residual_clip
    ratio: dict[str, float] = {}
    for kind in kinds:
        outputs, c_t = _conditioning(kind, pl, setup, rng)
        outcomes = [Y_LO - 50.0, Y_LO, Y_HI, Y_HI + 50.0, C, c_t]
        if r is not None:
            outcomes += [c_t + k * r for k in (-1.0, 1.0, -1.01, 1.01, 3.0)]
        for i in _rows_to_replace(spec, setup):
            inputs, seen, whole = [], set(), set()
            rows = _replacements(setup, outcomes, every_corner)
            for j, row in enumerate(rows):
                other = frame.copy()
                for col, val in row.items():
                    other.loc[other.index[i], col] = val
                got, released = _run(spec, setup, other, pl, outputs, whole=False)
                inputs.append(got)
                seen.add(released)
                if j % 20 == 0 or j == len(rows) - 1:
                    whole.add(_run(spec, setup, other, pl, outputs, whole=True)[1])
            assert len(seen) == 1, f"{kind}: the released values differ between neighbours"
            assert len(whole) == 1, f"{kind}: the release differs between neighbours"
            assert {frozenset(g) for g in inputs} == {frozenset(inputs[0])}
            for stage in inputs[0]:
                values = np.array([np.ravel(g[stage]) for g in inputs])
                diff = values[:, None, :] - values[None, :, :]
                ev = events[stage]
                norm = (np.sqrt((diff * diff).sum(axis=-1)) if ev.norm == "l2"
                        else np.abs(diff).sum(axis=-1))
                ratio[stage] = max(ratio.get(stage, 0.0), float(norm.max()) / ev.sensitivity)
    return ratio, events


CONFIGS = [
    ({"nuisance_rows": "all"}, ("low", "middle")),
    ({"nuisance_rows": "all", "residual_clip": 1.5}, ("high", "beyond")),
    ({"nuisance_rows": "all", "weights": "overlap", "residual_clip": 4.0}, ("inside", "low")),
    ({"nuisance_rows": "all", "propensity": 0.4, "residual_clip": 0.5}, ("beyond", "inside")),
    ({"nuisance_rows": "split", "weights": "overlap"}, ("high",)),
    ({"nuisance_rows": "split", "residual_clip": 2.0, "propensity": 0.3, "weights": "overlap"},
     ("low",)),
    ({"nuisance_rows": "crossfit", "residual_clip": 1.5}, ("inside", "high")),
    ({"nuisance_rows": "crossfit", "weights": "overlap", "propensity": 0.6}, ("middle",)),
]
ALL_KINDS = ("low", "high", "middle", "inside", "beyond")


def _check(ratio: dict[str, float], events: dict[str, Any]) -> None:
    assert set(ratio) == set(events)  # every planned stage drew, on every neighbour
    for stage, value in ratio.items():
        assert value <= 1.0, (stage, value)
    pooled = [value for stage, value in ratio.items() if stage.endswith(".outcome.sum")]
    assert max(pooled) > 0.999  # Y at the top vs the bottom: the sum's 2h is attained
    assert ratio["cate.ate.estimate"] > 0.2  # the search reaches the scale of the bound


def _name(config: tuple[dict[str, Any], tuple[str, ...]]) -> str:
    return "-".join(f"{k}={v}" for k, v in config[0].items())


@pytest.mark.parametrize("config", CONFIGS, ids=_name)
def test_no_stage_input_moves_beyond_its_planned_sensitivity_on_the_release_path(
        config: tuple[dict[str, Any], tuple[str, ...]]) -> None:
    _check(*_search(*config))


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=_name)
def test_every_corner_and_every_conditioning_on_the_release_path(
        config: tuple[dict[str, Any], tuple[str, ...]]) -> None:
    _check(*_search(config[0], ALL_KINDS, every_corner=True))


def test_the_pooled_sensitivity_is_two_half_ranges_and_the_event_has_no_delta() -> None:
    spec = make_spec(eps=3.0, outcome_model="pooled")
    pl = plan(spec, 400, {}, rng=np.random.default_rng(0))
    (ev,) = [e for e in pl.events if e.stage == "cate.ate.nuisance.outcome.sum"]
    h = effective_half_range(Y_LO, Y_HI)
    assert ev.kind == "laplace" and ev.norm == "l1" and ev.delta == 0.0
    assert 2 * h <= ev.sensitivity <= 2 * h * (1 + 1e-12)
    assert ev.noise_scale == pytest.approx(ev.sensitivity / ev.epsilon)


@pytest.mark.parametrize("bounds", [(1e9, 1e9 + 1e-6), (-1e12, 1e12), (-3.0, -2.999999),
                                    (0.0, 1e-300), (-1e40, 1e40)])
def test_the_sum_sensitivity_covers_rounding_at_extreme_bounds(bounds: tuple[float, float]
                                                             ) -> None:
    """The sum of fl(clip(Y) − c) at a large offset and a tiny range (c itself rounded), or a
    huge range: replacing one row (either arm, values at, inside and beyond the bounds) never
    moves the input beyond the sensitivity its Laplace mechanism is calibrated to, and the
    extremes reach the range hi − lo (the rest of the allowance, for the rounding of c, cancels
    in a one-row difference)."""
    lo, hi = bounds
    spec = CateSpec.model_validate({
        "data": {"path": "d.csv", "columns": {"outcome": "Y", "treatment": "A",
                                              "covariates": COVS}},
        "bounds": {"outcome": [lo, hi], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 1.0, "delta": 1e-6},
        "cate": {"estimand": "ate", "ate": {"outcome_model": "pooled"}}})
    setup = build_ate_setup(spec, 300)
    learner = DPPooledMean(setup.box, setup.y_bounds, 1.0, 300)
    (mech,) = learner.mechanisms()
    sens = mech.l1_sensitivity
    assert sens >= learner.sum_sensitivity
    rng = np.random.default_rng(3)
    span = hi - lo
    worst = 0.0
    for _ in range(60):
        a = rng.integers(0, 2, 300).astype(float)
        y = lo + span * rng.uniform(-0.2, 1.2, 300)
        vals = [lo, hi, lo - span, hi + span, float(lo + span * rng.uniform())]
        inputs = []
        for v in vals:
            y2 = y.copy()
            y2[7] = v
            rec = _Recorder()
            learner.fit(np.zeros((300, 3)), a, y2, noise=rec)  # type: ignore[arg-type]
            inputs.append(rec.value)
        worst = max(worst, (max(inputs) - min(inputs)) / sens)
    assert worst <= 1.0
    assert worst >= 0.99 * (hi - lo) / sens


class _Recorder:
    """A guard stand-in: keeps the one input, returns it unchanged."""

    value = 0.0

    def release(self, mechanism: Any, value: Any, **_: Any) -> Any:
        self.value = float(np.asarray(value, dtype=np.float64)[0])
        return np.asarray(value, dtype=np.float64)


# ------------------------------------------------------- Lemma 1 / 1′ with μ̂₀ = μ̂₁ = c̃


def _score(weights: str, a: np.ndarray, y: np.ndarray, e: np.ndarray, mu: np.ndarray,
           r: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(u, v) with μ̂₀ = μ̂₁ = mu, written out independently of ``score_parts``."""
    rho = y - mu if r is None else np.minimum(np.maximum(y - mu, -r), r)
    if weights == "clipped":
        return np.where(a == 1, rho / e, -rho / (1.0 - e)), np.ones_like(e)
    return np.where(a == 1, (1.0 - e) * rho, -e * rho), e * (1.0 - e)


@pytest.mark.parametrize("weights", ["clipped", "overlap"])
def test_centred_range_bounds_every_pooled_score_and_its_square(weights: str) -> None:
    """Random outcome bounds, c̃ at either bound or inside (or, under crossfit, a range of
    averaged centres with μ̂₀ = μ̂₁ anywhere in it), ê's range a point, [ζ, 1 − ζ] or inside it,
    r none / tiny / mid / near the range, τ̃ anywhere: every score u − τ̃v lies in
    centred_range, (u − τ̃v)² ≤ E², v in weight_range, and the bound is reached."""
    rng = np.random.default_rng(190)
    for _ in range(400):
        y_lo = float(rng.choice([-1e3, -5.0, 0.0, 3.0]))
        span = float(rng.choice([1e-3, 1.0, 15.0, 1e4]))
        yb = (y_lo, y_lo + span)
        kind = int(rng.integers(0, 4))
        if kind == 3:  # crossfit: the union of the scorers' (constant) averaged centres
            a_c, b_c = np.sort(rng.uniform(*yb, 2))
            mu_rng = (float(a_c), float(b_c))
        else:
            c_t = [yb[0], yb[1], float(rng.uniform(*yb))][kind]
            mu_rng = (c_t, c_t)
        zeta = float(rng.choice([0.01, 0.1, 0.3, 0.49]))
        e_kind = int(rng.integers(0, 3))
        if e_kind == 0:
            e_rng = (zeta, 1.0 - zeta)
        elif e_kind == 1:
            p = float(rng.uniform(zeta, 1.0 - zeta))
            e_rng = (p, p)
        else:
            lo_e, hi_e = np.sort(rng.uniform(zeta, 1.0 - zeta, 2))
            e_rng = (float(lo_e), float(hi_e))
        r = [None, span * 1e-6, span * float(rng.uniform(0.05, 0.6)), span * 0.999][
            int(rng.integers(0, 4))]
        tau = float(rng.choice([0.0, rng.normal(0, span), rng.normal(0, 30 * span)]))
        ranges = NuisanceRanges(e_rng, mu_rng, mu_rng)
        lo, hi = centred_range(weights, yb, ranges, tau, residual_clip=r)  # type: ignore[arg-type]
        v_lo, v_hi = weight_range(weights, ranges)  # type: ignore[arg-type]
        k = 3000
        e = rng.uniform(*e_rng, k)
        mu = rng.uniform(*mu_rng, k)
        a = rng.integers(0, 2, k).astype(float)
        y = rng.uniform(*yb, k)
        y[::3] = yb[0]
        y[1::3] = yb[1]
        if r is not None:  # at the kinks μ̂ ± r
            y[2::6] = np.clip(mu[2::6] + r, *yb)
            y[5::6] = np.clip(mu[5::6] - r, *yb)
        # and a grid: both arms, ê through its range (the overlap score's stationary point
        # lies between), μ̂ at its ends, Y at the bounds and at μ̂ ± r
        grid = []
        for arm, m_end, e_g in itertools.product((0.0, 1.0), mu_rng, np.linspace(*e_rng, 201)):
            ys = [yb[0], yb[1]] + ([] if r is None else [min(max(m_end + s * r, yb[0]), yb[1])
                                                          for s in (-1.0, 1.0)])
            grid += [(arm, y_g, e_g, m_end) for y_g in ys]
        g = np.array(grid)
        a, y, e, mu = (np.concatenate([v, g[:, j]]) for j, v in enumerate((a, y, e, mu)))
        u, v = _score(weights, a, y, e, mu, r)
        dev = u - tau * v
        scale = max(1.0, abs(lo), abs(hi))
        assert np.all(dev <= hi + 1e-12 * scale), (yb, mu_rng, e_rng, r, tau)
        assert np.all(dev >= lo - 1e-12 * scale), (yb, mu_rng, e_rng, r, tau)
        e_max = max(abs(lo), abs(hi))
        assert np.all(dev * dev <= e_max * e_max * (1 + 1e-12) + 1e-300)
        assert np.all((v >= v_lo - 1e-15) & (v <= v_hi + 1e-15))
        if kind != 3:  # a point centre: the relaxation is exact, the grid reaches the bound
            slack = 1e-9 * scale + (1e-4 * (hi - lo) if weights == "overlap" else 0.0)
            assert float(dev.max()) >= hi - slack
            assert float(dev.min()) <= lo + slack


# ------------------------------------------------------------- the dry run's "bound"


def _release_units(ate: dict[str, Any], centres: list[float]) -> tuple[float, float]:
    """(the release's unit R of the estimate when fold k's pooled centre is released as
    ``centres[k]`` — one centre without crossfit — and the dry run's predicted worst-case R)."""
    spec = audit_spec(make_spec(eps=3.0, outcome_model="pooled", **ate))
    n = 300
    setup = build_ate_setup(spec, n)
    pl = plan(spec, n, {}, rng=np.random.default_rng(0))
    rows = {ev.stage: int(ev.params["rows"]) for ev in pl.events if "rows" in ev.params}

    def pooled(stage: str, shape: tuple[int, ...]) -> list[float]:
        k = int(stage.split(".fold")[1].split(".")[0]) - 1 if ".fold" in stage else 0
        return [rows[stage] * (centres[k] - C)]

    theta = np.zeros(setup.box.dim)
    theta[0] = float(special.logit(KAPPA)) / setup.box.scale  # ê ≡ κ: the widest score range
    guard = _Fixed(pl, {".outcome.sum": pooled, ".propensity": theta})
    rel = release_all(spec, setup, score(spec, setup, observational(n, 0), guard), guard)
    return rel.units["estimate"], public_units(setup, spec.cate.ate_spec.propensity)["estimate"]


PREDICTION_CASES = [
    (rows, extra) for rows in ("all", "split", "crossfit")
    for extra in ({"residual_clip": 1.0, "propensity": 0.4}, {"residual_clip": 0.7},
                  {"weights": "overlap", "residual_clip": 4.0}, {"propensity": 0.4})]


@pytest.mark.parametrize(("rows", "extra"), PREDICTION_CASES)
def test_the_dry_runs_predicted_unit_bounds_the_releases(rows: str, extra: dict[str, Any]
                                                         ) -> None:
    """The dry run labels its predicted noise half-width a bound ("the release's R is never
    larger", docs/proofs/cate_ate.md §6); with the pooled centre released anywhere in the
    bounds — each fold's its own under crossfit — the release's unit must not exceed it.
    Regression (review rev19p): c05d41e predicted the tied-centre worst case under crossfit too,
    where score_rows unions the folds' centres into one range for μ̂₀ and μ̂₁ separately (so
    centred_range unties them): the release's R was 15 against a predicted 5 (public
    propensity 0.4, r = 1, fold centres 0 and 5); fixed in 144bf8c."""
    rng = np.random.default_rng(5)
    folds = 2 if rows == "crossfit" else 1
    draws = [[0.0, 5.0][:folds], [Y_LO, Y_HI][:folds]]
    draws += [list(rng.uniform(Y_LO, Y_HI, folds)) for _ in range(6)]
    for centres in draws:
        got, predicted = _release_units({"nuisance_rows": rows, **extra}, centres)
        assert got <= predicted * (1 + 1e-9), (centres, got, predicted)


# ---------------------------------------------------------------------------------- budget


@pytest.mark.parametrize("rows", ["all", "split", "crossfit"])
@pytest.mark.parametrize("share", [0.05, 0.5, 0.95])
@pytest.mark.parametrize("extra", [{}, {"weights": "overlap", "groups": GROUPS},
                                   {"variance": "bound", "sd_bound": 4.0, "residual_clip": 2.0},
                                   {"propensity_learner": "objective", "residual_clip": 2.0}])
def test_the_plan_spends_exactly_the_specs_budget(rows: str, share: float,
                                                  extra: dict[str, Any]) -> None:
    eps, delta = 2.0, 1e-6
    ate = {"outcome_model": "pooled", "nuisance_rows": rows, "nuisance_share": 0.3, **extra}
    spec = make_spec(eps=eps, delta=delta, cate={"nuisance": {"propensity_share": share}}, **ate)
    pl = plan(spec, 1000, {}, rng=np.random.default_rng(0))
    cost = compose_events([e.to_dict() for e in pl.events])
    assert cost.epsilon == pytest.approx(eps, rel=1e-12)
    assert cost.delta == pytest.approx(delta, rel=1e-12)
    pooled = [e for e in pl.events if e.stage.endswith(".outcome.sum")]
    assert len(pooled) == (2 if rows == "crossfit" else 1)
    eps_n = eps if rows == "split" else 0.3 * eps
    for ev in pooled:  # the propensity: one event (output) or two (objective: solve + output)
        props = [e for e in pl.events if ".propensity" in e.stage and e.partition == ev.partition]
        assert ev.epsilon == pytest.approx(eps_n * (1.0 - share), rel=1e-12)
        assert sum(e.epsilon for e in props) == pytest.approx(eps_n * share, rel=1e-12)
        assert ev.delta == 0.0
        assert sum(e.delta for e in props) == pytest.approx(delta, rel=1e-12)
    assert not [e for e in pl.events if e.stage.endswith((".outcome.sums", ".outcome.counts"))]


@pytest.mark.parametrize("rows", ["all", "split", "crossfit"])
@pytest.mark.parametrize("delta", [0.0, 1e-7])
def test_a_public_propensity_with_the_pooled_centre_is_pure_epsilon(rows: str, delta: float
                                                                   ) -> None:
    spec = make_spec(eps=1.5, delta=delta, propensity=0.4, outcome_model="pooled",
                     nuisance_rows=rows, residual_clip=3.0)
    pl = plan(spec, 600, {}, rng=np.random.default_rng(0))
    cost = compose_events([e.to_dict() for e in pl.events])
    assert cost.epsilon == pytest.approx(1.5, rel=1e-12)
    assert cost.delta == 0.0
    assert all(e.kind == "laplace" for e in pl.events)
    guard = NoiseGuard(pl, test_seed=4)
    rel = run(spec, observational(600, 2), pl, {}, rng=np.random.default_rng(0), noise=guard)
    guard.check_all_drawn()
    doc = rel.documents["ate.json"]
    assert doc["nuisance_models"]["outcome_model"] == "pooled"
    assert doc["nuisance_models"]["propensity_learner"] == "public"
    assert sum(e["delta"] for e in doc["events"]) == 0.0


def test_the_outcome_share_is_never_zero_and_pooled_never_comes_from_auto() -> None:
    """propensity_share is an open share (0, 1): the pooled sum always gets some ε; ``auto``
    picks ridge or means only (pooled is the user's public choice)."""
    for share in (0.0, 1.0):
        with pytest.raises(ValueError, match="propensity_share"):
            make_spec(outcome_model="pooled", cate={"nuisance": {"propensity_share": share}})
    for eps in (0.5, 1e9):
        assert build_ate_setup(make_spec(eps=eps), 300).outcome in ("ridge", "means")


# ------------------------------------------------------------------------- audit privacy


def _audit_spec(tmp_path: Path, **ate: Any) -> Path:
    doc = yaml.safe_load((REPO / "configs" / "cate_ate.yaml").read_text())
    doc["cate"]["ate"].update({"outcome_model": "pooled", **ate})
    doc["cate"]["ate"].pop("groups")
    doc.pop("ledger")
    if "propensity" in ate:  # a trial: no propensity model, pure ε
        doc["cate"]["ate"].pop("propensity_learner")
        doc["cate"].pop("propensity_clip")
        doc["privacy"]["delta"] = 0.0
    return write_yaml(tmp_path / "pooled.yaml", doc)


@pytest.mark.parametrize("ate", [{}, {"residual_clip": 24.0, "nuisance_rows": "crossfit",
                                      "weights": "overlap"},
                                 {"propensity": 0.4, "residual_clip": 24.0,
                                  "nuisance_rows": "split"}])
def test_audit_privacy_passes_a_pooled_spec_and_reaches_the_sums_sensitivity(
        workdir: Path, ate: dict[str, Any]) -> None:
    res = invoke(["audit", "privacy", "--spec", str(_audit_spec(workdir, **ate)), "--json",
                  "--rows", "300", "--pairs", "24", "--trials", "0"])
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["verdict"] == "pass"
    ratios = report["gray_box"]["max_sensitivity_ratio_per_stage"]
    sums = [v for s, v in ratios.items() if s.endswith(".outcome.sum")]
    assert sums and all(0.999 < v <= 1.0 for v in sums)
    assert max(ratios.values()) <= 1.0
    assert report["gray_box"]["max_privacy_loss"] <= 5.0 + 1e-9
    assert report["claimed"]["delta"] == (0.0 if "propensity" in ate else 1e-6)


def test_audit_privacy_passes_the_observational_example_with_the_output_learner(
        workdir: Path) -> None:
    """configs/cate_ate_observational.yaml (pooled centre, r = 24, propensity_share 0.95) uses
    objective perturbation, which audit privacy refuses (exit 2); its output-learner twin is
    audited and passes, the pooled sum at ratio ≈ 1."""
    doc = yaml.safe_load((REPO / "configs" / "cate_ate_observational.yaml").read_text())
    doc["cate"]["ate"]["propensity_learner"] = "output"
    doc.pop("ledger")
    path = write_yaml(workdir / "obs.yaml", doc)
    res = invoke(["audit", "privacy", "--spec", str(path), "--json", "--rows", "400",
                  "--pairs", "24", "--trials", "0"])
    assert res.exit_code == 0, res.stderr
    ratios = json.loads(res.stdout)["gray_box"]["max_sensitivity_ratio_per_stage"]
    assert 0.999 < ratios["cate.ate.nuisance.outcome.sum"] <= 1.0
    assert max(ratios.values()) <= 1.0


def test_the_dry_run_is_the_same_for_two_data_sets_of_the_same_size(workdir: Path) -> None:
    """The plan (and the new ate fields it names) reads no data value: two files of the same
    length, one of them all at the extremes, give the same dry run byte for byte."""
    spec = _audit_spec(workdir, residual_clip=24.0)
    data = pd.read_csv(workdir / "sample_data" / "ate_obs.csv")
    outs = []
    for k in range(2):
        if k:
            data = data.assign(Y=50.0, A=1)
            data.to_csv(workdir / "sample_data" / "ate_obs.csv", index=False)
        res = invoke(["cate", "--spec", str(spec), "--dry-run", "--json"])
        assert res.exit_code == 0, res.stderr
        outs.append((res.stdout, res.stderr))
    assert outs[0] == outs[1]
    assert math.isfinite(json.loads(outs[0][0])["accuracy"][0]["halfwidth"])
