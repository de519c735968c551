"""``cate`` (``features: rff``) on an engine: the same release as
:func:`dpcausal.commands.cate.estimate.run`, with every data pass a sum over batches (local
streaming) or partitions (Dask) of per-batch statistics of clipped rows.

Notes
-----
Neighbouring relation: replace one row; n public (as in memory). Every row is validated (A ∈ {0, 1})
and clipped (x to the public box, Y to the public outcome bounds) before it enters any sum.

Partition composition. The split is the in-memory one
(:func:`dpcausal.commands.cate.estimate.halves`: by default a secret random permutation drawn on the
client for this run, never stored or sent anywhere but to the workers' mapping tasks, inside the
curator's trust boundary; or the public ``seeded`` one), built from the public n alone: row i is in
the nuisance half D̃ when it is among the first n_nuisance rows of the permutation. Each batch
selects its rows of D̃ or D by its global row index (:func:`dpcausal.engine.split.members`), so the
halves — and hence the parallel composition over D̃ and D (total (ε, δ), not (2ε, 2δ)) — do not
depend on the file layout or the partition count, and a seeded split gives the in-memory halves
exactly.

Sensitivities, unchanged by partitioning because every statistic is an exact sum over the same
rows and every solve stops at the in-memory certificate:

* DP ridge per arm on D̃: the per-arm sufficient statistics (Σ x̃x̃ᵀ, Σ r x̃) are summed per batch
  in blocks and over batches exactly rounded (``exact_total`` of ``map_list``: the summation the
  public accuracy bound assumes, for any partitioning) and solved on the client by
  :func:`~dpcausal.learners.dp_ridge.solve_ridge_arms`, within the public E of the exact
  minimiser, so Δ₂ = 2G/(mλ) + 2√2·E holds (no check on the data).
* DP logistic on D̃: :func:`~dpcausal.learners.dp_logistic.newton_logistic` (the in-memory Newton,
  and its fallback with a public step budget) with its gradient/Hessian and line-search objectives
  from passes summed the same way; it returns only where the public certificate accepts, with ∇F
  summed over every D̃ row, so Δ₂ = 2/(mλ) + 2D holds.
* Second stage on D: :func:`~dpcausal.commands.cate.rff.solve_rff` (the in-memory solver, on the
  engine's batches) returns a point within 0.99·τ/(2λ0) of the minimiser, certified by ∇J summed
  over every D row with a proven rounding bound or reached by the guaranteed fallback
  (:mod:`~dpcausal.commands.cate.rff_accuracy`), so Δ = L_w/(λ0 n) + τ/λ0 of
  :func:`~dpcausal.commands.cate.privacy.function_mechanism` holds. The line search's loss sums
  that batches add are of s²·ℓ_c, s the public power of two ``RffAccuracy.scale`` (in range at
  any outcome scale, and the same decisions as unscaled ones: ``rff._scaled_objective``).

Noise: drawn once, on the client, by the same mechanism objects and in the in-memory order
(propensity, then outcome, then the GP weight path), so a test noise seed gives the in-memory
release; workers never draw noise.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.special import log_expit

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.cate.estimate import clip_rows, halves
from dpcausal.commands.cate.krr import pseudo_outcomes
from dpcausal.commands.cate.privacy import function_mechanism, nuisance_learners, point_noise_sd
from dpcausal.commands.cate.queries import query_points
from dpcausal.commands.cate.release import build_release
from dpcausal.commands.cate.rff import solve_rff
from dpcausal.commands.cate.setup import CateSetup, build_setup, rff_features
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.engine import split
from dpcausal.engine.base import Engine, batch_error
from dpcausal.errors import DataError, SpecError
from dpcausal.learners.dp_logistic import (
    LINE_STEPS,
    PropensityModel,
    armijo_accepts,
    grad_hess_sums,
    newton_logistic,
)
from dpcausal.learners.dp_ridge import OutcomeModel, arm_sums, solve_ridge_arms
from dpcausal.learners.rounding import block_total, exact_total
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
NuisancePart = tuple[FloatArray, FloatArray, FloatArray]
"""A batch's D̃ rows: box features x̃ (‖x̃‖ ≤ 1), treatment a, clipped outcome y."""
SecondPart = tuple[FloatArray, FloatArray, FloatArray]
"""A batch's D rows: box-scaled covariates s, weights ρ, pseudo-outcomes φ."""


