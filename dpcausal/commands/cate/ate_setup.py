"""Public constants of ``cate`` with ``estimand: ate``: sizes, budget split, nuisance learners and the
per-unit mechanisms, from the spec and the public row count alone."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.ate_scores import NuisanceRanges, Weights, centred_range, weight_range
from dpcausal.commands.cate.ate_spec import AteGroup, AteSpec
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.commands.common.columns import ArmColumns
from dpcausal.errors import DataError, MissingBoundsError, SpecError
from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.dp_logistic import DPLogistic
from dpcausal.learners.dp_means import DPArmMeans, DPPooledMean, OutcomeMeans
from dpcausal.learners.dp_objective import ObjectiveLogistic
from dpcausal.learners.dp_ridge import DPRidgeArms
from dpcausal.learners.penalty import (
    PenaltyChoice,
    given_penalty,
    outcome_penalty,
    propensity_penalty,
)
from dpcausal.mechanisms import LaplaceMechanism

FloatArray = npt.NDArray[np.float64]
MIN_ROWS = 20
"""Fewest rows fitting the nuisances, and fewest scored rows."""
DENOMINATOR_SHARE = 0.1
"""overlap weights: share of the estimate's ε spent on the denominator Σ ê(1 − ê)."""
GROUP_SHARES = {"sums": 0.5, "sizes": 0.1, "variance": 0.4}
"""Shares of the groups' ε (variance: private); without it sums 0.8, sizes 0.2."""
AUTO_KEPT = 0.5
"""outcome_model: auto picks the ridge when its penalty keeps at least this share of an effect."""
STAGE = "cate.ate"
SPLIT = "cate.ate.rows"


@dataclass(frozen=True)
class Budget:
    """ε of every stage (0: the stage does not exist) and δ of the Gaussian nuisance stages."""

    propensity: float
    outcome: float
    delta_propensity: float
    delta_outcome: float
    estimate: float
    denominator: float
    variance: float
    group_sums: float
    group_sizes: float
    group_variance: float


@dataclass(frozen=True)
class AteSetup:
    """Everything public about an ATE run."""

    columns: ArmColumns
    box: BoxFeatures
    n_total: int
    rows: Literal["all", "split", "crossfit"]
    n_nuisance: tuple[int, ...]
    """Rows fitting each nuisance model (one entry per fold for crossfit)."""
    n_scored: int
    kappa: float
    weights: Weights
    budget: Budget
    propensity_l2: PenaltyChoice | None
    """The output perturbation's penalty (None: objective perturbation, or a public propensity)."""
    outcome: Literal["ridge", "means", "pooled", "none"]
    """The outcome model in use (``auto`` resolved)."""
    outcome_l2: PenaltyChoice | None
    overlap: int
    """m: the most groups one covariate vector can belong to (0 without groups)."""
    group_boxes: tuple[tuple[FloatArray, FloatArray], ...]
    propensity_learner: Literal["output", "objective", "public"] = "output"
    """How the propensity model is fit (public: the spec's constant, no model)."""
    residual_clip: float | None = None
    """r: Y − μ̂_a clipped to [−r, r] in the scores (None: no clip)."""

    @property
    def covariates(self) -> tuple[str, ...]:
        """The covariate columns, in order."""
        return self.columns.covariates

    @property
    def y_bounds(self) -> tuple[float, float]:
        """The public outcome bounds."""
        return self.columns.outcome_bounds

    @property
    def center(self) -> float:
        """The middle of the outcome bounds (μ̂ of ``outcome_model: none``)."""
        return 0.5 * (self.y_bounds[0] + self.y_bounds[1])


def _l2(given: float | None, choose: Any) -> PenaltyChoice:
    if given is not None:
        return given_penalty(given)
    choice: PenaltyChoice = choose()
    return choice


