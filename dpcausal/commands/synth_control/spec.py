"""The spec of ``dpcausal synth-control``: differentially private synthetic control (DPSC).

Rho, Cummings & Misra (AISTATS 2023), with the errata of ``specs/synth_control.md``: the privacy
unit is one donor's whole series, the target is public, DPSC_out is the certified default.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from dpcausal.spec.base import CommonSpec, PositiveFinite, StrictModel

UnitId = int | str
"""A unit identifier as it appears in the unit column (long layout) or a column name (wide)."""

TimeValue = int | float | dt.datetime | dt.date | str
"""A period as it appears in the time column (numbers, ISO dates or text that sorts in time order)."""


Share = Annotated[float, Field(gt=0.0)]
"""A positive weight of one release in the split of ε (normalised over the enabled releases)."""


class IndividualUnit(StrictModel):
    """``privacy_unit: individual``: how much one person can move a cell (all public)."""

    contribution: PositiveFinite
    """The most one person can add to (or change in) a cell's total, in the outcome's units times
    people: e.g. 1 for a count of prisoners, or the largest income one person can have for GDP
    per head in the same units. Public, never taken from the data."""
    population: PositiveFinite
    """A public lower bound on the number of people behind every cell (1 when cells are counts):
    a cell that is a total over at least this many people, divided by it, moves by at most
    contribution/population when one person's data changes."""


class CappedReleases(StrictModel):
    """``method: capped``: what is released besides the average post-period effect."""

    path: bool = True
    """Release the post-period counterfactual path (and the effect path), charged its own share."""
    path_blocks: Annotated[int, Field(ge=1)] | None = None
    """Release the path as this many consecutive block means of the post-period (public, equal
    lengths as far as possible) instead of one value per period: the noise per value falls
    roughly in proportion. Default: one value per post period."""
    fit: bool = False
    """Release the pre-period RMSPE of the synthetic control (charged): how well it tracked the
    target before the treatment. It also gives the average effect a total interval."""
    placebos: bool = False
    """Release every donor's in-space placebo effect (charged): each donor treated as the target,
    its synthetic control from the other donors, its average post-period 'effect'. The standard
    inference of synthetic control: an effect is convincing when the target's stands out. Each
    donor's placebo reveals its own series, so under privacy_unit: donor the noise is about the
    outcome's range (the dry run says so); useful under privacy_unit: individual."""


class CappedShares(StrictModel):
    """``method: capped``: the split of ε (relative weights, normalised over what is released)."""

    weights: Share = 0.2
    """Relative share for choosing the k donors by the exponential mechanism (used with
    weights: private only; default 0.2)."""
    average: Share = 0.5
    """Relative share for the average post-period effect, the headline number (default 0.5):
    its noise falls in proportion to its ε."""
    path: Share = 0.3
    """Relative share for the post-period counterfactual path when releases.path is true
    (default 0.3)."""
    fit: Share = 0.2
    """Relative share for the pre-period RMSPE when releases.fit is true (default 0.2)."""
    placebos: Share = 0.3
    """Relative share for the donors' placebo effects when releases.placebos is true (default
    0.3)."""
    placebo_choice: Share = 0.2
    """Relative share for choosing every placebo's k donors when releases.placebos is true and
    the donors are chosen privately (weights: private; default 0.2)."""


CAPPED_FIELDS = ("k", "weights", "band", "releases", "shares", "path_noise")
DPSC_FIELDS = {"ridge_lambda": "lambda", "sensitivity": "sensitivity", "step2": "step2",
               "epsilon_split": "epsilon_split", "scaling": "scaling",
               "release_weights": "release_weights"}


def _default(name: str) -> object:
    """A field's default value (from its default factory, if it has one)."""
    info = SynthControlSection.model_fields[name]
    return info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]