def _rows(spec: CateSpec, setup: CateSetup, frame: pd.DataFrame, start: int
          ) -> tuple[FloatArray, FloatArray, FloatArray]:
    try:
        return clip_rows(spec, setup, frame.reset_index(drop=True))
    except DataError as exc:
        raise batch_error(exc, start) from None


def prepare_nuisance(spec: CateSpec, setup: CateSetup, bits: npt.NDArray[np.uint8],
                     frame: pd.DataFrame, start: int) -> NuisancePart:
    """The batch's rows in D̃ (``bits``: the packed mask over global rows), validated, clipped,
    as (x̃, a, y)."""
    x, a, y = _rows(spec, setup, frame, start)
    sel = split.members(bits, start, x.shape[0])
    return np.ascontiguousarray(setup.box.transform(x[sel])), a[sel], y[sel]


def prepare_second(spec: CateSpec, setup: CateSetup, bits: npt.NDArray[np.uint8],
                   prop: PropensityModel, outm: OutcomeModel, frame: pd.DataFrame,
                   start: int) -> SecondPart:
    """The batch's rows in D (not in D̃): (s, ρ, φ) from the released nuisances (fixed)."""
    x, a, y = _rows(spec, setup, frame, start)
    sel = ~split.members(bits, start, x.shape[0])
    x, a, y = x[sel], a[sel], y[sel]
    rho, phi = pseudo_outcomes(setup.learner, a, y, prop.predict(x), outm.predict(x, 0),
                               outm.predict(x, 1))
    return np.ascontiguousarray(setup.box.unit(x)), rho, phi


# ------------------------------------------------------------------ per-batch statistics on D̃


def ridge_sums(part: NuisancePart, start: int, *, center: float, d: int
               ) -> tuple[FloatArray, FloatArray]:
    """Per-arm (Σ x̃x̃ᵀ, Σ r x̃) with r = y − c (y already clipped)."""
    xt, a, y = part
    if xt.shape[0] == 0:
        return np.zeros((2, d, d)), np.zeros((2, d))
    return arm_sums(xt, a, y - center)


def first_pass(part: NuisancePart, start: int, *, center: float, d: int) -> tuple[Any, ...]:
    """The ridge sums and the logistic statistics at θ = 0, in one pass."""
    return (*ridge_sums(part, start, center=center, d=d),
            logistic_pass(part, start, theta=np.zeros(d), step=None))


def _logistic_loss(z: FloatArray, a: FloatArray) -> FloatArray:
    """Σ_i ℓ over the rows for each column of z (z: rows × k)."""
    return -log_expit(np.where((a > 0.5)[:, None], z, -z)).sum(axis=0)