def _budget(spec: CateSpec, ate: AteSpec, has_prop: bool, outcome: str, groups: bool
            ) -> Budget:
    """The budget split (module constants and the spec's shares). δ goes to the Gaussian
    mechanisms only (the propensity and the ridge outcome models)."""
    eps, dlt = spec.privacy.epsilon, spec.privacy.delta
    has_out = outcome != "none"
    models = has_prop or has_out
    if ate.nuisance_rows == "split":
        eps_n, eps_s = (eps if models else 0.0), eps
    else:
        eps_n = ate.nuisance_share * eps if models else 0.0
        eps_s = eps - eps_n
    share = spec.cate.nuisance.propensity_share if (has_prop and has_out) else float(has_prop)
    eps_g = ate.groups_share * eps_s if groups else 0.0
    eps_o = eps_s - eps_g
    eps_v = ate.variance_share * eps_o if ate.variance == "private" else 0.0
    eps_a = eps_o - eps_v
    eps_d = DENOMINATOR_SHARE * eps_a if ate.weights == "overlap" else 0.0
    eps_a -= eps_d
    if ate.variance == "private":
        g_sums, g_sizes, g_var = (GROUP_SHARES[k] * eps_g for k in ("sums", "sizes", "variance"))
    else:
        g_sums, g_sizes, g_var = 0.8 * eps_g, 0.2 * eps_g, 0.0
    d_share = share if outcome == "ridge" else float(has_prop)
    return Budget(eps_n * share, eps_n * (1.0 - share), dlt * d_share, dlt * (1.0 - d_share),
                  eps_a, eps_d, eps_v, g_sums, g_sizes, g_var)


def _group_boxes(spec: CateSpec, groups: list[AteGroup], box: BoxFeatures
                 ) -> tuple[tuple[FloatArray, FloatArray], ...]:
    names = list(spec.data.columns.covariates)
    out = []
    for g in groups:
        lo, hi = box.lo.copy(), box.hi.copy()
        for cov, (a, b) in g.where.items():
            if cov not in names:
                raise SpecError(f"cate.ate.groups: group '{g.name}' restricts '{cov}', which is not "
                                "in data.columns.covariates", field="cate.ate.groups")
            i = names.index(cov)
            lo[i], hi[i] = max(lo[i], a), min(hi[i], b)
            if lo[i] > hi[i]:
                raise SpecError(f"cate.ate.groups: group '{g.name}': [{a:g}, {b:g}] for '{cov}' lies "
                                f"outside its public bound [{box.lo[i]:g}, {box.hi[i]:g}], so the "
                                "group is empty; fix the range or the bound",
                                field="cate.ate.groups")
        out.append((lo, hi))
    return tuple(out)


def max_overlap(boxes: tuple[tuple[FloatArray, FloatArray], ...]) -> int:
    """The most boxes with a common point: the largest set of pairwise intersecting boxes (axis-
    parallel boxes have Helly number 2), found by trying every subset (at most 16 boxes)."""
    k = len(boxes)
    if k == 0:
        return 0
    meets = [[bool(np.all(np.maximum(boxes[i][0], boxes[j][0])
                          <= np.minimum(boxes[i][1], boxes[j][1]))) for j in range(k)]
             for i in range(k)]
    best = 1
    for size in range(2, k + 1):
        if any(all(meets[i][j] for i, j in itertools.combinations(sub, 2))
               for sub in itertools.combinations(range(k), size)):
            best = size
        else:
            break  # no clique of this size, hence none larger
    return best


