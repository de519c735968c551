"""What ``audit privacy`` needs to drive ``cate``: its :data:`ADAPTER`.

Neighbouring relation (spec cate): replace one record; n is public. The generators below replace one
row in place (never reorder, add or drop rows) and the gray-box values of D and D′ use the same
split — for the default ``kind: random`` one fixed permutation
(:func:`dpcausal.commands.common.row_split.for_audit`), which for in-place pairs is the coupling
that bounds the random split's loss — so the replaced row stays in its half. The black-box runs on D
and D′ use that split too (the adapter's ``coupled_spec``), so they are compared under the same
coupling.

Mechanism inputs (``pre_noise``), by stage:
- ``cate.nuisance.propensity``: the non-private ℓ2-logistic θ̂ on the first half;
- ``cate.nuisance.outcome``: the stacked non-private ridge (θ̂₀, θ̂₁) on the first half;
- ``second_stage.function``: the exact second-stage minimiser ĝ_D as an RKHS element (the
  Gaussian-process noise is isotropic in the RKHS, so the exact loss is that of a Gaussian
  mechanism at the RKHS distance ‖ĝ_D − ĝ_D′‖_ℋ, computed in representer form) or, with
  ``features: rff``, the weight vector ŵ (ℓ2).
The second stage is computed given FIXED nuisances, as the guarantee is conditional on the released
(noised) ones: the sensitivity must hold for every nuisance pair in the public ranges, and the audit
uses the worst one for the weights, π̂ ≡ κ (so ρ = (A − π̂)² reaches (1 − κ)² for treated rows, and
for the DR-learner 1/π̂ reaches 1/κ) and μ̂ ≡ the centre of the outcome range. A first-half
replacement therefore leaves the second-stage input unchanged, exactly as it does the release
given the nuisances.

Only ``mode: function`` is audited: ``mode: queries`` carries an asymptotic guarantee (Thm 1 holds
for n large enough), not a finite-n claim a neighbouring-pair audit could check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.neighbours import Pair, RowDomain, replace_one
from dpcausal.audit.privacy import AuditAdapter
from dpcausal.commands.cate.estimate import halves as estimate_halves
from dpcausal.commands.cate.estimate import prepare, second_stage, second_stage_rff
from dpcausal.commands.cate.krr import KrrFit, rkhs_distance
from dpcausal.commands.cate.method import METHOD
from dpcausal.commands.cate.privacy import nuisance_learners
from dpcausal.commands.cate.setup import CateSetup, build_setup, rff_features
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common import row_split
from dpcausal.errors import SpecError
from dpcausal.method import Release, lazy

FloatArray = npt.NDArray[np.float64]
STAGE_FUNCTION = "cate.second_stage.function"


def _setup(spec: CateSpec, n_rows: int) -> CateSetup:
    if spec.cate.mode != "function":
        raise SpecError("cate.mode: audit privacy covers mode: function only; mode: queries has an "
                        "asymptotic guarantee (Thm 1, n large enough), not a finite-n claim to audit")
    assert not spec.cate.multi_arm, "K ≥ 3 arms: dpcausal.commands.cate.audit_multi_arm"
    return build_setup(spec, n_rows)


def _domain(spec: CateSpec, setup: CateSetup) -> RowDomain:
    cols = setup.columns
    return RowDomain(cols.numeric_domain(), {cols.treatment: [spec.cate.treated, spec.cate.control_label()]})


def synthesize(spec: CateSpec, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """``n`` rows drawn uniformly inside the public box and outcome bounds, A ∈ {0, 1}."""
    return _domain(spec, _setup(spec, n)).synthesize(n, rng)


def audit_spec(spec: CateSpec) -> CateSpec:
    """``spec`` with the split the gray-box computation conditions on
    (:func:`~dpcausal.commands.common.row_split.for_audit`)."""
    split = row_split.for_audit(spec.cate.split)
    return spec.model_copy(update={"cate": spec.cate.model_copy(update={"split": split})})


def halves(spec: CateSpec, n_rows: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(first-half rows, second-half rows) of the split the gray-box values use."""
    return estimate_halves(audit_spec(spec), build_setup(spec, n_rows))


