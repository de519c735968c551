"""The spec of ``dpcausal owl``: DP outcome weighted learning (DP-wERM, output perturbation)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from dpcausal.spec.base import CommonSpec, PositiveFinite, StrictModel

ArmLabel = bool | int | float | str


class PropensityColumn(StrictModel):
    """Design probabilities of the *treated* arm, one per row, fixed by the study design."""

    column: Annotated[str, Field(min_length=1)]
    floor: Annotated[float, Field(gt=0.0, le=0.5)]
    """Public π_min: every design probability must lie in [floor, 1 − floor]; W = (U−L+η)/floor."""


class RffSpec(StrictModel):
    """Random Fourier features for the Gaussian kernel exp(−‖s − s′‖²/(2·bandwidth²))."""

    dim: Annotated[int, Field(ge=1, le=4096)] = 20
    bandwidth: PositiveFinite = 1.0
    seed: int = 0
    """Seed of the public projection (drawn before the data is read; saved in the rule)."""


class TuneSpec(StrictModel):
    """γ tuning by Algorithm 2 (corrected) on a separate *public* file, at the sensitive n and ε."""

    public_data: Path
    grid: Annotated[list[PositiveFinite], Field(min_length=1)]
    repeats: Annotated[int, Field(ge=1, le=10_000)] = 200
    validation_size: Annotated[int, Field(ge=1)] | None = None
    """m in Algorithm 2; default max(⌊0.2·n₀⌋, 50)."""
    seed: int = 0


class OwlSection(StrictModel):
    """The ``owl`` section."""

    treated: ArmLabel
    """The treatment column's value that means 'treated' (arm +1)."""
    control: ArmLabel | None = None
    """The other arm's value; defaults to 0 when ``treated`` is 1 (or false when it is true)."""
    propensity: Annotated[float, Field(gt=0.0, lt=1.0)] | PropensityColumn
    """P(treated) by design: a number, or {column: NAME, floor: π_min}."""
    gamma: PositiveFinite | None = None
    tune: TuneSpec | None = None
    kernel: Literal["linear", "rff"] = "linear"
    rff: RffSpec | None = None
    huber_h: PositiveFinite = 0.5
    scaling: Literal["minmax", "maxabs"] = "minmax"
    intercept: bool = True
    outcome_direction: Literal["higher", "lower"] = "higher"
    eta: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.001
    """Positivity offset: B′ = clip(B, L, U) − L + η."""
    apply_to: Path | None = None
    """A file of new covariate rows (not the training data) to write recommendations for."""

    @model_validator(mode="after")
    def _consistent(self) -> OwlSection:
        if (self.gamma is None) == (self.tune is None):
            raise ValueError("give exactly one of owl.gamma and owl.tune")
        if self.rff is not None and self.kernel != "rff":
            raise ValueError("owl.rff is only used with kernel: rff")
        if self.control is not None and self.control == self.treated:
            raise ValueError("owl.control must differ from owl.treated")
        if self.control is None and not (isinstance(self.treated, bool) or self.treated == 1):
            raise ValueError("owl.control is required unless owl.treated is 1 or true")
        return self

    def control_label(self) -> ArmLabel:
        """The control arm's label (public: from the spec, never from the data)."""
        if self.control is not None:
            return self.control
        if isinstance(self.treated, bool):
            return not self.treated
        return 0


class OwlSpec(CommonSpec):
    """Full spec of ``dpcausal owl``."""

    owl: OwlSection
