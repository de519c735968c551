"""``two-stage`` on an engine: the same release as :func:`dpcausal.commands.two_stage.estimate.run`,
with every data pass a sum (or a stably combined list) of per-batch statistics of clipped, mapped
rows.

Passes. Every batch is validated, clipped and mapped by :func:`~dpcausal.commands.two_stage.setup.
prepare` (covariates clipped to their public box, ‖x_i‖ ≤ 1, outcome clipped to its public
bounds) before it enters any statistic.

* Stage 1, ``uniform`` / ``ipw-rct`` / ``ipw-known``: no pass of its own — the per-row unnormalised
  weight u_i (1; 1/p_{a_i}; 1 + exp(−ã_i·score_i) with the PUBLIC score) is computed inside the
  stage-2 pass.
* Stage 1, ``ipw-logit`` / ``ebw``: the shared solver and certificate of
  :mod:`dpcausal.commands.two_stage.weights` (``solve_dual`` = ``_ball_newton`` then, only when the
  bound in use is method-specific, ``_certified`` or the guaranteed fallback) run on the client
  with a ``fun(λ, μ)`` whose
  value, gradient and Hessian are engine passes: ipw-logit sums Σ(log(1+eᶻ) − a z), Σ(p − a)x,
  Σp(1−p)xxᵀ over batches (``map_sum``); ebw returns per batch (max z, Σe^{z−max}, Σe^{z−max}b,
  Σe^{z−max}bbᵀ — block-diagonal: b_i is zero outside its arm's block) and the client combines
  the log-sum-exp stably (``map_list``: rescale each batch by e^{max_b − max}, so no term under-
  or overflows whatever ‖λ‖ the Newton iterates reach). ebw
  first takes one pass for the arm counts n₀, n₁ (its rows are (n/n_a)·s·g(x)) and the target
  mean ḡ of the moments. A pass is cached by λ (the sums do not depend on the multiplier μ).
* The private outcome centre (``outcome_center: private``): one pass of Σy (each batch's sum in
  blocks, the batch totals added exactly rounded), then the centre's Laplace draw on the client
  (:mod:`dpcausal.commands.two_stage.center`); the stage-2 pass forms t = 2·clip(y − c, ±M_y)·ã.
* Stage 2: one pass of per-arm (Σu, Σu x xᵀ, Σu t x), then w = α_a·u with α the in-memory
  normalisation (n/Σu, or per arm (n/#arms)/Σ_a u for ebw ``arm_totals: equal``, then n/Σw), so
  H = Σw x xᵀ and g = Σw t x are exact up to summation order. θ = the exact ℓ₁-ball QP solve
  (:func:`~dpcausal.commands.two_stage.solver.solve_l1_ball_qp`) on the client.

Notes
-----
Neighbouring relation: replace one row (one individual); n is public (from the files' metadata),
exactly as in memory.

Sensitivity: unchanged by partitioning. The release is a function of the multiset of clipped rows
only: every pass is a sum over all rows, so the partition into batches changes only the order of
floating-point additions, never which rows enter or how each is mapped. The weights are therefore
the same map D ↦ w(D) ∈ nΔⁿ as in memory, and the stability sups W̄₁ˢ, W̄₂aug (exact enumerated sups
for uniform/ipw-rct/ipw-known, the proven ratio bounds for ipw-logit/ebw, or the universal caps)
bound how all n weights move when one row is replaced whatever the partitioning; the gradient-map
shift of stage 2 is ≤ ζ·W̄₁ˢ, ζ = 2M_x(2M_y + M_∞λ₁), as in
:func:`dpcausal.commands.two_stage.privacy.mechanism`. The ipw-logit/ebw bounds add the certified
solver slack η; the certificate's rounding allowance ε_g (``gradient_rounding_allowance``) bounds
the error of the float gradient for ANY summation order (γ_{n+1}·Σ|terms|, which holds for every
summation tree), so per-batch sums added on the client are covered. The ebw per-batch form p_i =
e^{z_i − m_b}·e^{m_b − M}/S errs relatively by ≤ (4R + 5)u (R bounds |z_i| at the feasible points
the certificate evaluates), within the allowance's per-component 4R + 2 log n + 16 that also covers
the in-memory (2R + log n + 8)u, before its ×4 safety factor (details in the allowance's Notes). So
the certificate, and the bound that relies on it, hold on the engine exactly as in memory.

Guarantee: the noise vector b is drawn ONCE, on the client, by ``mechanism(spec, cal,
dim).release(...)`` of the in-memory method (no noise on workers; central DP with a trusted
curator), with the same calibration from public inputs, so the release is ε-DP (Gamma) or
(ε, δ)-DP (Gaussian) under ``calibration: safe`` exactly as in memory. ``mmd`` (an n × n program,
limited to 5000 rows) has no engine path and is refused before any row is read.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.two_stage import center
from dpcausal.commands.two_stage import weights as wts
from dpcausal.commands.two_stage.privacy import stability_bounds
from dpcausal.commands.two_stage.setup import (
    TwoStageSetup,
    build_setup,
    coef_vector,
    prepare,
    refuse_mmd_on_engine,
    targets,
    with_radius,
)
from dpcausal.commands.two_stage.spec import EbwSection, IpwLogitSection, TwoStageSpec
from dpcausal.commands.two_stage.stage1 import _moments
from dpcausal.commands.two_stage.stage2 import objective_noise, release_rule
from dpcausal.engine.base import Engine, batch_error
from dpcausal.errors import DataError
from dpcausal.learners.dp_features import unit_ball_scale
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release
from dpcausal.numerics import exact_total

FloatArray = npt.NDArray[np.float64]
Part = tuple[FloatArray | None, npt.NDArray[np.bool_], FloatArray, FloatArray | None,
             tuple[bool, int]]
"""One prepared batch: stage-2 features x (‖x‖ ≤ 1), treated mask a, the outcome y clipped to
[L, U] (the targets t = 2(y − c)ã are formed in the stage-2 pass, once the centre c is known:
it may be released privately after the batches are cached), the stage-1
input of the weight method (ipw-known: public score; ipw-logit: (1, s); ebw: moments g(s), whose
first 1 + p columns are (1, s)), and (intercept, p). For ipw-logit and ebw, x is None: it is
(1, s)/√d (or s/√d), recomputed from the stage-1 input in the stage-2 pass with the arithmetic of
``FeatureMap.transform`` (the same values), so a cached batch holds one copy of the covariates."""
CACHE_POINTS = 16
"""Stage-1 sums kept by λ (the solver re-evaluates a point at a new multiplier μ)."""


def prepare_batch(spec: TwoStageSpec, setup: TwoStageSetup, frame: pd.DataFrame,
                  start: int) -> Part:
    """two-stage's per-row mapping of one batch; row numbers in errors are global."""
    sec = spec.two_stage
    try:
        data = prepare(spec, setup, frame.reset_index(drop=True), spec.data.path)
    except DataError as exc:
        raise batch_error(exc, start) from None
    a, y = data.a, data.y
    extra: FloatArray | None = None
    x: FloatArray | None = np.ascontiguousarray(data.x)
    lin = (setup.fmap.intercept, len(setup.fmap.names))
    if sec.weights == "ipw-known":
        assert sec.ipw_known is not None
        extra = sec.ipw_known.intercept + data.raw @ coef_vector(spec)
    elif sec.weights == "ipw-logit":
        extra = np.hstack([np.ones((len(data.y), 1)), data.scaled])
        x = None
    elif sec.weights == "ebw":
        extra = _moments(data.scaled, (sec.ebw or EbwSection()).moments)[0]
        x = None
    del data
    return x, a, y, extra, lin