class SynthControlSection(StrictModel):
    """The ``synth_control`` section.

    Everything here is public: the target, the treatment time, the donor list, λ and the ε split
    must be chosen without looking at the donors' values (spec §8.4).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    target: UnitId
    """The treated unit: a value of the unit column (long) or a column name (wide). Public."""
    treatment_time: TimeValue
    """First post-intervention period: pre-period = times < treatment_time (T0 = their count)."""
    layout: Literal["long", "wide"] = "long"
    """long: one row per (unit, time) with data.columns unit/time/outcome (pysyncon/Synth style);
    wide: one row per period, a data.columns.time column and one column per unit."""
    donors: Annotated[list[UnitId], Field(min_length=1)] | None = None
    """The donor pool (public). Default: every unit except the target."""
    method: Literal["out", "obj", "capped"] = "out"
    """out: DPSC_out (the paper's output perturbation, certified ε-DP). capped: the average of k
    donors nearest the target (a vertex of the capped simplex), with noise calibrated to each
    released number (not in the paper; docs/proofs/synth_control_estimand.md). obj: DPSC_obj
    (objective perturbation, NOT ε-DP as published, spec §4.6): only with allow_uncertified: true,
    receipt dp_guarantee false."""
    privacy_unit: Literal["donor", "individual"] = "donor"
    """donor: one donor's whole series is protected (replace-one donor). individual (method:
    capped only): one person in a donor unit, whose data moves each of that unit's cells by at
    most individual.contribution/individual.population. Weaker: it hides one person, not a whole
    donor. In both, the target's series is public and not protected."""
    individual: IndividualUnit | None = None
    """privacy_unit: individual only: one person's largest contribution and the cells' public
    minimum population."""
    k: Annotated[int, Field(ge=1)] = 4
    """method: capped: how many donors the synthetic control averages (weight 1/k each, the cap
    c = 1/k of the capped simplex). Every released number's noise is proportional to 1/k."""
    weights: Literal["auto", "nearest", "private"] = "auto"
    """method: capped: how the k donors are chosen. nearest: the k with the smallest pre-period
    RMS distance to the target (deterministic, costs no ε; the noise covers the choice). private:
    the exponential mechanism over the k-subsets (charged shares.weights). auto: nearest for
    privacy_unit donor, private for individual (the lower noise in each)."""
    band: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """method: capped: optional half-width, as a fraction of the bounds' range hi − lo, of a band
    around the (public) target in which every donor value is clipped. The noise then scales with
    min(hi − lo, 2·band·(hi − lo)) instead of hi − lo, but no effect larger than the band can be
    found: set it above any effect you consider possible (plus the pre-period mismatch), or
    leave it out (default)."""
    releases: CappedReleases = Field(default_factory=CappedReleases)
    """method: capped: which numbers are released besides the average post-period effect."""
    shares: CappedShares = Field(default_factory=CappedShares)
    """method: capped: relative weights of the split of ε between the released numbers."""
    path_noise: Literal["auto", "laplace", "gaussian"] = "auto"
    """method: capped: the path's noise: laplace (pure ε-DP, ℓ1 sensitivity) or gaussian (needs
    privacy.delta > 0, ℓ2 sensitivity: less noise on long paths). auto: gaussian when δ > 0 and
    its per-value noise is smaller, else laplace."""
    allow_uncertified: bool = False
    """Allow method: obj (DPSC_obj), which is not ε-DP as published (default false: refused
    with exit 3). Its receipt says dp_guarantee: false and it is still charged to the ledger."""
    ridge_lambda: Annotated[PositiveFinite | Literal["T0", "total"], Field(alias="lambda")] = "total"
    """Ridge penalty λ of (1/T0)‖y − Xᵀf‖² + (λ/(2T0))‖f‖² on the mapped panel (unit-free). total
    (default): the public rule that minimises the plan's noise bound plus the shrinkage
    λ/(2T0 + λ) over λ ∈ T0·{0.01, …, 1000} (small λ at large ε, large λ at small ε). T0: the
    paper's choice (can shrink the effect enough to flip its sign). A number: that λ."""
    sensitivity: Literal["tight", "paper"] = "tight"
    """tight: min(√(2T0/λ), (4T0/λ)(1 + √(nT0/(2λ)))) (rigorous, = √(2T0/λ) when λ ≤ 2T0);
    paper: 4T0√(8+n)/λ (Lemma 3.7, valid but loose)."""
    step2: Literal["auto", "entrywise-l1", "matrix-l2"] = "auto"
    """How the post-period donor values are privatized: per-entry Laplace (scale 2h/ε2), the paper's
    joint ℓ2-Laplace draw (scale 2√h/ε2, dimension n·h), or auto = the lower-variance one."""
    epsilon_split: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.5
    """Share in (0, 1) (default 0.5): ε1 = epsilon_split·ε for the donor coefficients (step 1),
    ε2 = the rest for the post-period donor values (step 2); each step's noise scales like
    1/its ε."""
    scaling: Literal["scale", "affine"] = "scale"
    """How bounds.outcome [lo, hi] maps values to [−1, 1]: scale = x / max(|lo|, |hi|) (keeps the
    no-intercept model), affine = [lo, hi] → [−1, 1] (valid only if the true weights sum to 1)."""
    release_weights: bool = False
    """Also write the private donor weights f_out to weights.csv (default false);
    post-processing of the release, no extra ε."""
    plot: bool = True
    """Write synth_control.png (default true): the observed and released counterfactual paths and
    the effect, drawn from the released table only (no extra ε); false skips the figure (and
    matplotlib)."""
    c: PositiveFinite | None = None
    """DPSC_obj only: the Hessian-change bound; default T0(1 + √(16n − 15)) (spec §4.3)."""

    @model_validator(mode="after")
    def _consistent(self) -> SynthControlSection:
        if self.donors is not None:
            keys = [str(d) for d in self.donors]
            dup = sorted({k for k in keys if keys.count(k) > 1})
            if dup:
                raise ValueError(f"synth_control.donors lists {', '.join(dup)} more than once")
            if str(self.target) in keys:
                raise ValueError(
                    f"synth_control.donors contains the target {self.target!r}; the target is "
                    "never its own donor"
                )
        if self.c is not None and self.method != "obj":
            raise ValueError("synth_control.c is only used with method: obj")
        stray = [f for f in CAPPED_FIELDS if getattr(self, f) != _default(f)]
        if self.method != "capped" and stray:
            raise ValueError(f"synth_control.{stray[0]} is only used with method: capped")
        dpsc = [name for f, name in DPSC_FIELDS.items() if getattr(self, f) != _default(f)]
        if self.method == "capped" and dpsc:
            raise ValueError(f"synth_control.{dpsc[0]} is only used with method: out or obj "
                             "(method: capped has no ridge, no [-1, 1] mapping and no weights "
                             "beyond the chosen donors)")
        if self.privacy_unit == "individual" and self.method != "capped":
            raise ValueError("synth_control.privacy_unit: individual needs method: capped")
        if (self.privacy_unit == "individual") != (self.individual is not None):
            raise ValueError("synth_control.individual (contribution, population) is required "
                             "with privacy_unit: individual, and only then")
        return self


class SynthControlSpec(CommonSpec):
    """Full spec of ``dpcausal synth-control``."""

    synth_control: SynthControlSection
    """The synth-control method's own settings: the target, the treatment time, the donors and
    the DPSC calibration."""
