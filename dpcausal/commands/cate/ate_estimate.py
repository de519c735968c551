"""``cate`` with ``estimand: ate`` in memory: the DP nuisance models, the doubly robust scores, and
the Laplace releases of their sums (proof: ``docs/proofs/cate_ate.md``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.special import expit

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.cate.ate_release import Releases, build_ate_release
from dpcausal.commands.cate.ate_scores import (
    NuisanceRanges,
    centred_range,
    score_parts,
    weight_range,
)
from dpcausal.commands.cate.ate_setup import (
    AteSetup,
    build_ate_setup,
    nuisance_learners,
    unit_mechanisms,
)
from dpcausal.commands.cate.estimate import clip_rows
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common import row_split
from dpcausal.learners.dp_logistic import PropensityModel
from dpcausal.learners.dp_ridge import OutcomeModel
from dpcausal.learners.rounding import UNIT_ROUNDOFF
from dpcausal.mechanisms import LaplaceMechanism, NoiseGuard
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Models:
    """One fit's released nuisance models (None: the public constant is used)."""

    propensity: PropensityModel | None
    outcome: OutcomeModel | None


@dataclass(frozen=True)
class Scored:
    """The scored rows' (u, v), their covariates, and the nuisance ranges that bound them."""

    x: FloatArray
    u: FloatArray
    v: FloatArray
    ranges: NuisanceRanges
    models: list[dict[str, Any]]
    """The released nuisance models (DP outputs: publishing them costs nothing)."""


def _fit(setup: AteSetup, x: FloatArray, a: FloatArray, y: FloatArray, fold: int | None,
         noise: NoiseGuard) -> Models:
    prop_l, out_l = nuisance_learners(setup, fold)
    prop = prop_l.fit(x, a, clip=setup.kappa, noise=noise) if prop_l is not None else None
    out = out_l.fit(x, a, y, noise=noise) if out_l is not None else None
    return Models(prop, out)


def _predict(setup: AteSetup, public_e: float | None, models: list[Models], x: FloatArray
             ) -> tuple[FloatArray, FloatArray, FloatArray, NuisanceRanges]:
    """ê, μ̂₀, μ̂₁ at ``x`` — the average of ``models``' predictions — and their ranges over the
    box (the average of each model's exact range bounds the average's)."""
    n = x.shape[0]
    if public_e is not None:
        e, e_rng = np.full(n, public_e), (public_e, public_e)
    else:
        es, los, his = [], [], []
        for mod in models:
            assert mod.propensity is not None
            lo, hi = mod.propensity.features.linear_range(mod.propensity.theta)
            los.append(min(max(float(expit(lo)), setup.kappa), 1.0 - setup.kappa))
            his.append(min(max(float(expit(hi)), setup.kappa), 1.0 - setup.kappa))
            es.append(mod.propensity.predict(x))
        e_rng = (float(np.mean(los)), float(np.mean(his)))
        e = np.clip(np.mean(es, axis=0), *e_rng)
    mus: list[FloatArray] = []
    mu_rng: list[tuple[float, float]] = []
    for arm in (0, 1):
        if models[0].outcome is None:
            mus.append(np.full(n, setup.center))
            mu_rng.append((setup.center, setup.center))
            continue
        preds, los, his = [], [], []
        for mod in models:
            assert mod.outcome is not None
            lo, hi = mod.outcome.features.linear_range(mod.outcome.theta[arm])
            los.append(float(np.clip(mod.outcome.center + lo, *setup.y_bounds)))
            his.append(float(np.clip(mod.outcome.center + hi, *setup.y_bounds)))
            preds.append(mod.outcome.predict(x, arm))
        rng_a = (float(np.mean(los)), float(np.mean(his)))
        mus.append(np.clip(np.mean(preds, axis=0), *rng_a))
        mu_rng.append(rng_a)
    return e, mus[0], mus[1], NuisanceRanges(e_rng, mu_rng[0], mu_rng[1])


def describe(models: Models, fold: int | None) -> dict[str, Any]:
    """A released fit as JSON: its coefficients on the features x̃ (post-processing of DP
    outputs)."""
    out: dict[str, Any] = {"rows": "all" if fold is None else f"fold {fold + 1}"}
    if models.propensity is not None:
        out["propensity_theta"] = [float(t) for t in models.propensity.theta]
    if models.outcome is not None:
        out["outcome_theta"] = [[float(t) for t in row] for row in models.outcome.theta]
        out["outcome_center"] = models.outcome.center
    return out