def features(part: Part) -> FloatArray:
    """The stage-2 features x of a batch (recomputed from (1, s) for ipw-logit and ebw)."""
    x, _, _, extra, (intercept, p) = part
    if x is not None:
        return x
    assert extra is not None
    cols = extra[:, :1 + p] if intercept else extra[:, 1:1 + p]
    return cols * unit_ball_scale(p + int(intercept))  # as FeatureMap.transform, bit for bit


# ---- per-batch statistics (module level: pickled to Dask workers) ----

def arm_moment_sums(part: Part, start: int) -> tuple[FloatArray, FloatArray]:
    """ebw's first pass: ([n₀, n₁], Σ g(x)) of the batch."""
    _, a, _, g, _ = part
    assert g is not None
    n1 = float(np.count_nonzero(a))
    return np.array([len(a) - n1, n1]), g.sum(axis=0)


def logit_pass(part: Part, start: int, *, lam: FloatArray) -> tuple[float, FloatArray, FloatArray]:
    """:func:`~dpcausal.commands.two_stage.weights.logit_sums` of the batch at λ."""
    _, a, _, feats, _ = part
    assert feats is not None
    return wts.logit_sums(feats, a.astype(np.float64), lam)


def _ebw_blocks(part: Part, counts: tuple[int, int], kappa: float, m_g: float
                ) -> list[tuple[npt.NDArray[np.bool_], FloatArray]]:
    """(mask, nonzero block of the rows b_i) for the control then the treated rows of the batch."""
    _, a, _, g, _ = part
    assert g is not None
    n = counts[0] + counts[1]
    return [(mask, wts.ebw_arm_rows(g[mask], n, n_arm, kappa, m_g) if n_arm
             else np.zeros((0, g.shape[1])))
            for mask, n_arm in ((~a, counts[0]), (a, counts[1]))]