def build_ate_setup(spec: CateSpec, n_rows: int) -> AteSetup:
    """Validate the public inputs and derive the constants; refuse what the guarantee cannot cover."""
    sec = spec.cate
    ate = sec.ate_spec
    cols = spec.data.columns
    if not cols.covariates:
        raise SpecError("data.columns.covariates: cate needs at least one covariate column")
    if cols.outcome is None or cols.treatment is None:
        raise SpecError("data.columns: cate needs both 'outcome' and 'treatment' columns")
    if spec.bounds.outcome is None:
        raise MissingBoundsError(
            "bounds.outcome is missing: the ATE needs public outcome bounds [lo, hi] (Y is clipped "
            "to them; they are never taken from the data); add e.g. bounds: {outcome: [-1, 9]}")
    missing = [c for c in cols.covariates if spec.bounds.covariate(c) is None]
    if missing:
        raise MissingBoundsError(
            f"bounds.covariates has no bound for {', '.join(missing)}: cate needs a public box for "
            "every covariate (clipping and the nuisance models' features); add them per column or "
            "give one [lo, hi] for all")
    has_prop = ate.propensity is None
    if (has_prop or ate.outcome_model == "ridge") and spec.privacy.delta == 0.0:
        raise SpecError("privacy.delta: the DP propensity and ridge models use Gaussian noise and "
                        "need δ > 0; set privacy.delta (e.g. 1e-6, < 1/n_rows), or give "
                        "cate.ate.propensity (a trial's design probability) with "
                        "cate.ate.outcome_model: means, pooled or none for a pure ε release",
                        field="privacy.delta")
    if spec.privacy.delta >= 1.0 / n_rows:
        raise SpecError(f"privacy.delta: δ = {spec.privacy.delta:g} is not < 1/n_rows = "
                        f"{1.0 / n_rows:.3g}; such a δ permits publishing a row outright. Use δ "
                        "well below 1/n_rows (e.g. 1/(10·n_rows))")
    if ate.propensity is not None and "propensity_clip" in sec.model_fields_set:
        raise SpecError("cate.propensity_clip: cate.ate.propensity is a public constant and is "
                        "not clipped; remove one of them", field="cate.propensity_clip")
    fits: tuple[int, ...]
    if ate.nuisance_rows == "split":
        n_fit = math.floor(n_rows * sec.first_half_fraction)
        fits, scored = (n_fit,), n_rows - n_fit
    elif ate.nuisance_rows == "crossfit":
        fits, scored = tuple(len(range(k, n_rows, ate.folds)) for k in range(ate.folds)), n_rows
    else:
        fits, scored = (n_rows,), n_rows
    if min(fits) < MIN_ROWS or scored < MIN_ROWS:
        raise DataError(f"{spec.data.path}: {n_rows} rows give {min(fits)} rows to fit a nuisance "
                        f"model and {scored} to score; the ATE needs >= {MIN_ROWS} of each")
    columns = ArmColumns.from_spec(spec, "cate")
    bnds = np.array(columns.covariate_bounds, dtype=np.float64)
    box = BoxFeatures(bnds[:, 0], bnds[:, 1], centered=True)
    y_bounds = columns.outcome_bounds
    nu = sec.nuisance
    m = min(fits)
    outcome: Literal["ridge", "means", "pooled", "none"]
    out_l2 = None
    if ate.outcome_model == "auto" or ate.outcome_model == "ridge":
        budget = _budget(spec, ate, has_prop, "ridge", bool(ate.groups))
        out_l2 = _l2(nu.outcome_l2, lambda: outcome_penalty(
            box, y_bounds, budget.outcome, budget.delta_outcome, m))
        keep = ate.outcome_model == "ridge" or nu.outcome_l2 is not None \
            or out_l2.kept >= AUTO_KEPT
        outcome = "ridge" if keep else "means"
    else:
        outcome = ate.outcome_model
        if nu.outcome_l2 is not None:
            raise SpecError(f"cate.nuisance.outcome_l2: the penalty of the ridge outcome model, "
                            f"but cate.ate.outcome_model is {outcome}, which has none; remove "
                            "outcome_l2 or choose outcome_model: ridge (or auto)",
                            field="cate.nuisance.outcome_l2")
    if outcome != "ridge":
        out_l2 = None
    budget = _budget(spec, ate, has_prop, outcome, bool(ate.groups))
    learner: Literal["output", "objective", "public"] = (
        ate.propensity_learner if has_prop else "public")
    if learner == "objective" and nu.propensity_l2 is not None:
        raise SpecError("cate.nuisance.propensity_l2: propensity_learner: objective sets its own "
                        "penalty from its ε (docs/proofs/cate_ate.md §3.8); remove "
                        "propensity_l2 or use propensity_learner: output",
                        field="cate.nuisance.propensity_l2")
    prop_l2 = (_l2(nu.propensity_l2, lambda: propensity_penalty(
        box, budget.propensity, budget.delta_propensity, m)) if learner == "output" else None)
    r = ate.residual_clip
    if r is not None and r >= y_bounds[1] - y_bounds[0]:
        raise SpecError(f"cate.ate.residual_clip: r = {r:g} is not below the outcome range "
                        f"{y_bounds[1] - y_bounds[0]:g} (bounds.outcome), so it never clips a "
                        "residual; remove it, or give a public value in outcome units well "
                        "below the range (several times the residual sd expected of a good "
                        "outcome model)",
                        field="cate.ate.residual_clip")
    if r is not None and outcome == "none":
        raise SpecError("cate.ate.residual_clip: with cate.ate.outcome_model: none the outcome "
                        "model is the constant middle of bounds.outcome, so the clip would "
                        "truncate the outcome itself and bias the estimate; remove "
                        "residual_clip, or choose outcome_model: pooled (a DP centre), means, "
                        "ridge or auto",
                        field="cate.ate.residual_clip")
    boxes = _group_boxes(spec, ate.groups, box)
    return AteSetup(columns, box, n_rows, ate.nuisance_rows, fits,
                    scored, sec.kappa, ate.weights, budget, prop_l2, outcome, out_l2,
                    max_overlap(boxes), boxes, learner, r)