def neighbours(spec: CateSpec, frame: pd.DataFrame, rng: np.random.Generator,
               k: int) -> Iterator[Pair]:
    """``k`` replace-one-row pairs around ``frame``, the replaced row alternating between the two
    halves and the kind cycling (every two pairs) through four kinds, adversarial ones first.

    A planted outcome flip (one row at a random covariate corner, treated, Y at the top of its
    range in D and at the bottom in D′: with π̂ ≡ κ the row's weighted Huber gradient is as large
    as it can be on both sides); a planted pair at the upper corner with the arm flipped; a row
    replaced by a random corner of the bounds; and by a random row. Every fifth pair is the
    outcome flip on a quiet second half (:func:`_quiet_pair`); pairs 3, 13, 23, … plant a
    nuisance pair on a quiet first half, alternately for the propensity and the outcome model
    (:func:`_quiet_nuisance_pair`).
    """
    setup = _setup(spec, len(frame))
    domain = _domain(spec, setup)
    cols = setup.columns
    blocks = halves(spec, len(frame))
    names = ("first-half (nuisance)", "second-half")
    y_lo, y_hi = setup.y_bounds
    for j in range(k):
        if j % 5 == 4:
            yield _quiet_pair(spec, setup, frame, blocks[1], domain.corner_row(rng), rng)
            continue
        if j % 10 == 3:
            idx = int(blocks[0][int(rng.integers(len(blocks[0])))])
            yield _quiet_nuisance_pair(spec, setup, frame, blocks[0], idx,
                                       propensity=(j // 10) % 2 == 0)
            continue
        i = j - j // 5
        yield cycled_pair(frame, blocks, names, i, domain, rng, (cols.treatment, spec.cate.treated),
                          (cols.outcome, y_lo, y_hi), ("treated", "arm flipped"))


def cycled_pair(frame: pd.DataFrame, blocks: tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]],
                names: tuple[str, str], i: int, domain: RowDomain, rng: np.random.Generator,
                arm: tuple[str, Any], outcome: tuple[str, float, float],
                labels: tuple[str, str]) -> Pair:
    """The i-th ordinary pair of the cate adapters: the replaced row alternates between the two
    halves and the kind cycles every two pairs through: a random corner row in ``arm`` (column,
    value) with ``outcome`` (column, low, high) at the top vs the bottom; the upper corner with the
    arm moved (:meth:`RowDomain.extreme_pair`); a random corner of the bounds; a random row.
    ``labels`` name the planted row's arm and the arm move in the pair's description."""
    b = i % 2
    idx = int(blocks[b][int(rng.integers(len(blocks[b])))])
    where = f"{names[b]} row {idx}"
    kind = (i // 2 + 2) % 4
    if kind == 0:
        return f"{where} -> corner of the bounds", None, replace_one(frame, idx,
                                                                     domain.corner_row(rng))
    if kind == 1:
        return f"{where} -> random row in the bounds", None, replace_one(frame, idx,
                                                                         domain.random_row(rng))
    if kind == 2:
        row = {**domain.corner_row(rng), arm[0]: arm[1]}
        y_col, y_lo, y_hi = outcome
        return (f"{where} planted at a corner, {labels[0]}, Y top vs bottom",
                replace_one(frame, idx, {**row, y_col: y_hi}),
                replace_one(frame, idx, {**row, y_col: y_lo}))
    a, c = domain.extreme_pair(rng)
    return (f"{where} planted at the upper corner, {labels[1]}",
            replace_one(frame, idx, a), replace_one(frame, idx, c))


def _quiet_pair(spec: CateSpec, setup: CateSetup, frame: pd.DataFrame,
                second: npt.NDArray[np.intp], corner: dict[str, Any],
                rng: np.random.Generator) -> Pair:
    """The second-stage outcome flip on a quiet second half, which attains Δ = L_w/(λ0 n) up to
    the background's pull.

    Every other second-half row is untreated with Y at the centre of its range: with the audit's
    fixed nuisances (π̂ ≡ κ, μ̂ ≡ centre) its pseudo-outcome is 0 and its weight the least one
    (κ² for the R-learner), so the objective is curved by λ0 almost alone; the planted row's
    weighted Huber gradient moves by 2·L_w (when its residual stays beyond c on both sides).
    """
    cols = setup.columns
    y_lo, y_hi = setup.y_bounds
    base = frame.copy()
    rows = base.index[second]
    base.loc[rows, cols.treatment] = spec.cate.control_label()
    base.loc[rows, cols.outcome] = 0.5 * (y_lo + y_hi)
    idx = int(second[int(rng.integers(len(second)))])
    row = {**corner, cols.treatment: spec.cate.treated}
    return (f"second-half row {idx} planted at a corner, treated, Y top vs bottom, every other "
            "second-half row untreated at the centre", replace_one(base, idx, {**row, cols.outcome: y_hi}),
            replace_one(base, idx, {**row, cols.outcome: y_lo}))


def _quiet_nuisance_pair(spec: CateSpec, setup: CateSetup, frame: pd.DataFrame,
                         first: npt.NDArray[np.intp], idx: int, *, propensity: bool) -> Pair:
    """A nuisance pair on a quiet first half: every other first-half row untreated at the lower
    corner of the box (x̃ = the intercept alone) with Y at the centre; row ``idx`` at the upper
    corner (the largest ‖x̃‖), with the arm flipped (``propensity``) or treated with Y top vs
    bottom (the outcome model).

    The quiet rows leave the treated arm's ridge empty and curve the logistic objective along the
    intercept only, so the planted row's gradient change moves θ̂ by ≈ its whole size over mλ.
    That is all a pair can reach here, and less than the stated sensitivities: the label flip
    changes the logistic gradient (σ(θᵀx̃) − A)x̃ by exactly x̃ (norm ≤ 1 of the bound's 2), and
    the ridge gradient at one x̃ by 2h·x̃ of the bound's 2G = 2h(1 + 1/√λ) (G uses the crude
    ‖θ̂‖ ≤ h/√λ). Measured on the default audit: 0.43 and 0.18 of the stated values
    (benchmarks/RESULTS.md).
    """
    cols = setup.columns
    y_lo, y_hi = setup.y_bounds
    domain = _domain(spec, setup)
    quiet: dict[str, Any] = {**{c: domain.numeric[c][0] for c in cols.covariates},
             cols.treatment: spec.cate.control_label(), cols.outcome: 0.5 * (y_lo + y_hi)}
    base = frame.copy()
    for col, val in quiet.items():
        base.loc[base.index[first], col] = val
    upper: dict[str, Any] = {c: domain.numeric[c][1] for c in cols.covariates}
    if propensity:
        row = {**upper, cols.outcome: 0.5 * (y_lo + y_hi)}
        return (f"first-half row {idx} planted at the upper corner, arm flipped, every other "
                "first-half row untreated at the lower corner",
                replace_one(base, idx, {**row, cols.treatment: spec.cate.treated}),
                replace_one(base, idx, {**row, cols.treatment: spec.cate.control_label()}))
    row = {**upper, cols.treatment: spec.cate.treated}
    return (f"first-half row {idx} planted at the upper corner, treated, Y top vs bottom, every "
            "other first-half row untreated at the lower corner",
            replace_one(base, idx, {**row, cols.outcome: y_hi}),
            replace_one(base, idx, {**row, cols.outcome: y_lo}))


@dataclass(frozen=True)
class RkhsElement:
    """ĝ = Σ α_i k0(·, s_i): compared with another by the exact RKHS distance."""

    fit: KrrFit

    def distance(self, other: RkhsElement) -> float:
        """‖ĝ_self − ĝ_other‖_ℋ."""
        return rkhs_distance(self.fit, other.fit)


@dataclass(frozen=True)
class _ConstantPropensity:
    """π̂ ≡ κ (a fixed nuisance in the public range, the worst one for the weights)."""

    kappa: float

    def predict(self, x: npt.ArrayLike) -> FloatArray:
        return np.full(np.atleast_2d(np.asarray(x)).shape[0], self.kappa)


def pre_noise(spec: CateSpec, frame: pd.DataFrame, plan: PrivacyPlan,
              side: dict[str, Any]) -> dict[str, Any]:
    """Each mechanism's input on ``frame`` (non-private; audit only), by stage."""
    setup = _setup(spec, len(frame))
    data = prepare(audit_spec(spec), setup, frame)
    prop_l, out_l = nuisance_learners(spec, setup)
    out: dict[str, Any] = {
        prop_l.stage: prop_l.fit_nonprivate(data.x1, data.a1),
        out_l.stage: out_l.fit_nonprivate(data.x1, data.a1, data.y1).ravel(),
    }
    prop = _ConstantPropensity(setup.kappa)
    outm = out_l.model(np.zeros((2, setup.box.dim)))  # μ̂ ≡ centre of the outcome range
    if spec.cate.features == "rff":
        out[STAGE_FUNCTION] = second_stage_rff(setup, rff_features(spec, setup),
                                                    prop, outm, data.x2, data.a2, data.y2)  # type: ignore[arg-type]
    else:
        fit, _, _ = second_stage(setup, prop, outm, data.x2, data.a2, data.y2)  # type: ignore[arg-type]
        out[STAGE_FUNCTION] = RkhsElement(fit)
    return out


def output_vector(release: Release) -> FloatArray:
    """The released CATE values at the query points."""
    return release.tables["cate"]["cate"].to_numpy(dtype=np.float64)


def without_plot(spec: CateSpec) -> CateSpec:
    """The audited spec: no figure (post-processing only, the released numbers are unchanged)."""
    return spec.model_copy(update={"cate": spec.cate.model_copy(update={"plot": False})})


def _by_estimand(tau: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``tau`` for the τ(x) release, or for ``estimand: ate`` the ATE adapter's ``name``
    (:mod:`dpcausal.commands.cate.audit_ate`, which uses this module's helpers)."""
    ate = lazy(f"dpcausal.commands.cate.audit_ate:{name}")
    return lambda spec, *args: (ate if spec.cate.estimand == "ate" else tau)(spec, *args)


def _arms(two_arm: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``two_arm``, or for a spec with ``cate.arms`` (K ≥ 3) the K-arm adapter's ``name``
    (:mod:`dpcausal.commands.cate.audit_multi_arm`, which uses this module's helpers)."""
    k_arm = lazy(f"dpcausal.commands.cate.audit_multi_arm:{name}")

    def call(spec: CateSpec, *args: Any) -> Any:
        return (k_arm if spec.cate.multi_arm else two_arm)(spec, *args)

    return call


def _output_vector(release: Release) -> FloatArray:
    ate: Callable[[Release], FloatArray] = lazy("dpcausal.commands.cate.audit_ate:output_vector")
    return (ate if "ate" in release.tables else output_vector)(release)


ADAPTER = AuditAdapter(METHOD, "cate",
                       _by_estimand(_arms(synthesize, "synthesize"), "synthesize"),
                       _by_estimand(_arms(neighbours, "neighbours"), "neighbours"),
                       _by_estimand(_arms(pre_noise, "pre_noise"), "pre_noise"),
                       _output_vector, audit_spec=without_plot, coupled_spec=audit_spec)
"""cate's audit adapter (listed in :data:`dpcausal.commands.COMMANDS`)."""