def _union(a: NuisanceRanges, b: NuisanceRanges) -> NuisanceRanges:
    def cover(p: tuple[float, float], q: tuple[float, float]) -> tuple[float, float]:
        return min(p[0], q[0]), max(p[1], q[1])

    return NuisanceRanges(cover(a.e, b.e), cover(a.mu0, b.mu0), cover(a.mu1, b.mu1))


@dataclass(frozen=True)
class Fitted:
    """The released nuisance models and which rows each one scores."""

    fits: list[Models]
    scorers: list[tuple[npt.NDArray[np.intp], list[Models]]]
    """(scored row indices, the models averaged to score them)."""
    described: list[dict[str, Any]]


def fit_models(spec: CateSpec, setup: AteSetup, x: FloatArray, a: FloatArray, y: FloatArray,
               noise: NoiseGuard, ids: list[Any] | None = None) -> Fitted:
    """Fit the DP nuisance models on their rows (``nuisance_rows``)."""
    ate = spec.cate.ate_spec
    if setup.rows == "crossfit":
        fold = row_split.folds(spec.cate.split, setup.n_total, ate.folds, ids)
        fits = [_fit(setup, x[fold == k], a[fold == k], y[fold == k], k, noise)
                for k in range(ate.folds)]
        scorers = [(np.flatnonzero(fold == j), [fits[k] for k in range(ate.folds) if k != j])
                   for j in range(ate.folds)]
        return Fitted(fits, scorers, [describe(f, k) for k, f in enumerate(fits)])
    if setup.rows == "split":
        first, second = row_split.parts(spec.cate.split, setup.n_total, setup.n_nuisance[0],
                                        ids)
    else:
        first = second = np.arange(setup.n_total)
    fit = _fit(setup, x[first], a[first], y[first], None, noise)
    described = describe(fit, None)
    if setup.rows == "split":
        described["rows"] = "first part"
    return Fitted([fit], [(second, [fit])], [described])


def score_rows(spec: CateSpec, setup: AteSetup, fitted: Fitted, x: FloatArray, a: FloatArray,
               y: FloatArray) -> Scored:
    """(u, v) of the scored rows with the (fixed) released models, clipped into their bounds."""
    ate = spec.cate.ate_spec
    parts = [(rows, *_predict(setup, ate.propensity, models, x[rows]))
             for rows, models in fitted.scorers]
    rows = np.concatenate([p[0] for p in parts])
    e, m0, m1 = (np.concatenate([p[k] for p in parts]) for k in (1, 2, 3))
    ranges = parts[0][4]
    for p in parts[1:]:
        ranges = _union(ranges, p[4])
    u, v = score_parts(setup.weights, a[rows], y[rows], e, m0, m1,
                       residual_clip=setup.residual_clip)
    u_lo, u_hi = centred_range(setup.weights, setup.y_bounds, ranges,
                               residual_clip=setup.residual_clip)
    v_lo, v_hi = weight_range(setup.weights, ranges)
    return Scored(x[rows], np.clip(u, u_lo, u_hi), np.clip(v, v_lo, v_hi), ranges,
                  fitted.described)


def score(spec: CateSpec, setup: AteSetup, frame: pd.DataFrame, noise: NoiseGuard) -> Scored:
    """Validate and clip the rows, fit the DP nuisance models, score the scored rows."""
    x, a, y = clip_rows(spec, setup, frame)
    column = spec.cate.split.id_column
    ids = frame[column].tolist() if column is not None else None
    return score_rows(spec, setup, fit_models(spec, setup, x, a, y, noise, ids), x, a, y)


def unit(value: float, n: int, bound: float) -> float:
    """A sensitivity ``value`` enlarged by 8u·n·bound: it then bounds the change of an exactly
    rounded sum (``math.fsum``) of n terms of magnitude ≤ bound divided by it, rounding
    included (|fl(S) − fl(S′)| ≤ |S − S′| + u(|S| + |S′|), and one more rounding per division)."""
    return value + 8.0 * UNIT_ROUNDOFF * n * bound + 1e-300