def stage(name: str, fold: int | None = None) -> str:
    """The receipt's stage name of a mechanism (nuisance stages per fold under crossfit)."""
    return f"{STAGE}.nuisance{'' if fold is None else f'.fold{fold + 1}'}.{name}"


def nuisance_learners(setup: AteSetup, fold: int | None = None
                      ) -> tuple[DPLogistic | ObjectiveLogistic | None,
                                 DPRidgeArms | OutcomeMeans | None]:
    """The DP nuisance learners of one fit (all rows, the split's first part, or one fold).

    Notes
    -----
    Neighbouring relation: replace one record of the rows they fit (their count is public).
    Sensitivity and guarantee: :class:`~dpcausal.learners.dp_logistic.DPLogistic` (2/(mλ) + the
    solver's slack) or :class:`~dpcausal.learners.dp_objective.ObjectiveLogistic` (objective
    perturbation: gradient sensitivity 2, Jacobian term, output noise for the solver's gap),
    :class:`~dpcausal.learners.dp_ridge.DPRidgeArms` (2h(1 + 1/√λ)/(mλ) +
    slack, both arms jointly), :class:`~dpcausal.learners.dp_means.DPArmMeans` (2h on the sums,
    2 on the counts) or :class:`~dpcausal.learners.dp_means.DPPooledMean` (2h on the one sum);
    each is DP for its share, the pair by sequential composition; everything
    computed from the released models is post-processing.
    """
    b = setup.budget
    m = setup.n_nuisance[0 if fold is None else fold]
    prop: DPLogistic | ObjectiveLogistic | None = None
    out: DPRidgeArms | OutcomeMeans | None = None
    if setup.propensity_learner == "objective":
        prop = ObjectiveLogistic(setup.box, b.propensity, b.delta_propensity, m,
                                 stage=stage("propensity", fold))
    elif setup.propensity_l2 is not None:
        prop = DPLogistic(setup.box, setup.propensity_l2.l2, b.propensity, b.delta_propensity, m,
                          stage=stage("propensity", fold))
    if setup.outcome == "ridge":
        assert setup.outcome_l2 is not None
        out = DPRidgeArms(setup.box, setup.outcome_l2.l2, setup.y_bounds, b.outcome,
                          b.delta_outcome, m, stage=stage("outcome", fold))
    elif setup.outcome == "means":
        out = DPArmMeans(setup.box, setup.y_bounds, b.outcome, m, stage=stage("outcome", fold))
    elif setup.outcome == "pooled":
        out = DPPooledMean(setup.box, setup.y_bounds, b.outcome, m, stage=stage("outcome", fold))
    return prop, out


def public_ranges(setup: AteSetup, propensity: float | None) -> list[NuisanceRanges]:
    """The nuisance ranges every released model satisfies whatever its noise: ê ∈ [κ, 1 − κ] (or
    the public constant), μ̂ in the outcome bounds (or the constant centre).

    The pooled centre ties μ̂₀ = μ̂₁ = c̃ for some c̃ in the bounds: one tied range per candidate
    c̃ ∈ {y_lo, y_lo + r, y_hi − r, y_hi} (the kinks inside the bounds). Every score bound of
    :func:`centred_range` is, for each corner of ê, linear in the clipped residual's ends
    max(−r, y_lo − c̃) and min(r, y_hi − c̃), which are linear in c̃ between the kinks; so the
    scores' range (a max of linear functions minus a min of them) is convex in c̃ there and its
    largest value over the bounds is at one of these candidates. Not under crossfit: the release
    bounds the scores by the union of the folds' ranges, in which the folds' different centres are
    no longer tied, so the untied worst case is the one it never exceeds."""
    e = (propensity, propensity) if propensity is not None else (setup.kappa, 1.0 - setup.kappa)
    if setup.outcome == "none":
        return [NuisanceRanges(e, (setup.center, setup.center), (setup.center, setup.center))]
    if setup.outcome != "pooled" or setup.rows == "crossfit":
        return [NuisanceRanges(e, setup.y_bounds, setup.y_bounds)]
    lo, hi = setup.y_bounds
    r = setup.residual_clip
    kinks = [] if r is None else [c for c in (lo + r, hi - r) if lo < c < hi]
    return [NuisanceRanges(e, (c, c), (c, c)) for c in sorted({lo, hi, *kinks})]


