"""Independent review of cate's ATE residual clip r (``cate.ate.residual_clip``): an adversarial
search for a clipped score outside ``centred_range`` (an independent score formula, edge-case
ranges, dense grids through the kinks, random draws and a bounded local optimiser), the bound's
monotonicity in the ranges (the dry run's "bound" prediction), and a pairwise neighbour search on
the real release path (``score_rows`` + ``release_all`` with the released models and τ̃ fixed)
with outcomes at μ̂(x) ± r and beyond."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from scipy import optimize

from cli_tests.unit.test_cate_ate import make_spec, observational
from dpcausal.audit.blackbox import RecordingGuard
from dpcausal.commands.cate.ate_estimate import _predict, fit_models, release_all, score_rows
from dpcausal.commands.cate.ate_scores import NuisanceRanges, centred_range
from dpcausal.commands.cate.ate_setup import build_ate_setup, unit_mechanisms
from dpcausal.commands.cate.estimate import clip_rows
from dpcausal.commands.cate.method import plan
from dpcausal.mechanisms import NoiseGuard

FloatArray = np.ndarray


def _score(weights: str, a: Any, y: Any, e: Any, m0: Any, m1: Any, c: float,
           r: float | None) -> FloatArray:
    """u − c·v written out independently of ``score_parts``."""
    a, y, e, m0, m1 = (np.atleast_1d(np.asarray(z, dtype=float)) for z in (a, y, e, m0, m1))

    def rho(z: FloatArray) -> FloatArray:
        return z if r is None else np.minimum(np.maximum(z, -r), r)

    if weights == "clipped":
        u = m1 - m0 + np.where(a == 1, rho(y - m1) / e, -rho(y - m0) / (1.0 - e))
        return u - c
    w = e * (1.0 - e)
    u = w * (m1 - m0) + np.where(a == 1, (1.0 - e) * rho(y - m1), -e * rho(y - m0))
    return u - c * w


def _config(rng: np.random.Generator) -> tuple[tuple[float, float], NuisanceRanges, float, float]:
    """Edge-case ranges: μ̂ inside or beyond the outcome bounds, a point, a sliver, ends on the
    kinks y ± r; r from 1e-9 of the outcome range to beyond it; ê wide, a point, or near 0/1."""
    y_lo = float(rng.choice([-3.0, 0.0, -1e3, 5.0]))
    span = float(rng.choice([1e-3, 1.0, 10.0, 1e3]))
    yb = (y_lo, y_lo + span)
    r = span * float(rng.choice([1e-9, rng.uniform(0.01, 0.5), rng.uniform(0.5, 1.0),
                                 rng.uniform(1.0, 2.5)]))
    kinks = [yb[0] - r, yb[0] + r, yb[1] - r, yb[1] + r]

    def mu() -> tuple[float, float]:
        kind = int(rng.integers(0, 6))
        if kind == 0:
            lo, hi = np.sort(rng.uniform(*yb, 2))
        elif kind == 1:
            lo, hi = np.sort(rng.uniform(yb[0] - span, yb[1] + span, 2))
        elif kind == 2:
            lo = hi = rng.uniform(yb[0] - span / 2, yb[1] + span / 2)
        elif kind == 3:
            lo = rng.uniform(*yb)
            hi = lo + span * 1e-12
        elif kind == 4:
            lo, hi = yb
        else:
            lo, hi = np.sort(rng.choice(kinks, 2))
        return float(lo), float(hi)

    e_kind = int(rng.integers(0, 3))
    if e_kind == 0:
        e = tuple(float(t) for t in np.sort(rng.uniform(0.02, 0.98, 2)))
    elif e_kind == 1:
        p = float(rng.uniform(0.05, 0.95))
        e = (p, p)
    else:
        e = (1e-6, 1.0 - 1e-6)
    c = float(rng.choice([0.0, rng.normal(0, span), rng.normal(0, 20 * span)]))
    return yb, NuisanceRanges(e, mu(), mu()), r, c  # type: ignore[arg-type]


def _search(weights: str, yb: tuple[float, float], rg: NuisanceRanges, r: float, c: float,
            rng: np.random.Generator) -> tuple[float, float]:
    """The smallest and largest u − c·v found: random draws, a grid through every kink, Powell."""
    found = []
    n = 4000
    e = rng.uniform(*rg.e, n)
    m0, m1 = rng.uniform(*rg.mu0, n), rng.uniform(*rg.mu1, n)
    a = rng.integers(0, 2, n).astype(float)
    own = np.where(a == 1, m1, m0)
    y = np.clip(own + rng.choice([-1, 1], n) * r * rng.uniform(0.9, 1.1, n), *yb)
    found.append(_score(weights, a, y, e, m0, m1, c, r))
    kinks = (yb[0] - r, yb[0] + r, yb[1] - r, yb[1] + r)

    def grid(lo: float, hi: float, extra: tuple[float, ...] = (), k: int = 9) -> FloatArray:
        return np.unique(np.concatenate([np.linspace(lo, hi, k),
                                         [t for t in extra if lo <= t <= hi]]))

    eg = grid(*rg.e, (0.5,), k=33)
    for arm in (0.0, 1.0):
        mine, other = (rg.mu1, rg.mu0) if arm else (rg.mu0, rg.mu1)
        mo = grid(*mine, kinks)
        yg = grid(*yb, tuple(m + s * r for m in mo for s in (-1.0, 1.0)))
        ee, mm, oo, yy = (g.ravel() for g in np.meshgrid(eg, mo, np.array(other), yg,
                                                          indexing="ij"))
        m1g, m0g = (mm, oo) if arm else (oo, mm)
        found.append(_score(weights, np.full(ee.size, arm), yy, ee, m0g, m1g, c, r))
    lo_f, hi_f = float(np.min(np.concatenate(found))), float(np.max(np.concatenate(found)))
    bounds = [rg.e, rg.mu0, rg.mu1, yb]
    for j in range(4):
        arm = float(j % 2)
        x0 = [rng.uniform(*b) for b in bounds]
        for sign in (1.0, -1.0):
            res = optimize.minimize(
                lambda z, s=sign, t=arm: s * float(_score(weights, t, z[3], z[0], z[1], z[2],
                                                           c, r)[0]),
                x0, method="Powell", bounds=bounds, options={"maxfev": 1500})
            lo_f, hi_f = min(lo_f, sign * res.fun), max(hi_f, sign * res.fun)
    return lo_f, hi_f


@pytest.mark.parametrize("weights", ["clipped", "overlap"])
def test_no_adversarial_score_leaves_the_clipped_bound(weights: str) -> None:
    rng = np.random.default_rng(19)
    for _ in range(30):
        yb, rg, r, c = _config(rng)
        lo, hi = centred_range(weights, yb, rg, c, residual_clip=r)  # type: ignore[arg-type]
        f_lo, f_hi = _search(weights, yb, rg, r, c, rng)
        scale = max(1.0, abs(lo), abs(hi))
        assert f_hi <= hi + 1e-12 * scale, (yb, rg, r, c, hi, f_hi)
        assert f_lo >= lo - 1e-12 * scale, (yb, rg, r, c, lo, f_lo)
        # the bound is the exact extreme of the relaxation: the search reaches it
        assert f_hi - f_lo >= (1.0 - 1e-3) * (hi - lo) - 1e-12 * scale


@pytest.mark.parametrize("weights", ["clipped", "overlap"])
def test_the_clipped_bound_is_monotone_in_the_ranges(weights: str) -> None:
    """Nested ranges give nested bounds: the dry run's worst case (public ranges) bounds every
    release's R and E at the same centre."""
    rng = np.random.default_rng(7)
    yb = (-5.0, 10.0)
    for _ in range(300):
        r = float(rng.choice([0.01, 0.7, 3.0, 14.0]))
        c = float(rng.normal(0, 5))
        outer = NuisanceRanges((0.1, 0.9), yb, yb)

        def inner(lo: float, hi: float) -> tuple[float, float]:
            a, b = np.sort(rng.uniform(lo, hi, 2))
            return float(a), float(b)

        mid = NuisanceRanges(inner(0.1, 0.9), inner(*yb), inner(*yb))
        small = NuisanceRanges(inner(*mid.e), inner(*mid.mu0), inner(*mid.mu1))
        b_out, b_mid, b_small = (centred_range(weights, yb, g, c,  # type: ignore[arg-type]
                                               residual_clip=r) for g in (outer, mid, small))
        assert b_out[0] <= b_mid[0] <= b_small[0] <= b_small[1] <= b_mid[1] <= b_out[1]


