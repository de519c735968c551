"""What ``audit privacy`` needs to drive ``cate`` with K ≥ 3 arms (``cate.arms``); the two-arm
adapter (:mod:`dpcausal.commands.cate.audit`) hands such specs here.

Neighbouring relation (spec cate): replace one record, any arm to any arm; n is public. As for two
arms, the pairs replace one row in place and the gray-box values of D and D′ use the one fixed
permutation of :func:`dpcausal.commands.common.row_split.for_audit` (the adapter's ``audit_spec``
and ``coupled_spec``), so the replaced row stays in its half.

Mechanism inputs (``pre_noise``), by stage, exactly as :func:`~dpcausal.commands.cate.multi_arm.run`
releases them:
- ``cate.nuisance.propensity``: the non-private multinomial Θ̂ (K × dim, flattened: the
  Frobenius norm of its sensitivity) on the first half;
- ``cate.nuisance.outcome``: the stacked non-private ridges (θ̂₀, …, θ̂_{K−1}) on the first half;
- ``cate.second_stage.function``: the K − 1 contrasts' exact minimisers STACKED in the direct sum
  ℋ^{K−1} — with ``features: rff`` the (K − 1) × 2m weight matrix flattened (the joint release
  adds one isotropic Gaussian draw to all of it), with the exact kernel the contrasts' RKHS
  elements, whose distance is √(Σ_k ‖ĝ_k − ĝ′_k‖²_ℋ) (:class:`StackedRkhs`).
The second stage is computed given FIXED nuisances (the guarantee is conditional on the released
ones, and the stated √(K − 1)·Δ_ℋ must hold for every nuisance in the proof's range): π̂_c ≡ κ for
the control and π̂_k ≡ 1 − κ for every other arm (each in [κ, 1 − κ], the range the proof of
docs/proofs/cate.md §10 covers), so every conditional propensity e_k = π̂_k/(π̂_k + π̂_c) sits at
its clip 1 − κ, a control row's R-weight ρ = e_k² at its largest (1 − κ)² in EVERY contrast and,
for the DR-learner, 1/π̂_c at its largest 1/κ; μ̂ ≡ the centre of the outcome range. (No softmax
model reaches this π̂ at one x: there two conditional propensities cannot both be 1 − κ. The
stated sensitivity does not use that, so the audit does not either.)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.neighbours import Pair, RowDomain, replace_one
from dpcausal.commands.cate.audit import RkhsElement, audit_spec, cycled_pair, halves
from dpcausal.commands.cate.estimate import clip_xy
from dpcausal.commands.cate.estimate import halves as estimate_halves
from dpcausal.commands.cate.multi_arm import contrast_indices, second_stage_fits
from dpcausal.commands.cate.privacy import arm_nuisance_learners
from dpcausal.commands.cate.setup import CateSetup, build_setup
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common.arms import arm_codes

FloatArray = npt.NDArray[np.float64]
STAGE_FUNCTION = "cate.second_stage.function"


def _domain(spec: CateSpec, setup: CateSetup) -> RowDomain:
    cols = setup.columns
    return RowDomain(cols.numeric_domain(), {cols.treatment: list(spec.cate.labels())})


def synthesize(spec: CateSpec, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """``n`` rows drawn uniformly inside the public box and outcome bounds, each arm equally likely."""
    return _domain(spec, build_setup(spec, n)).synthesize(n, rng)


def neighbours(spec: CateSpec, frame: pd.DataFrame, rng: np.random.Generator,
               k: int) -> Iterator[Pair]:
    """``k`` replace-one-row pairs around ``frame``, the kinds of the two-arm adapter's
    (:func:`dpcausal.commands.cate.audit.neighbours`), the planted ones first.

    Every fifth pair (0, 5, …) is the joint second stage's worst case on a quiet second half
    (:func:`_quiet_control_pair`); pairs 1, 11, … and 6, 16, … plant a nuisance pair on a quiet
    first half for the propensity and the outcome models (:func:`_quiet_nuisance_pair`). The
    others cycle (every two pairs, the replaced row alternating between the halves) through: a
    control row at a random corner with Y top vs bottom; the upper corner with the arm moved to
    the next declared arm; a row replaced by a random corner of the bounds; and by a random row.
    """
    setup = build_setup(spec, len(frame))
    domain = _domain(spec, setup)
    cols = setup.columns
    blocks = halves(spec, len(frame))
    names = ("first-half (nuisance)", "second-half")
    y_lo, y_hi = setup.y_bounds
    control = spec.cate.control_label()
    for j in range(k):
        if j % 5 == 0:
            yield _quiet_control_pair(spec, setup, frame, blocks[1], domain.corner_row(rng), rng)
            continue
        if j % 5 == 1:
            idx = int(blocks[0][int(rng.integers(len(blocks[0])))])
            yield _quiet_nuisance_pair(spec, setup, frame, blocks[0], idx,
                                       propensity=j % 10 == 1)
            continue
        i = j - 2 * (j // 5) - 2
        yield cycled_pair(frame, blocks, names, i, domain, rng, (cols.treatment, control),
                          (cols.outcome, y_lo, y_hi), ("control", "arm moved to the next arm"))


def _background(frame: pd.DataFrame, rows: npt.NDArray[np.intp], values: dict[str, Any]
                ) -> pd.DataFrame:
    """``frame`` with ``values`` set on ``rows`` (the quiet part of a planted pair)."""
    base = frame.copy()
    for col, val in values.items():
        base.loc[base.index[rows], col] = val
    return base


def _quiet_control_pair(spec: CateSpec, setup: CateSetup, frame: pd.DataFrame,
                        second: npt.NDArray[np.intp], corner: dict[str, Any],
                        rng: np.random.Generator) -> Pair:
    """The joint second stage's worst case: a CONTROL row at a corner, Y top vs bottom, on a
    quiet second half; it attains √(K − 1)·Δ_ℋ up to the background's pull.

    A control row enters every contrast; with the audit's fixed nuisances its weight is (1 − κ)²
    and its pseudo-outcome ∓(Δy/2)/(1 − κ) in each (R; DR: ρ = 1, ∓(Δy/2)/κ), so when its residual
    stays beyond c on both sides its weighted Huber gradient moves by 2·L_w in every contrast at
    once. Every other second-half row is in a non-control arm (cycling through them) with Y at the
    centre: its pseudo-outcome is 0 and its weight κ² in its own contrast and 0 in the others
    (R), so each objective is curved by λ0 almost alone.
    """
    cols = setup.columns
    y_lo, y_hi = setup.y_bounds
    arms = spec.cate.contrast_arms()
    base = _background(frame, second, {cols.outcome: 0.5 * (y_lo + y_hi)})
    base[cols.treatment] = base[cols.treatment].astype(object)
    for i, row in enumerate(second):
        base.loc[base.index[row], cols.treatment] = arms[i % len(arms)]
    idx = int(second[int(rng.integers(len(second)))])
    row = {**corner, cols.treatment: spec.cate.control_label()}
    return (f"second-half row {idx} planted at a corner, control, Y top vs bottom, every other "
            "second-half row in a treated arm at the centre",
            replace_one(base, idx, {**row, cols.outcome: y_hi}),
            replace_one(base, idx, {**row, cols.outcome: y_lo}))


def _quiet_nuisance_pair(spec: CateSpec, setup: CateSetup, frame: pd.DataFrame,
                         first: npt.NDArray[np.intp], idx: int, *, propensity: bool) -> Pair:
    """A nuisance pair on a quiet first half, as for two arms
    (:func:`dpcausal.commands.cate.audit._quiet_nuisance_pair`): every other first-half row in
    the control arm at the lower corner of the box (x̃ = the intercept alone) with Y at the
    centre; row ``idx`` at the upper corner (the largest ‖x̃‖), in the first treated arm vs the
    second (``propensity``: the multinomial gradient (p − e_A)x̃ moves by (e_a − e_b)x̃, norm √2·1
    of the bound's 2√2) or in the first treated arm with Y top vs bottom (the outcome models: that
    arm's ridge gradient moves by 2h·x̃ of the bound's 2h(1 + 1/√λ)).
    """
    cols = setup.columns
    y_lo, y_hi = setup.y_bounds
    domain = _domain(spec, setup)
    quiet: dict[str, Any] = {**{c: domain.numeric[c][0] for c in cols.covariates},
                             cols.treatment: spec.cate.control_label(),
                             cols.outcome: 0.5 * (y_lo + y_hi)}
    base = _background(frame, first, quiet)
    upper: dict[str, Any] = {c: domain.numeric[c][1] for c in cols.covariates}
    arm_a, arm_b = spec.cate.contrast_arms()[:2]
    if propensity:
        row = {**upper, cols.outcome: 0.5 * (y_lo + y_hi)}
        return (f"first-half row {idx} planted at the upper corner, arm {arm_a!r} vs {arm_b!r}, "
                "every other first-half row in the control arm at the lower corner",
                replace_one(base, idx, {**row, cols.treatment: arm_a}),
                replace_one(base, idx, {**row, cols.treatment: arm_b}))
    row = {**upper, cols.treatment: arm_a}
    return (f"first-half row {idx} planted at the upper corner, arm {arm_a!r}, Y top vs bottom, "
            "every other first-half row in the control arm at the lower corner",
            replace_one(base, idx, {**row, cols.outcome: y_hi}),
            replace_one(base, idx, {**row, cols.outcome: y_lo}))


@dataclass(frozen=True)
class StackedRkhs:
    """(ĝ_1, …, ĝ_r) in the direct sum ℋ^r: compared by √(Σ_k ‖ĝ_k − ĝ′_k‖²_ℋ), the norm the
    joint release's r independent Gaussian-process paths are isotropic in."""

    parts: tuple[RkhsElement, ...]

    def distance(self, other: StackedRkhs) -> float:
        """‖(ĝ_k − ĝ′_k)_k‖ in ℋ^r."""
        return math.hypot(*(a.distance(b) for a, b in zip(self.parts, other.parts, strict=True)))


