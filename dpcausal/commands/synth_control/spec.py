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
    method: Literal["out", "obj"] = "out"
    """out: DPSC_out (output perturbation, certified ε-DP). obj: DPSC_obj (objective perturbation,
    NOT ε-DP as published, spec §4.6): only with allow_uncertified: true, receipt dp_guarantee false."""
    allow_uncertified: bool = False
    """Allow method: obj (DPSC_obj), which is not ε-DP as published (default false: refused
    with exit 3). Its receipt says dp_guarantee: false and it is still charged to the ledger."""
    ridge_lambda: Annotated[PositiveFinite | Literal["T0"], Field(alias="lambda")] = "T0"
    """Ridge penalty λ of (1/T0)‖y − Xᵀf‖² + (λ/(2T0))‖f‖²; the default is the public rule λ = T0."""
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
        return self


class SynthControlSpec(CommonSpec):
    """Full spec of ``dpcausal synth-control``."""

    synth_control: SynthControlSection
    """The synth-control method's own settings: the target, the treatment time, the donors and
    the DPSC calibration."""
