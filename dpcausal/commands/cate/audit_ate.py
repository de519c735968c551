"""What ``audit privacy`` needs to drive ``cate`` with ``estimand: ate`` (docs/proofs/cate_ate.md).

Neighbouring relation: replace one record; n is public. The generators below replace one row in
place, and D and D′ use the same split (for ``nuisance_rows: split`` or ``crossfit`` with the
default ``kind: random``, the one fixed permutation of
:func:`dpcausal.commands.common.row_split.for_audit`, the coupling under which the random split's
guarantee is proved; the black-box runs use it too).

Mechanism inputs (``pre_noise``): the release's own code path (:func:`.ate_estimate.score`,
:func:`.ate_estimate.release_all`) run through :class:`Conditioned`, a noise guard that records
each mechanism's input and returns a FIXED output in its place, the same on D and D′. Each
stage's input is then its real pre-noise value given the same earlier releases on both sides —
the conditional form in which the proof's sequential composition claims each stage's ε (§3, §4):

- the nuisance stages: the non-private θ̂ of the ℓ2-logistic propensity model, the stacked ridge
  (θ̂₀, θ̂₁), the per-arm sums and counts of ``outcome_model: means``, or the one pooled sum of
  ``outcome_model: pooled`` (each fold's under ``crossfit``);
- the score stages (``estimate``, ``denominator``, ``variance``, ``groups.*``): the statistic
  divided by its unit (the mechanisms are planned per unit, sensitivity 1 or 2m), given the fixed
  released models ê ≡ κ (the smallest allowed propensity; a public ``propensity`` is itself) and
  μ̂₀ ≡ μ̂₁ ≡ c, the centre of the outcome range, and the fixed released estimate τ̃ = 0, which is
  the centre of the scores' range under these models (the scores are odd in Y − c), so
  E = max |u − τ̃v| = R/2 and a row with u = τ̃ exists (Y = c).

With constant models the score bounds of Lemma 1 are attained exactly (the relaxation to
independent ranges is exact when each range is a point), so the planted score pairs reach the
stated sensitivities up to the rounding allowance — except where the bound counts groups a pair
cannot reach: ‖ΔW‖₁ ≤ 2m·sup v and ‖ΔQ_G‖₁ ≤ 2m·E² need two rows in disjoint sets of m groups
each (on the shipped example's two abutting age groups, m = 2 but every row is in a group, so a
pair reaches 2 of the 4 units). ``denominator`` (ATO) needs ê to vary over the box: for it the
score stages are also conditioned on a second propensity model (:func:`conditionings`).

The nuisance stages: the means model's sums and counts are attained (Y top vs bottom, the arm
flipped), the pooled mean's sum too (Y top vs bottom on a quiet background). The propensity's
Δ₂ = 2/(mλ) + 2D is not: one row moves the logistic gradient by
(σ − A)x̃ − (σ′ − A′)x̃′, which is 2 only if σ ≈ 0 at a treated row and ≈ 1 at an untreated one next to it. The
planted pair — every other fitting row untreated at the box's centre (x̃ = the intercept alone, so
nothing curves the objective across it), the row treated at the upper vs the lower corner — moves
it by (1 − σ)(x̃ − x̃′), of norm (1 − σ)√(q/(1 + q/4)) (1.66(1 − σ) at q = 9; σ ≈ 0.15 is as low as
λ lets the background push it): about 0.7 of the bound. The ridge's bound 2h(1 + 1/√λ)/(mλ) uses
‖θ̂‖ ≤ h/√λ, which no data set approaches; its quiet pair (as the τ(x) audit's) reaches 0.2–0.4.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.special import logit

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.neighbours import Pair, RowDomain, replace_one
from dpcausal.commands.cate.ate_estimate import release_all, score
from dpcausal.commands.cate.ate_setup import AteSetup, build_ate_setup
from dpcausal.commands.cate.audit import audit_spec
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common import row_split
from dpcausal.errors import SpecError
from dpcausal.mechanisms import Draw, NoiseGuard
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]
KINDS = ("scores top vs bottom", "score vs the centre", "groups apart", "propensity",
         "outcome model", "corner", "random", "weights apart")
"""The pair kinds, in the order the generator cycles through them (the last for ``weights:
overlap`` with a propensity model only)."""


def _setup(spec: CateSpec, n_rows: int) -> AteSetup:
    """The release's setup; refuses the objective-perturbation propensity, whose privacy is not a
    function of a pre-noise vector (its loss is a density ratio over the perturbed solve)."""
    setup = build_ate_setup(spec, n_rows)
    if setup.propensity_learner == "objective":
        raise SpecError(
            "cate.ate.propensity_learner: audit privacy does not cover objective perturbation (its "
            "privacy loss is a density ratio of the perturbed solve, not a function of a pre-noise "
            "value); its proof is docs/proofs/cate_ate.md §3.8 and its tests "
            "cli_tests/unit/test_dp_objective.py. Audit the same spec with "
            "propensity_learner: output", field="cate.ate.propensity_learner")
    return setup


def _domain(spec: CateSpec, setup: AteSetup) -> RowDomain:
    cols = setup.columns
    return RowDomain(cols.numeric_domain(),
                     {cols.treatment: [spec.cate.treated, spec.cate.control_label()]})


def synthesize(spec: CateSpec, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """``n`` rows drawn uniformly inside the public box and outcome bounds, A ∈ {0, 1}."""
    return _domain(spec, _setup(spec, n)).synthesize(n, rng)


class Conditioned(NoiseGuard):
    """A noise guard (checking the plan like the real one) that keeps each mechanism's input and
    returns a fixed output, the same on every data set: the audit's released values.

    Outputs: the propensity model θ = (logit(e₀)/x̃₀, 0, …) (ê ≡ e₀ over the whole box), and zero
    for every other stage: outcome models μ̂ ≡ c (ridge θ = 0; means S̃ = 0, Ñ = 0 ↦ c + 0/1),
    τ̃ = 0, and values the release only post-processes.
    """

    def __init__(self, plan: PrivacyPlan, propensity_theta: FloatArray) -> None:
        super().__init__(plan, test_seed=0)
        self.inputs: dict[str, FloatArray] = {}
        self._theta = propensity_theta

    def _draw(self, draw: Draw) -> Any:
        value = np.asarray(draw.value, dtype=np.float64)
        self.inputs[draw.stage] = value
        if draw.stage.endswith(".propensity"):
            return self._theta.copy()
        return np.zeros_like(value)


def conditionings(spec: CateSpec, setup: AteSetup) -> list[FloatArray]:
    """The released propensity models the score stages are conditioned on, as θ: ê ≡ κ over the
    box; and, for ``weights: overlap``, ê rising from κ (first covariate at its lower bound) to ½
    (at its upper bound), so that v = ê(1 − ê) spans its range. None without a propensity model
    (a public constant)."""
    if setup.propensity_l2 is None:
        return []
    t = float(logit(spec.cate.kappa)) / setup.box.scale
    flat = np.zeros(setup.box.dim)
    flat[0] = t
    if setup.weights != "overlap":
        return [flat]
    sloped = np.zeros(setup.box.dim)
    sloped[0], sloped[1] = t / 2.0, -t  # θᵀx̃ = scale·(θ₀ + θ₁(s₁ − ½)): logit κ at s₁ = 0, 0 at 1
    return [flat, sloped]


def pre_noise(spec: CateSpec, frame: pd.DataFrame, plan: PrivacyPlan,
              side: dict[str, Any]) -> dict[str, FloatArray]:
    """Each mechanism's input on ``frame`` (non-private; audit only), by stage, given the fixed
    releases of :class:`Conditioned`; with several :func:`conditionings`, a score stage's input
    has one row per conditioning (the audit takes the worst row; the nuisance stages' inputs come
    before any release and are the same in every run)."""
    spec = audit_spec(spec)
    setup = _setup(spec, len(frame))
    runs = []
    for theta in conditionings(spec, setup) or [np.zeros(setup.box.dim)]:
        guard = Conditioned(plan, theta)
        release_all(spec, setup, score(spec, setup, frame, guard), guard)
        guard.check_all_drawn()
        runs.append(guard.inputs)
    if len(runs) == 1:
        return runs[0]
    return {stage: value if ".nuisance." in stage else np.stack([r[stage] for r in runs])
            for stage, value in runs[0].items()}


def output_vector(release: Release) -> FloatArray:
    """The released effects (overall, then each group's)."""
    table = release.tables["ate"]
    return table["ate" if "ate" in table.columns else "ato"].to_numpy(dtype=np.float64)


def _members(setup: AteSetup, x: FloatArray) -> frozenset[int]:
    """The groups a (clipped) covariate vector lies in, as the release decides it."""
    return frozenset(g for g, (lo, hi) in enumerate(setup.group_boxes)
                     if bool(np.all((x >= lo) & (x <= hi))))


def _meet(boxes: list[tuple[FloatArray, FloatArray]]) -> tuple[FloatArray, FloatArray] | None:
    """The intersection of ``boxes`` (None when empty)."""
    lo = np.max([b[0] for b in boxes], axis=0)
    hi = np.min([b[1] for b in boxes], axis=0)
    return (lo, hi) if bool(np.all(lo <= hi)) else None


def group_points(setup: AteSetup) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(a point in the most groups — m of them, :attr:`AteSetup.overlap` — and two points whose
    group sets differ the most among the candidates).

    Candidates: the box's corners and centre, the centre of every group and of every non-empty
    intersection of two groups, and the centre of the first m groups (at most 16, so at most
    C(16, 8) subsets are tried) with a common point."""
    box = (setup.box.lo, setup.box.hi)
    boxes = list(setup.group_boxes)
    meets = [_meet([box, *sub]) for size in (1, 2) for sub in itertools.combinations(boxes, size)]
    clique = next((m for sub in itertools.combinations(boxes, setup.overlap)
                   if (m := _meet([box, *sub])) is not None), None) if boxes else None
    points = [box[0], box[1]] + [0.5 * (m[0] + m[1]) for m in [box, *meets, clique]
                                 if m is not None]
    sets = [_members(setup, p) for p in points]
    most = max(range(len(points)), key=lambda i: len(sets[i]))
    i, j = max(itertools.combinations(range(len(points)), 2),
               key=lambda ij: len(sets[ij[0]] ^ sets[ij[1]]))
    return points[most], points[i], points[j]


def _parts(spec: CateSpec, setup: AteSetup) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(rows fitting the nuisances, scored rows) under the audited split."""
    if setup.rows != "split":
        every = np.arange(setup.n_total)
        return every, every
    return row_split.parts(audit_spec(spec).cate.split, setup.n_total, setup.n_nuisance[0])


def neighbours(spec: CateSpec, frame: pd.DataFrame, rng: np.random.Generator,
               k: int) -> Iterator[Pair]:
    """``k`` replace-one-row pairs around ``frame``, cycling through :data:`KINDS`.

    Under the fixed releases of :class:`Conditioned` (ê ≡ κ, μ̂ ≡ c, τ̃ = 0) a treated row's
    score is (Y − c)/κ, so, on a scored row:

    - *scores top vs bottom*: treated, Y at the top vs the bottom, at a point in the most groups:
      Σu moves by R (``estimate``), every group's centred sum by 2E (``groups.sums``: 2m·E), and
      the per-arm outcome sum by 2h (``outcome.sums`` of the means model);
    - *score vs the centre*: treated, Y top vs Y = c (u = τ̃): Σ(u − τ̃v)² moves by E²
      (``variance``), each group's by E² (``groups.variance``);
    - *groups apart*: Y at the top, at two points whose group sets differ the most: the group
      sizes and squared sums move in every group of the symmetric difference.

    And on a row fitting the nuisances: *propensity*: every other fitting row untreated at the
    box's centre (x̃ = the intercept alone) with Y = c, the row treated at the upper vs the lower
    corner; *outcome model*: the means model, the arm flipped (counts move by 2); the ridge, the
    same quiet rows and the row treated at the upper corner, Y top vs bottom. Then a row replaced
    by a random corner of the bounds, and by a random row; and, with two conditionings (ATO),
    *weights apart*: the row treated with Y = c (u = 0), the first covariate at its upper vs its
    lower bound (v = ê(1 − ê) at its largest vs its least under the rising propensity model).
    """
    setup = _setup(spec, len(frame))
    cols = setup.columns
    domain = _domain(spec, setup)
    fitting, scored = _parts(spec, setup)
    treated, control = spec.cate.treated, spec.cate.control_label()
    y_lo, y_hi = setup.y_bounds
    centre = setup.center
    most, apart_a, apart_b = group_points(setup)
    names = list(cols.covariates)

    def at(x: FloatArray, arm: Any, y: float) -> dict[str, Any]:
        return {**{c: float(v) for c, v in zip(names, x, strict=True)},
                cols.treatment: arm, cols.outcome: y}

    upper = setup.box.hi
    middle = 0.5 * (setup.box.lo + setup.box.hi)
    lower = middle.copy()
    lower[0] = setup.box.lo[0]
    upper_first = middle.copy()
    upper_first[0] = setup.box.hi[0]
    kinds = KINDS if len(conditionings(spec, setup)) > 1 else KINDS[:-1]
    for j in range(k):
        kind = kinds[j % len(kinds)]
        rows = fitting if kind in ("propensity", "outcome model") else scored
        idx = int(rows[int(rng.integers(len(rows)))])
        where = f"row {idx}: {kind}"
        if kind == "scores top vs bottom":
            yield (where, replace_one(frame, idx, at(most, treated, y_hi)),
                   replace_one(frame, idx, at(most, treated, y_lo)))
        elif kind == "score vs the centre":
            yield (where, replace_one(frame, idx, at(most, treated, y_hi)),
                   replace_one(frame, idx, at(most, treated, centre)))
        elif kind == "groups apart":
            yield (where, replace_one(frame, idx, at(apart_a, treated, y_hi)),
                   replace_one(frame, idx, at(apart_b, treated, y_hi)))
        elif kind in ("propensity", "outcome model") and (
                kind == "outcome model" and setup.outcome == "means"):
            yield (where + " (arm flipped)", replace_one(frame, idx, at(upper, treated, y_hi)),
                   replace_one(frame, idx, at(upper, control, y_hi)))
        elif kind in ("propensity", "outcome model"):
            base = _quiet(frame, fitting, at(middle, control, centre))
            if kind == "propensity":
                a, b = at(upper, treated, centre), at(setup.box.lo, treated, centre)
            else:
                a, b = at(upper, treated, y_hi), at(upper, treated, y_lo)
            yield (where + " on a quiet background", replace_one(base, idx, a),
                   replace_one(base, idx, b))
        elif kind == "weights apart":
            yield (where, replace_one(frame, idx, at(upper_first, treated, centre)),
                   replace_one(frame, idx, at(lower, treated, centre)))
        elif kind == "corner":
            yield where, None, replace_one(frame, idx, domain.corner_row(rng))
        else:
            yield where, None, replace_one(frame, idx, domain.random_row(rng))


def _quiet(frame: pd.DataFrame, rows: npt.NDArray[np.intp], quiet: dict[str, Any]
           ) -> pd.DataFrame:
    """``frame`` with the ``quiet`` values on rows ``rows`` (numeric columns as float64)."""
    out = frame.copy()
    for col, val in quiet.items():
        if isinstance(val, float):
            out[col] = out[col].astype(np.float64)
        out.loc[out.index[rows], col] = val
    return out