@dataclass(frozen=True)
class _ClippedPropensities:
    """π̂_c ≡ κ for the control arm, π̂_k ≡ 1 − κ for the others: every conditional propensity of
    a contrast at its clip (fixed nuisances in the proof's range, the worst for the weights)."""

    kappa: float
    arms: int
    control: int

    def predict(self, x: npt.ArrayLike) -> FloatArray:
        pi = np.full((np.atleast_2d(np.asarray(x)).shape[0], self.arms), 1.0 - self.kappa)
        pi[:, self.control] = self.kappa
        return pi


def pre_noise(spec: CateSpec, frame: pd.DataFrame, plan: PrivacyPlan,
              side: dict[str, Any]) -> dict[str, Any]:
    """Each mechanism's input on ``frame`` (non-private; audit only), by stage."""
    setup = build_setup(spec, len(frame))
    cols = setup.columns
    x, y = clip_xy(spec, setup, frame)
    codes = arm_codes(frame[cols.treatment], spec.cate, path=spec.data.path, column=cols.treatment)
    i1, i2 = estimate_halves(audit_spec(spec), setup, frame)
    prop_l, out_l = arm_nuisance_learners(spec, setup)
    arms = len(spec.cate.labels())
    out: dict[str, Any] = {
        prop_l.stage: prop_l.fit_nonprivate(x[i1], codes[i1]).ravel(),
        out_l.stage: out_l.fit_nonprivate(x[i1], codes[i1].astype(np.float64), y[i1]).ravel(),
    }
    prop = _ClippedPropensities(setup.kappa, arms, contrast_indices(spec)[1])
    outm = out_l.model(np.zeros((arms, setup.box.dim)))  # μ̂ ≡ centre of the outcome range
    fits = second_stage_fits(spec, setup, prop, outm, x[i2], codes[i2], y[i2])  # type: ignore[arg-type]
    out[STAGE_FUNCTION] = (fits.ravel() if isinstance(fits, np.ndarray)
                           else StackedRkhs(tuple(RkhsElement(f) for f in fits)))
    return out