def noisy_sum(noise: NoiseGuard, mech: LaplaceMechanism, values: npt.ArrayLike, size: float
              ) -> FloatArray:
    """Σ values (per coordinate) + Laplace noise at sensitivity (mechanism's) × ``size``: the
    statistic is divided by its unit, released through the planned per-unit mechanism, and
    multiplied back."""
    total = np.atleast_1d(np.asarray(values, dtype=np.float64))
    out: FloatArray = size * np.asarray(noise.release(mech, total / size), dtype=np.float64)
    return out


def _sums(cols: FloatArray) -> FloatArray:
    """Exactly rounded column sums of a 2-D array (rows × statistics)."""
    return np.array([math.fsum(cols[:, j]) for j in range(cols.shape[1])])


def release_all(spec: CateSpec, setup: AteSetup, sc: Scored, noise: NoiseGuard) -> Releases:
    """Every score-stage release, in order: U, (V), Q, then the groups' sums, sizes, Q."""
    ate = spec.cate.ate_spec
    mechs = unit_mechanisms(setup)
    n = sc.u.shape[0]
    u_lo, u_hi = centred_range(setup.weights, setup.y_bounds, sc.ranges,
                               residual_clip=setup.residual_clip)
    v_lo, v_hi = weight_range(setup.weights, sc.ranges)
    r_u = unit(u_hi - u_lo, n, max(abs(u_lo), abs(u_hi)))
    big_u = float(noisy_sum(noise, mechs.estimate, math.fsum(sc.u), r_u)[0])
    units: dict[str, float] = {"estimate": r_u}
    if mechs.denominator is not None:
        r_v = unit(v_hi - v_lo, n, v_hi)
        big_v = max(float(noisy_sum(noise, mechs.denominator, math.fsum(sc.v), r_v)[0]),
                    n * v_lo)  # post-processing: Σv ≥ n·inf v
        units["denominator"] = r_v
    else:
        big_v = float(n)
    tau = big_u / big_v
    c_lo, c_hi = centred_range(setup.weights, setup.y_bounds, sc.ranges, tau,
                               residual_clip=setup.residual_clip)
    dev = np.clip(sc.u - tau * sc.v, c_lo, c_hi)
    e_max = max(abs(c_lo), abs(c_hi))
    q_total = None
    if mechs.variance is not None:
        r_q = unit(e_max * e_max, n, e_max * e_max)
        q_total = float(noisy_sum(noise, mechs.variance, math.fsum(dev * dev), r_q)[0])
        units["variance"] = r_q
    groups = None
    if ate.groups:
        member = np.column_stack([np.all((sc.x >= lo) & (sc.x <= hi), axis=1)
                                  for lo, hi in setup.group_boxes])
        assert mechs.group_sums is not None
        assert mechs.group_sizes is not None
        r_e = unit(e_max, n, e_max)
        r_w = unit(v_hi, n, v_hi)
        sums = noisy_sum(noise, mechs.group_sums, _sums(member * dev[:, None]), r_e)
        sizes = noisy_sum(noise, mechs.group_sizes, _sums(member * sc.v[:, None]), r_w)
        gq = None
        if mechs.group_variance is not None:
            r_gq = unit(e_max * e_max, n, e_max * e_max)
            gq = noisy_sum(noise, mechs.group_variance, _sums(member * (dev * dev)[:, None]), r_gq)
            units["groups.variance"] = r_gq
        units["groups.sums"], units["groups.sizes"] = r_e, r_w
        groups = (sums, np.maximum(sizes, v_lo), gq)
    return Releases(n=n, big_u=big_u, big_v=big_v, tau=tau, q_total=q_total, groups=groups,
                    units=units, v_bounds=(v_lo, v_hi), e_max=e_max, models=sc.models,
                    ranges=sc.ranges)


def ate_run(spec: CateSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, Any], *,
            rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Fit the DP nuisances, score, release the sums through the guard, build the intervals."""
    setup = build_ate_setup(spec, len(frame))
    scored = score(spec, setup, frame, noise)
    rel = release_all(spec, setup, scored, noise)
    del scored
    return build_ate_release(spec, setup, plan, rel)