def logistic_pass(part: NuisancePart, start: int, *, theta: FloatArray, step: FloatArray | None
                  ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(Σ (σ − a)x̃, Σ σ(1 − σ)x̃x̃ᵀ) at θ − step (θ when ``step`` is None), and the loss sums
    Σ ℓ at θ − t·step for t in ``LINE_STEPS`` (at θ when ``step`` is None)."""
    xt, a, _ = part
    at = theta if step is None else theta - step
    cands = theta[:, None] if step is None else theta[:, None] - step[:, None] * LINE_STEPS[None, :]

    def block(rows: slice) -> tuple[FloatArray, FloatArray, FloatArray]:
        grad, hess = grad_hess_sums(xt[rows], a[rows], at)
        return grad, hess, _logistic_loss(xt[rows] @ cands, a[rows])

    return block_total(block, xt.shape[0])


def fit_propensity(engine: Engine, m: int, d: int, l2: float,
                   first: tuple[FloatArray, FloatArray, FloatArray] | None = None) -> FloatArray:
    """θ̂ of the DP logistic on D̃ by :func:`newton_logistic` over passes (same certificate);
    ``first`` is :func:`logistic_pass` at θ = 0 when a pass already computed it."""
    full: dict[str, Any] = {}

    def grad_hess(theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        if "theta" in full and np.array_equal(full["theta"], theta):
            return full["grad"], full["hess"]  # computed with the accepted full step
        g, h, _ = exact_total(engine.map_list(
            functools.partial(logistic_pass, theta=theta, step=None)))
        return g, h

    def line_search(theta: FloatArray, step: FloatArray, val: float, slope: float
                    ) -> tuple[FloatArray, float]:
        g, h, losses = exact_total(engine.map_list(
            functools.partial(logistic_pass, theta=theta, step=step)))
        full.clear()
        for k, t in enumerate(LINE_STEPS):
            cand = theta - t * step
            cval = float(losses[k]) / m + 0.5 * l2 * float(cand @ cand)
            if armijo_accepts(cval, val, float(t), slope):
                break
        if k == 0:
            full.update(theta=cand, grad=g, hess=h)
        return cand, cval

    zero = np.zeros(d)
    g0, h0, loss0 = first if first is not None else exact_total(engine.map_list(
        functools.partial(logistic_pass, theta=zero, step=None)))
    full.update(theta=zero, grad=g0, hess=h0)
    return newton_logistic(grad_hess, line_search, d=d, m=m, l2=l2, val=float(loss0[0]) / m)


def fit_nuisances(spec: CateSpec, setup: CateSetup, engine: Engine,
                  bits: npt.NDArray[np.uint8], noise: NoiseGuard
                  ) -> tuple[PropensityModel, OutcomeModel]:
    """The DP nuisances on D̃, noised once each on the client (propensity first, as in memory)."""
    prop_l, out_l = nuisance_learners(spec, setup)
    d = setup.box.dim
    engine.load(functools.partial(prepare_nuisance, spec, setup, bits))
    grams, rhs, first = exact_total(engine.map_list(
        functools.partial(first_pass, center=out_l.center, d=d)))
    theta_e = fit_propensity(engine, setup.n_nuisance, d, prop_l.l2, first)
    theta_mu = solve_ridge_arms(grams, rhs, setup.n_nuisance, out_l.l2)
    prop = prop_l.release(theta_e, clip=setup.kappa, noise=noise)
    outm = out_l.release(theta_mu, noise=noise)
    return prop, outm


def nuisance_mask(spec: CateSpec, setup: CateSetup) -> split.Packed:
    """Membership of D̃ over the global row index, by the in-memory split (no data; by default a
    fresh secret permutation, so call it once per run)."""
    return split.pack(halves(spec, setup)[0], setup.n_total)


def run(spec: CateSpec, engine: Engine, plan: PrivacyPlan, side: dict[str, Any], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """As ``cate.run`` for ``features: rff``, with the data passes on ``engine``."""
    if spec.cate.features != "rff":
        raise SpecError(f"cate.features: '{spec.cate.features}' has no engine path; set "
                        "cate.features: rff, or run in memory (no engine section, no --engine)")
    setup = build_setup(spec, engine.n_rows)
    queries = query_points(spec, setup, side)
    bits = nuisance_mask(spec, setup)
    prop, outm = fit_nuisances(spec, setup, engine, bits, noise)
    feats = rff_features(spec, setup)
    engine.load(functools.partial(prepare_second, spec, setup, bits, prop, outm))
    del bits
    assert setup.rff_accuracy is not None
    fit = solve_rff(engine, feats, n=setup.n, lam0=setup.lam0, huber_c=setup.huber_c,
                    accuracy=setup.rff_accuracy)
    weights = noise.release_weights(function_mechanism(spec, setup), fit.w)
    sq = setup.box.unit(queries[list(setup.covariates)].to_numpy(dtype=np.float64))
    release = build_release(spec, setup, queries, feats.evaluate(sq, weights), weights,
                            point_noise_sd(spec, setup, len(queries)))
    # public facts only: the pass and iteration counts follow the data, so they are never published
    release.summary["engine"] = engine.description
    return release


__all__ = ["run"]
