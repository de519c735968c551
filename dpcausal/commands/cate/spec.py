"""The spec of ``dpcausal cate``: DP-CATE (Schröder et al. 2025), R-/DR-learner with DP nuisances."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from dpcausal.commands.cate.ate_spec import AteSpec
from dpcausal.spec.arms import MultiArms, label_index
from dpcausal.spec.base import ArmLabel, CommonSpec, PositiveFinite, StrictModel
from dpcausal.spec.split import RowSplit

Share = Annotated[float, Field(gt=0.0, lt=1.0)]


class NuisanceSpec(StrictModel):
    """The DP nuisance models: an ℓ2-logistic propensity and a ridge outcome model per arm.

    Both use the public box features x̃ (‖x̃‖ ≤ 1) and Gaussian output perturbation. Their budget
    (ε, δ) is shared: ``propensity_share`` to the propensity model, the rest to the (jointly
    noised) outcome models.
    """

    propensity_l2: PositiveFinite | None = None
    """λ > 0 of the DP propensity model, (1/m)Σ logistic loss + (λ/2)‖θ‖²; its sensitivity is
    2/(mλ), so a larger λ means less noise and a flatter propensity. Default: the total-error rule
    (learners/penalty.py: the λ minimising the predicted noise plus the shrinkage of a 1-logit
    effect, from ε, δ, m and the box), printed by the dry run with the share of an effect it
    keeps."""
    outcome_l2: PositiveFinite | None = None
    """λ > 0 of each arm's DP outcome ridge, (1/m)Σ ½(θᵀx̃ − r)² + (λ/2)‖θ‖²: larger λ, less
    noise, more shrinkage. Default: the total-error rule (as propensity_l2, for an effect of a
    quarter of the outcome range)."""
    propensity_share: Share = 0.5
    """Fraction in (0, 1) of the nuisances' (ε, δ) spent on the propensity model (default 0.5);
    the rest goes to the two outcome models, noised jointly."""


class GridSpec(StrictModel):
    """A grid over the public covariate box (instead of a query file)."""

    points: Annotated[int, Field(ge=2, le=10_000)] | None = None
    """Points per varied axis, evenly spaced over its public bound; default 101 (1-D) or 41
    (2-D); at most 10,000 queries in all. In queries mode more points mean more noise per
    point; in function mode they only sample the one released path more finely."""
    vary: list[Annotated[str, Field(min_length=1)]] | None = None
    """The 1 or 2 covariates the grid varies (default: all of them, when there are at most
    2); cate.png plots τ along them."""
    fixed: dict[str, float] = Field(default_factory=dict)
    """Values, in raw units, of the covariates the grid does not vary (default: the middle of
    each one's public bound)."""

    @model_validator(mode="after")
    def _sizes(self) -> GridSpec:
        if self.vary is not None and not 1 <= len(self.vary) <= 2:
            raise ValueError("cate.grid.vary must name 1 or 2 covariates")
        if self.vary is not None and len(set(self.vary)) != len(self.vary):
            raise ValueError("cate.grid.vary repeats a covariate")
        return self


CATE_ONLY = ("mode", "learner", "queries", "grid", "bandwidth", "ridge", "loss", "huber_c",
             "sensitivity_formula", "calibration", "gamma_method", "gamma_safety", "search_points",
             "features", "rff_dim", "rff_seed", "plot")
"""The fields that shape the τ(x) release only: refused with ``estimand: ate``."""
KAPPA_DEFAULT = {"cate": 0.05, "ate": 0.1}
"""Default propensity clip per estimand: 0.05 for τ(x) (the paper's range), 0.1 for the ATE (the
usual trimming threshold, Crump et al. 2009; its noise grows like 1/ζ)."""


class CateSection(MultiArms):
    """The ``cate`` section. Every value here is public: never tuned on the sensitive data."""

    section: ClassVar[str] = "cate"
    command: ClassVar[str] = "cate"
    control_role: ClassVar[str | None] = "the arm every other arm is compared with"
    treated: ArmLabel | None = None
    """Two arms: the treatment column's value that means 'treated' (A = 1), as it appears in the
    data (a number, true/false or a text label); default 1 unless cate.arms is given.
    τ(x) = E[Y(treated) − Y(control) | x]."""
    control: ArmLabel | None = None
    """Two arms: the control arm's value; defaults to 0 when treated is 1 (false when treated is
    true), and is required otherwise. With cate.arms: required, one of them — every other arm k
    is released as the contrast τ_k(x) = E[Y(k) − Y(control) | x]. A row whose treatment is no
    declared label is refused, never dropped."""
    arms: list[ArmLabel] | None = None
    """K ≥ 3 arms (estimand cate, mode function): every value of the treatment column, as it
    appears in the data (distinct; public, from the protocol, never from the data), with
    cate.control naming the one the others are compared with. The K − 1 contrasts are released
    jointly: one Gaussian-process mechanism over the stacked functions at √(K − 1) times the
    per-contrast RKHS sensitivity (docs/proofs/cate.md §10). Give either arms or treated."""

    estimand: Literal["cate", "ate"] = "cate"
    """cate (default): τ(x) = E[Y(1) − Y(0) | X = x] at the query points or on the grid (DP-CATE).
    ate: the average treatment effect (and group effects over public covariate regions) with
    a (1 − α) confidence interval covering both the sampling error and the privacy noise
    (cate.ate; writes ate.json and ate.csv)."""
    ate: AteSpec | None = None
    """estimand: ate only: how the effect and its interval are estimated (defaults apply when
    omitted)."""
    mode: Literal["function", "queries"] = "function"
    """function (default): one Gaussian-process path released over the whole box (Thm 3; exact
    (ε, δ)-DP given the Lipschitz bound); queries: Gaussian noise at the finite query points
    (Thm 1; receipted guarantee: asymptotic, i.e. valid only as n grows)."""
    learner: Literal["r", "dr"] = "r"
    """r (default, recommended): the R-learner, weights (A − π̂)² and pseudo-outcomes
    (Y − μ̂)/(A − π̂); dr: the DR-learner, whose pseudo-outcomes scale like 1/κ (κ =
    propensity_clip), so expect much more noise."""
    queries: Path | None = None
    """Public file of query points (CSV/Parquet with the covariate columns), fixed before the
    run; τ is released at each row. Give exactly one of queries and grid."""
    grid: GridSpec | None = None
    """A grid over the public covariate box instead of a query file. Give exactly one of
    queries and grid."""
    bandwidth: PositiveFinite | None = None
    """Gaussian kernel bandwidth h > 0 on covariates scaled to [0, 1]^q by their bounds; default
    √(q/2). Smaller h fits finer structure; the function-mode sensitivity grows as h shrinks
    (the paper formula is refused when (√(2π)h)^q > 16)."""
    ridge: PositiveFinite | None = None
    """λ0 > 0 of (1/n)Σ ρ ℓ(g(X) − φ) + λ0‖g‖² in the unit-diagonal kernel k0. The noise sd
    scales like 1/(λ0·n·ε); the bias grows with λ0. Default: function mode, the total-error rule
    (setup.second_stage_ridge: the λ0 minimising the predicted noise sd of τ(x) plus the shrinkage
    of an effect of a quarter of the outcome range; the dry run prints the share it keeps);
    queries mode, 1/√n (n = second-half rows)."""
    loss: Literal["huber", "squared"] | None = None
    """Second-stage loss; default huber (function mode), squared (queries mode, the only one there)."""
    huber_c: PositiveFinite | None = None
    """Huber threshold c of ℓ(r) = r² (|r| ≤ c), 2c|r| − c² beyond; default (y_hi − y_lo)/2."""
    propensity_clip: Annotated[float, Field(gt=0.0, lt=0.5)] | None = None
    """κ in (0, 0.5): π̂ is clipped to [κ, 1 − κ] (post-processing of the DP propensity); default
    0.05 (estimand cate) or 0.1 (estimand ate). The noise grows as κ shrinks; the DR-learner
    needs κ ≥ 0.05."""
    first_half_fraction: Annotated[float, Field(ge=0.1, le=0.9)] = 0.5
    """Share of rows in D̃, the nuisance half (⌊fraction·n⌋ rows; 0.1 to 0.9, default 0.5); the
    rest fit the second stage. The halves are disjoint, so their ε compose in parallel (max, not
    sum)."""
    split: RowSplit = Field(default_factory=RowSplit)
    """Which rows form D̃: a secret random permutation per run (default; the guarantee holds
    whatever the row order), or {kind: seeded, seed: N} (reproducible; assumes the row order is
    independent of the data, as the receipt states)."""
    sensitivity_formula: Literal["max", "corrected", "paper"] = "max"
    """Function mode: max(printed Thm 3, corrected Eq. 64) [default], corrected, or paper (refused
    where unsafe, i.e. (√(2π)h)^q > 16)."""
    calibration: Literal["classic", "analytic"] = "classic"
    """Function mode: classic = max(√(2 ln(2/δ))Δ/ε, exact) [paper]; analytic = exact (Balle–Wang)."""
    gamma_method: Literal["search", "certified"] = "search"
    """Queries mode: γ(T,D) by search over the box (paper) or the certified public bound."""
    gamma_safety: Annotated[float, Field(ge=1.0, le=100.0)] = 1.1
    """Queries mode, search: the searched sup is multiplied by this (it is a lower bound)."""
    search_points: Annotated[int, Field(ge=64, le=65536)] = 4096
    """Queries mode, search: Sobol points of the box besides the data rows and the queries."""
    features: Literal["exact", "rff"] = "exact"
    """Function mode: exact Gaussian-kernel ridge (n × n; n ≤ 12,000 second-half rows) or random
    Fourier features from a public seed (any n; also releases the private weight vector)."""
    rff_dim: Annotated[int, Field(ge=8, le=10_000)] = 500
    """m: frequency pairs of the random Fourier features (feature dimension 2m)."""
    rff_seed: int = 0
    """Public seed of the random Fourier frequencies (recorded in the receipt and the output)."""
    nuisance: NuisanceSpec = Field(default_factory=NuisanceSpec)
    """The stage-1 DP nuisance models (propensity and outcome per arm), fit on the first half."""
    outcome_direction: Literal["higher", "lower"] = "higher"
    """higher (default): cate.csv holds τ(x) = E[Y(treated) − Y(control) | x]; lower (smaller
    outcomes are better): it holds the benefit E[Y(control) − Y(treated) | x] = −τ(x), positive
    where the treatment lowers the outcome — the release on −Y (negated bounds, same widths),
    i.e. the sign flip of τ̂: post-processing, the noise and Δ are unchanged."""
    plot: bool = True
    """Write cate.png for a grid varying 1 or 2 covariates (default true); drawn from the
    released values and their public noise band only, so it costs no ε."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "arms" not in data and "treated" not in data:
            data = {**data, "treated": 1}  # the binary default: treated = 1, control = 0
        if isinstance(data, dict) and "split_seed" in data:
            raise ValueError("cate.split_seed was replaced by cate.split: the default "
                             "{kind: random} draws a secret permutation and does not depend on "
                             "the row order; {kind: seeded, seed: N} reproduces the old split "
                             "and assumes the row order is independent of the data")
        return data

    def contrast_arms(self) -> tuple[ArmLabel, ...]:
        """The arms released against the control, in declared order: (treated,) for two arms,
        every arm but cate.control with cate.arms (K − 1 contrasts)."""
        labels = self.labels()
        skip = label_index(labels, self.control_label())
        return tuple(lab for i, lab in enumerate(labels) if i != skip)

    @property
    def kappa(self) -> float:
        """The propensity clip in use (``propensity_clip`` or the estimand's default)."""
        if self.propensity_clip is not None:
            return self.propensity_clip
        return KAPPA_DEFAULT[self.estimand]

    @property
    def ate_spec(self) -> AteSpec:
        """The ``ate`` section in use (its defaults when omitted)."""
        return self.ate if self.ate is not None else AteSpec()

    @model_validator(mode="after")
    def _consistent(self) -> CateSection:
        if self.arms is not None:
            if self.control is None:
                raise ValueError("cate.control: with cate.arms, name the control arm every other "
                                 "arm is compared with (one of cate.arms)")
            if self.estimand == "ate":
                raise ValueError("cate.arms: estimand ate with K ≥ 3 arms is not implemented "
                                 "yet (no proof of the K-arm ATE interval); release the "
                                 "contrasts τ_k(x) with estimand: cate, or run the ATE once per "
                                 "arm with cate.treated/control on the rows of those two arms "
                                 "(a public selection declared before the run)")
            if self.mode != "function":
                raise ValueError("cate.arms: K ≥ 3 arms run in mode: function only (the "
                                 "queries-mode smooth-sensitivity noise of Thm 1 has no K-arm "
                                 "proof); use mode: function")
        if self.estimand == "ate":
            extra = [f for f in CATE_ONLY if f in self.model_fields_set]
            if extra:
                raise ValueError(f"cate.{extra[0]}: shapes the τ(x) release, which estimand: ate "
                                 "does not make; remove " + ", ".join(extra))
            return self
        if self.ate is not None:
            raise ValueError("cate.ate: set cate.estimand: ate to release the average effect, or "
                             "remove the ate section")
        if (self.queries is None) == (self.grid is None):
            raise ValueError("give exactly one of cate.queries (a public file) and cate.grid")
        if self.mode == "queries" and self.loss == "huber":
            raise ValueError("cate.loss: queries mode (Thm 1) uses the squared loss; remove loss "
                             "or set it to squared")
        if self.features == "rff" and self.mode != "function":
            raise ValueError("cate.features: rff is a function-mode variant; use mode: function")
        if self.learner == "dr" and self.kappa < 0.05:
            raise ValueError("cate.propensity_clip: the DR-learner needs κ >= 0.05 (its weights "
                             "grow like 1/κ)")
        return self

    @property
    def resolved_loss(self) -> Literal["huber", "squared"]:
        """The loss actually used."""
        if self.loss is not None:
            return self.loss
        return "huber" if self.mode == "function" else "squared"


class CateSpec(CommonSpec):
    """Full spec of ``dpcausal cate``."""

    cate: CateSection
    """The cate method's own settings: the mode, the learner, the query points or grid, the
    kernel and the nuisances."""