def _kink_points(setup: Any, spec: Any, models: Any, corners: list[FloatArray]
                 ) -> list[FloatArray]:
    """Covariates where an arm's μ̂ sits on a kink y_lo ± r, y_hi ± r of the clipped residual
    (bisection along the segment between the corners where that μ̂ is least and largest)."""
    r = setup.residual_clip
    y_lo, y_hi = setup.y_bounds

    def mu(p: FloatArray, arm: int) -> float:
        out = _predict(setup, spec.cate.ate_spec.propensity, models, p[None, :])
        return float(out[1 + arm][0])

    found = []
    for arm in (0, 1):
        vals = [mu(p, arm) for p in corners]
        p_lo, p_hi = corners[int(np.argmin(vals))], corners[int(np.argmax(vals))]
        for k in (y_lo - r, y_lo + r, y_hi - r, y_hi + r):
            if not min(vals) < k < max(vals):
                continue
            t_lo, t_hi = 0.0, 1.0
            for _ in range(60):
                t = 0.5 * (t_lo + t_hi)
                if mu(p_lo + t * (p_hi - p_lo), arm) < k:
                    t_lo = t
                else:
                    t_hi = t
            found.append(p_lo + t_hi * (p_hi - p_lo))
    return found


def _pairwise_worst(spec: Any) -> tuple[dict[str, float], dict[str, float]]:
    """The largest ℓ1 change of every score-stage mechanism input (statistic / unit) over all
    pairs of replacements of one scored row, models and earlier releases fixed;
    and the planned per-unit sensitivities."""
    frame = observational(240, 1)
    setup = build_ate_setup(spec, len(frame))
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    x, a, y = clip_rows(spec, setup, frame)
    fitted = fit_models(spec, setup, x, a, y, NoiseGuard(pl, test_seed=0))
    base = RecordingGuard(pl, test_seed=1)
    release_all(spec, setup, score_rows(spec, setup, fitted, x, a, y), base)
    mechs = unit_mechanisms(setup)
    sens = {m.event().stage: m.l1_sensitivity for m in vars(mechs).values() if m is not None}
    r = setup.residual_clip
    assert r is not None
    rng = np.random.default_rng(2)
    box_lo, box_hi = setup.box.lo, setup.box.hi
    corners = [np.array(p) for p in itertools.product(*zip(box_lo, box_hi, strict=True))]
    worst: dict[str, float] = {}
    scored_rows = np.sort(np.concatenate([rows for rows, _ in fitted.scorers]))
    for i in (int(scored_rows[3]),):
        models = next(m for scored, m in fitted.scorers if i in scored)
        points = [*corners, *(rng.uniform(box_lo, box_hi) for _ in range(2)),
                  *_kink_points(setup, spec, models, corners)]
        inputs = []
        for p in points:
            _, m0, m1, _ = _predict(setup, spec.cate.ate_spec.propensity, models, p[None, :])
            for arm, mu in ((0.0, float(m0[0])), (1.0, float(m1[0]))):
                outs = [*setup.y_bounds, *(mu + k * r for k in (0.0, -1.0, 1.0, -1.01, 1.01, 3.0))]
                for out in outs:
                    x2, a2, y2 = x.copy(), a.copy(), y.copy()
                    x2[i], a2[i], y2[i] = p, arm, float(np.clip(out, *setup.y_bounds))
                    g = RecordingGuard(pl, test_seed=1, replay=base.outputs)
                    release_all(spec, setup, score_rows(spec, setup, fitted, x2, a2, y2), g)
                    inputs.append({s: np.atleast_1d(np.asarray(d.value, dtype=float))
                                   for s, d in g.draws.items()})
        for stage in inputs[0]:
            values = np.array([inp[stage] for inp in inputs])
            change = np.abs(values[:, None, :] - values[None, :, :]).sum(axis=-1).max()
            worst[stage] = max(worst.get(stage, 0.0), float(change))
    return worst, sens


@pytest.mark.parametrize(("ate", "r"), [
    ({}, 0.05), ({}, 7.0), ({"weights": "overlap"}, 1.5),
    ({"outcome_model": "means", "propensity": 0.4}, 0.5),
    ({"nuisance_rows": "crossfit"}, 1.5), ({"nuisance_rows": "split", "weights": "overlap"}, 3.0),
    ({"outcome_model": "means"}, 14.9), ({"outcome_model": "ridge"}, 7.0),
    ({"outcome_model": "ridge", "weights": "overlap", "nuisance_rows": "crossfit"}, 7.0)])
def test_release_path_pairs_never_move_a_statistic_beyond_its_sensitivity(
        ate: dict[str, Any], r: float) -> None:
    groups = [{"name": "lo", "where": {"x0": [0, .5]}}, {"name": "hi", "where": {"x0": [.4, 1]}}]
    spec = make_spec(eps=3.0, groups=groups, residual_clip=r, **ate)
    worst, sens = _pairwise_worst(spec)
    assert set(worst) == set(sens)
    for stage, change in worst.items():
        assert change <= sens[stage], (stage, change, sens[stage])
    assert worst["cate.ate.estimate"] >= 0.2 * sens["cate.ate.estimate"]