def _ebw_exponents(blocks: list[tuple[npt.NDArray[np.bool_], FloatArray]], lam: FloatArray
                   ) -> tuple[float, list[FloatArray]]:
    """(m, [e_arm]) with z = ⟨λ_arm, b_i⟩ (λ's block of the row's arm), m = max z, e = e^{z − m}."""
    k = blocks[0][1].shape[1]
    zs = [rows @ lam[j * k:(j + 1) * k] for j, (_, rows) in enumerate(blocks)]
    m = max((float(z.max()) for z in zs if z.size), default=-math.inf)
    return m, [np.exp(z - m) for z in zs]


def ebw_pass(part: Part, start: int, *, lam: FloatArray, counts: tuple[int, int], kappa: float,
             m_g: float) -> tuple[float, float, FloatArray, FloatArray]:
    """(m = max z, Σe, Σe b, Σe b bᵀ) of the batch with e = exp(z − m), z = ⟨λ, b_i⟩; b_i is
    zero outside its arm's block, so Σe b bᵀ is block-diagonal and computed per block."""
    blocks = _ebw_blocks(part, counts, kappa, m_g)
    m, es = _ebw_exponents(blocks, lam)
    k = blocks[0][1].shape[1]
    first, second, total = np.zeros(2 * k), np.zeros((2 * k, 2 * k)), 0.0
    for j, ((_, rows), e) in enumerate(zip(blocks, es, strict=True)):
        blk = slice(j * k, (j + 1) * k)
        total += float(e.sum())
        first[blk] = rows.T @ e
        second[blk, blk] = (rows.T * e) @ rows
    return m, total, first, second


def combine_ebw(parts: list[tuple[float, float, FloatArray, FloatArray]]
                ) -> tuple[float, FloatArray, FloatArray]:
    """(log Σ e^z, Σp b, Σp b bᵀ) from the per-batch shifted sums (stable log-sum-exp)."""
    top = max(p[0] for p in parts)
    total = 0.0
    first: FloatArray | None = None
    second: FloatArray | None = None
    for m, s, v, h in parts:
        if s == 0.0:
            continue
        scale = math.exp(m - top)
        total += scale * s
        first = scale * v if first is None else first + scale * v
        second = scale * h if second is None else second + scale * h
    assert first is not None
    assert second is not None
    return top + math.log(total), first / total, second / total