@dataclass(frozen=True)
class UnitMechanisms:
    """The score stage's Laplace mechanisms, each calibrated per unit of a sensitivity that the
    release computes from the released nuisances (and the released estimate) alone."""

    estimate: LaplaceMechanism
    denominator: LaplaceMechanism | None
    variance: LaplaceMechanism | None
    group_sums: LaplaceMechanism | None
    group_sizes: LaplaceMechanism | None
    group_variance: LaplaceMechanism | None


def unit_mechanisms(setup: AteSetup) -> UnitMechanisms:
    """The per-unit mechanisms of the score stage.

    Notes
    -----
    Neighbouring relation: replace one scored row (the scored count is public); the nuisance
    models are fixed (released before, or public).
    Sensitivity (``docs/proofs/cate_ate.md``): the sum of the scores u moves by at most
    R = sup u − inf u over the domain (one summand changes; :mod:`.ate_scores`), the sum of the
    weights v by sup v − inf v, the sum of squared centred scores by E² (each summand in
    [0, E²], E = max |u − τ̃v|), and over K groups in which a row lies in at most m, the vectors
    of centred sums, sizes and squared sums by 2m·E, 2m·sup v and 2m·E² in ℓ1. Each mechanism
    here has sensitivity 1 (or 2m) per unit of that quantity; the release divides the statistic by
    the unit, draws, and multiplies back, which is the Laplace mechanism at the true sensitivity.
    Guarantee: each is ε_stage-DP given the fixed nuisances; sequential composition.
    """
    b = setup.budget
    two_m = 2.0 * setup.overlap

    def lap(eps: float, l1: float, name: str) -> LaplaceMechanism | None:
        return LaplaceMechanism(eps, l1, stage=f"{STAGE}.{name}") if eps > 0 else None

    est = lap(b.estimate, 1.0, "estimate")
    assert est is not None
    return UnitMechanisms(est, lap(b.denominator, 1.0, "denominator"),
                          lap(b.variance, 1.0, "variance"),
                          lap(b.group_sums, two_m, "groups.sums"),
                          lap(b.group_sizes, two_m, "groups.sizes"),
                          lap(b.group_variance, two_m, "groups.variance"))


def public_units(setup: AteSetup, propensity: float | None) -> dict[str, float]:
    """The units (sensitivities) at the public worst case of the nuisances: what the dry run can
    predict; the release's own units are never larger (the largest over
    :func:`public_ranges`' candidates)."""
    candidates = public_ranges(setup, propensity)
    v_lo, v_hi = weight_range(setup.weights, candidates[0])  # the weights do not involve μ̂
    estimate = e_max = 0.0
    for ranges in candidates:
        u_lo, u_hi = centred_range(setup.weights, setup.y_bounds, ranges,
                                   residual_clip=setup.residual_clip)
        # E = max |u − τ̃v| depends on the released τ̃: predicted at τ̃ in the middle of u's range
        mid = 0.5 * (u_lo + u_hi) / v_hi
        c_lo, c_hi = centred_range(setup.weights, setup.y_bounds, ranges, mid,
                                   residual_clip=setup.residual_clip)
        estimate = max(estimate, u_hi - u_lo)
        e_max = max(e_max, abs(c_lo), abs(c_hi))
    return {"estimate": estimate, "denominator": v_hi - v_lo, "v_min": v_lo, "v_max": v_hi,
            "e_max": e_max}
