"""The spec of ``dpcausal owl``: DP outcome weighted learning (DP-wERM, output perturbation)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from dpcausal.spec.base import BinaryArms, CommonSpec, PositiveFinite, StrictModel


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


class OwlSection(BinaryArms):
    """The ``owl`` section."""

    section: ClassVar[str] = "owl"
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
        return self



class OwlSpec(CommonSpec):
    """Full spec of ``dpcausal owl``."""

    owl: OwlSection