def _arm_sums(x: FloatArray, a: npt.NDArray[np.bool_], t: FloatArray, u: FloatArray
              ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per arm (control, treated): counts, Σu, Σu x xᵀ, Σu t x, and the number of bad u."""
    d = x.shape[1]
    counts, tot = np.zeros(2), np.zeros(2)
    hs, gs = np.zeros((2, d, d)), np.zeros((2, d))
    for k, mask in enumerate((~a, a)):
        xm, um = x[mask], u[mask]
        xw = xm * um[:, None]
        counts[k] = um.size
        tot[k] = um.sum()
        hs[k] = xw.T @ xm
        gs[k] = xw.T @ t[mask]
    bad = np.array([float(np.count_nonzero(~(np.isfinite(u) & (u >= 0))))])
    return counts, tot, hs, gs, bad


def outcome_pass(part: Part, start: int) -> float:
    """Σ y of the batch (the private centre's sum; blocks added exactly rounded)."""
    return center.outcome_sum(part[2])


def stage2_pass(part: Part, start: int, *, weights: str, p_treated: float | None,
                lam: FloatArray | None, setup: TwoStageSetup) -> tuple[FloatArray, ...]:
    """Per-arm stage-2 sums of the batch with the unnormalised weights u of ``weights`` and the
    targets of ``setup``'s centre."""
    _, a, y, extra, _ = part
    t = targets(setup, y, a)
    x = features(part)
    if weights == "uniform":
        u = np.ones(len(t))
    elif weights == "ipw-rct":
        assert p_treated is not None
        u = np.where(a, 1.0 / p_treated, 1.0 / (1.0 - p_treated))
    else:  # ipw-known (public score) or ipw-logit (score of the fitted λ)
        assert extra is not None
        score = extra if lam is None else extra @ lam
        u = 1.0 + np.exp(-np.where(a, score, -score))
    return _arm_sums(x, a, t, u)


def ebw_stage2_pass(part: Part, start: int, *, lam: FloatArray, counts: tuple[int, int],
                    kappa: float, m_g: float, setup: TwoStageSetup
                    ) -> tuple[float, tuple[FloatArray, ...]]:
    """(m, per-arm stage-2 sums with u = exp(z − m)), m = the batch's max z."""
    _, a, y, _, _ = part
    t = targets(setup, y, a)
    blocks = _ebw_blocks(part, counts, kappa, m_g)
    m, es = _ebw_exponents(blocks, lam)
    u = np.empty(len(t))
    for (mask, _), e in zip(blocks, es, strict=True):
        u[mask] = e
    return m, _arm_sums(features(part), a, t, u)


# ---- the client side ----

def _cached(fn: Callable[[FloatArray], Any]) -> Callable[[FloatArray], Any]:
    """``fn(λ)`` remembered for the last CACHE_POINTS points (one engine pass per new λ)."""
    memo: OrderedDict[bytes, Any] = OrderedDict()

    def call(lam: FloatArray) -> Any:
        key = np.asarray(lam, dtype=np.float64).tobytes()
        if key not in memo:
            memo[key] = fn(np.array(lam, dtype=np.float64))
            if len(memo) > CACHE_POINTS:
                memo.popitem(last=False)
        return memo[key]

    return call


def _ebw_setup(spec: TwoStageSpec, engine: Engine, n: int
               ) -> tuple[tuple[int, int], FloatArray, float, int]:
    """ebw's first pass: the arm counts, the dual's target, M_g and the number of moments k."""
    ebw = spec.two_stage.ebw or EbwSection()
    counts_f, g_sum = engine.map_sum(arm_moment_sums)
    counts = (int(counts_f[0]), int(counts_f[1]))
    k = g_sum.size
    m_g = math.sqrt(k)  # as _moments: ‖g‖ ≤ √k with every |s_j| ≤ 1
    target = wts.ebw_target(g_sum / n, ebw.min_arm_fraction, m_g)
    return counts, target, m_g, k


def stage1_objective(spec: TwoStageSpec, setup: TwoStageSetup, engine: Engine, n: int
                     ) -> tuple[Any, int, float, float, dict[str, Any]]:
    """ipw-logit / ebw: (fun, dim, radius, ridge, pass keywords) of the stage-1 dual, where
    ``fun(λ, μ)`` is computed over the engine's passes (ebw: after its first pass)."""
    sec = spec.two_stage
    if sec.weights == "ebw":
        ebw = sec.ebw or EbwSection()
        counts, target, m_g, k = _ebw_setup(spec, engine, n)
        kw: dict[str, Any] = {"counts": counts, "kappa": ebw.min_arm_fraction, "m_g": m_g}
        sums = _cached(lambda lam: combine_ebw(
            engine.map_list(functools.partial(ebw_pass, lam=lam, **kw))))
        return wts.ebw_objective(sums, n, 2 * k, target, ebw.ridge), 2 * k, ebw.radius, \
            ebw.ridge, kw
    assert sec.weights == "ipw-logit"
    cfg = sec.ipw_logit or IpwLogitSection()
    d = 1 + len(setup.fmap.names)
    sums = _cached(lambda lam: engine.map_sum(functools.partial(logit_pass, lam=lam)))
    return wts.logit_objective(sums, n, d, cfg.ridge), d, cfg.radius, cfg.ridge, {}


def _combine_shifted(listed: list[tuple[float, tuple[FloatArray, ...]]]) -> tuple[FloatArray, ...]:
    """Σ over batches of e^{m_b − max m}·(the batch's Σu terms); counts and bad counts unscaled."""
    top = max(m for m, _ in listed)
    stats: tuple[FloatArray, ...] | None = None
    for m, s in listed:
        scale = math.exp(m - top) if math.isfinite(m) else 0.0
        scaled = (s[0], s[1] * scale, s[2] * scale, s[3] * scale, s[4])
        stats = scaled if stats is None else tuple(
            x + y for x, y in zip(stats, scaled, strict=True))
    assert stats is not None
    return stats


def stage2_stats(spec: TwoStageSpec, setup: TwoStageSetup, engine: Engine, n: int
                 ) -> tuple[FloatArray, FloatArray]:
    """Stage 1 over the engine's passes, then H = Σ w x xᵀ and g = Σ w t x (private)."""
    sec = spec.two_stage
    assert sec.weights != "mmd", "refused by refuse_mmd_on_engine"
    # as compute_weights: certify only when the bound in use is method-specific (a bound clipped
    # to the universal caps holds for ANY weights, so no data-dependent refusal can occur there)
    certify = (sec.sensitivity == "method"
               and stability_bounds(spec, setup, n).method_specific(sec.calibration))
    lam = None
    if sec.weights in ("ipw-logit", "ebw"):
        fun, d, radius, ridge, kw = stage1_objective(spec, setup, engine, n)
        lam = wts.solve_dual(fun, d, radius, ridge, n=n, certify=certify, what=sec.weights)
    if sec.weights == "ebw":
        assert lam is not None
        stats = _combine_shifted(
            engine.map_list(functools.partial(ebw_stage2_pass, lam=lam, setup=setup, **kw)))
    else:
        p_treated = sec.ipw_rct.p_treated if sec.ipw_rct is not None else None
        stats = engine.map_sum(functools.partial(stage2_pass, weights=sec.weights,
                                                 p_treated=p_treated, lam=lam, setup=setup))
    counts_a, tot, hs, gs, bad = stats
    if not _stats_ok(bad, tot) and not certify:
        # as compute_weights: the bound in use holds for any weights, so the fixed public choice
        # w = 1 replaces weights that cannot be normalised (never a data-dependent refusal)
        stats = engine.map_sum(functools.partial(stage2_pass, weights="uniform", p_treated=None,
                                                 lam=None, setup=setup))
        counts_a, tot, hs, gs, bad = stats
    if not _stats_ok(bad, tot):
        raise RuntimeError("stage-1 weights are not finite, nonnegative and positive in sum")
    if sec.weights == "ebw" and (sec.ebw or EbwSection()).arm_totals == "equal":
        arms = [k for k in (0, 1) if counts_a[k] > 0]  # each non-empty arm: n/(#arms)
        alpha = np.array([(n / len(arms)) / tot[k] if k in arms else 0.0 for k in (0, 1)])
    else:
        alpha = np.full(2, n / float(tot.sum()))
    alpha = alpha * (n / float(alpha @ tot))  # the in-memory w·(n/Σw)
    return np.einsum("k,kij->ij", alpha, hs), alpha @ gs


def _stats_ok(bad: FloatArray, tot: FloatArray) -> bool:
    """Whether the per-arm weight totals can be normalised (finite, ≥ 0, positive in sum)."""
    return bool(bad[0] == 0 and np.all(np.isfinite(tot)) and np.all(tot >= 0)
                and float(tot.sum()) > 0)


def run(spec: TwoStageSpec, engine: Engine, plan: PrivacyPlan, side: dict[str, pd.DataFrame],
        *, rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """Stage 1 and the stage-2 statistics on the engine; b drawn once and θ solved on the client."""
    refuse_mmd_on_engine(spec)
    setup = with_radius(build_setup(spec), plan.details)
    n = engine.n_rows  # the engine checks every pass streams exactly these rows
    engine.load(functools.partial(prepare_batch, spec, setup))
    b = None
    if setup.private_center:  # b (data-free) first, in the plan's order; a pass for Σy, the centre
        b = objective_noise(spec, setup, n, noise=noise)
        total = exact_total(engine.map_list(outcome_pass))
        setup = center.release(spec, setup, total, n, noise=noise)
    h, g = stage2_stats(spec, setup, engine, n)
    release = release_rule(spec, setup, plan, h, g, n, side, noise=noise, b=b)
    del h, g
    release.summary["engine"] = engine.description
    return release
