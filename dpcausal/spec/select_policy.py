"""The spec of ``dpcausal select-policy``: private policy selection with certified DR utilities."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from dpcausal.spec.base import BinaryArms, CommonSpec, Interval, PositiveFinite, StrictModel
from dpcausal.spec.split import RowSplit

ColumnName = Annotated[str, Field(min_length=1)]


class LibraryFile(StrictModel):
    """A public policy library file (YAML/JSON), written before the data is seen."""

    path: Path


class LibraryGenerator(StrictModel):
    """The paper's 160-policy library (App. G.1), generated from a public seed."""

    generator: Literal["paper160"]
    seed: int
    """Public seed of the random linear policies (fixed before the data is seen)."""
    n_random: Annotated[int, Field(ge=0, le=100_000)] = 142
    """Number of random linear policies after the 18 structured ones (paper: 142)."""
    rare_threshold: float | None = None
    """Public q₀.₉₅ of h_R for the two rare-region policies. Default: the 95th percentile of h_R
    under i.i.d. N(0, 1) covariates (200,000 draws from the public seed); never from the data."""


class FixedScores(StrictModel):
    """Regime ``fixed``: per-row scores q(Z_i, a) supplied as columns, bounded by a public B."""

    treated: ColumnName
    """Column holding each row's score if the treated arm is recommended."""
    control: ColumnName
    """Column holding each row's score if the control arm is recommended."""
    bound: PositiveFinite
    """Public B: every score is clipped to [−B, B]; Δ = 2B."""


class ValueRelease(StrictModel):
    """Release the chosen policy's DR value with a separate Laplace step."""

    epsilon: PositiveFinite


class SelectPolicySection(BinaryArms):
    """The ``select_policy`` section."""

    section: ClassVar[str] = "select_policy"
    library: LibraryFile | LibraryGenerator
    regime: Literal["learned", "frozen", "fixed"] = "learned"
    certificate: Literal["erm", "trivial"] = "erm"
    """``erm``: the ridge/logistic certificate; ``trivial``: β_μ = μ range, β_e = 1 − 2ζ
    (always valid, near-uniform selection)."""
    zeta: Annotated[float, Field(gt=0.0, le=0.5)] = 0.1
    """Propensity floor: ê is clipped to [ζ, 1 − ζ]. Δ grows like ζ⁻²."""
    mu_bounds: Interval | None = None
    """Public outcome-model range [μ_lo, μ_hi]; default bounds.outcome."""
    train_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.5
    """m = ⌊f·N⌋ nuisance rows, n = N − m scoring rows (regime learned)."""
    split: RowSplit = Field(default_factory=RowSplit)
    """Which rows form the nuisance block: a secret random permutation per run (default; the
    guarantee holds whatever the row order), {kind: seeded, seed: N} or {kind: index} (the first m
    rows); the last two assume the row order is independent of the data, as the receipt states."""
    lambda_mu: PositiveFinite = 50.0
    """Ridge penalty (averaged objective (1/m)Σℓ + (λ/2)‖θ‖²)."""
    lambda_e: PositiveFinite = 50.0
    """Logistic penalty (same convention)."""
    solver_tol: Annotated[float, Field(gt=0.0, le=1e-3)] = 1e-10
    """Gradient-norm stopping tolerance τ; the slack L_g·2τ/λ is added to every β."""
    frozen_model: Path | None = None
    """Regime ``frozen``: a public nuisance model file (see configs/select_policy.yaml)."""
    fixed_scores: FixedScores | None = None
    """Regime ``fixed``: the score columns and their public bound."""
    value_release: ValueRelease | None = None
    regret_beta: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.05
    """β of the printed regret privacy term 2Δ(log M + log 1/β)/(nε) (dry run only)."""
    chunk_rows: Annotated[int, Field(ge=1024, le=10_000_000)] = 32_768
    """Scoring rows per chunk (memory only; never changes the result)."""

    @model_validator(mode="after")
    def _consistent(self) -> SelectPolicySection:
        if self.regime == "frozen" and self.frozen_model is None:
            raise ValueError("select_policy.frozen_model is required with regime: frozen")
        if self.regime != "frozen" and self.frozen_model is not None:
            raise ValueError("select_policy.frozen_model is only used with regime: frozen")
        if self.regime == "fixed" and self.fixed_scores is None:
            raise ValueError("select_policy.fixed_scores is required with regime: fixed")
        if self.regime != "fixed" and self.fixed_scores is not None:
            raise ValueError("select_policy.fixed_scores is only used with regime: fixed")
        return self



class SelectPolicySpec(CommonSpec):
    """Full spec of ``dpcausal select-policy``."""

    select_policy: SelectPolicySection
