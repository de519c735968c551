"""The spec of ``dpcausal owl``: DP outcome weighted learning (DP-wERM, output perturbation)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from dpcausal.spec.base import BinaryArms, CommonSpec, PositiveFinite, StrictModel
from dpcausal.spec.split import RowSplit

AUTO_GRID = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
"""The default public grid of ``lambda: auto`` (unit-free λ)."""


class PropensityColumn(StrictModel):
    """Design probabilities of the *treated* arm, one per row, fixed by the study design."""

    column: Annotated[str, Field(min_length=1)]
    """Column holding each row's design probability of being treated, fixed by the study design
    before the data existed (never estimated on the sensitive rows: that voids the bound)."""
    floor: Annotated[float, Field(gt=0.0, le=0.5)]
    """Public π_min in (0, 0.5]: every design probability must lie in [floor, 1 − floor], or the
    run is refused. The weight bound is W = (U − L + η)/floor, and the noise grows like W: a
    floor twice as small doubles the noise."""


class RffSpec(StrictModel):
    """Random Fourier features for the Gaussian kernel exp(−‖s − s′‖²/(2·bandwidth²))."""

    dim: Annotated[int, Field(ge=1, le=4096)] = 20
    """Number of random features (1 to 4,096; default 20); θ has this many coordinates (plus
    the intercept). The Gamma noise norm grows like the dimension, so more features buy a more
    flexible rule with more noise."""
    bandwidth: PositiveFinite = 1.0
    """Kernel bandwidth (> 0, default 1.0) in the scaled covariate units of owl.scaling: smaller
    gives a wigglier rule. Public: choose it without the sensitive data."""
    seed: int = 0
    """Seed of the public random projection (default 0); drawn before the data is read and saved
    in rule.json so --apply maps new rows identically. It seeds no privacy noise."""


class TuneSpec(StrictModel):
    """γ tuning by Algorithm 2 (corrected) on a separate *public* file, at the sensitive n and ε."""

    public_data: Path
    """A PUBLIC file with the same columns as the data (e.g. an earlier trial), never the
    sensitive file or a sample of it: tuning reads it without privacy, at no ε cost."""
    grid: Annotated[list[PositiveFinite], Field(min_length=1)]
    """Candidate values of γ (each > 0). Each is scored by the value of its DP rule (noise
    included, at the run's n and ε) on held-out public rows; the best mean wins, ties to the
    smallest."""
    repeats: Annotated[int, Field(ge=1, le=10_000)] = 200
    """Random train/validation splits of the public file per γ (1 to 10,000; default 200): more
    repeats give a steadier choice and a longer run."""
    validation_size: Annotated[int, Field(ge=1)] | None = None
    """m in Algorithm 2: public rows held out to score each γ; default max(⌊0.2·n₀⌋, 50) for a
    public file of n₀ rows, and it must be below n₀."""
    seed: int = 0
    """Seed of the public splits and of the simulated noise used while tuning (default 0);
    never of the release's noise."""


class AutoSpec(StrictModel):
    """``lambda: auto``: λ chosen from a public grid by a private selection on the sensitive rows
    (:mod:`dpcausal.commands.owl.auto`), at ``share`` of ε; the rest fits the released rule."""

    grid: Annotated[list[PositiveFinite], Field(min_length=2, max_length=50)] = Field(
        default_factory=lambda: list(AUTO_GRID))
    """Candidate unit-free λ (2 to 50 values, each > 0; default 10⁻⁶, 10⁻⁵, …, 1). Public: write
    it without looking at the data. Each candidate costs share·ε/(its count) on the training
    part, so a longer grid makes each trial noisier."""
    share: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.2
    """Share of ε spent on the selection (default 0.2); the released rule gets the rest."""
    validation_share: Annotated[float, Field(ge=0.1, le=0.9)] = 0.5
    """Share of the rows (0.1 to 0.9, default 0.5) that score the candidates; the others train
    them. The parts are disjoint, so the selection costs share·ε once (parallel composition)."""
    split: RowSplit = Field(default_factory=RowSplit)
    """Which rows score the candidates: a secret random permutation per run (default; the
    guarantee holds whatever the row order), or {kind: seeded, seed: N} / {kind: id-hash, column:
    ID}."""


class OwlSection(BinaryArms):
    """The ``owl`` section."""

    section: ClassVar[str] = "owl"
    command: ClassVar[str] = "owl"
    multi_arm_why: ClassVar[str] = "the paper has no multi-arm method, spec owl §4.3"
    model_config = ConfigDict(**{**BinaryArms.model_config, "populate_by_name": True})
    propensity: Annotated[float, Field(gt=0.0, lt=1.0)] | PropensityColumn
    """P(treated) fixed by the design: one number in (0, 1) for every row, or {column: NAME,
    floor: π_min} for per-row design probabilities. Never estimated on the sensitive data.
    π_min = min(p, 1 − p) for a number; the noise grows like 1/π_min."""
    ridge_lambda: Annotated[PositiveFinite | Literal["total", "auto"] | None,
                            Field(alias="lambda")] = None
    """Unit-free ridge penalty λ > 0 of the averaged objective (1/n) Σ (wᵢ/W) ℓ(Aᵢθᵀv(xᵢ)) +
    (λ/2)‖θ‖², i.e. γ = λ·n·W: the weights are divided by their public bound W, so rescaling the
    outcome ($ ↔ k$) leaves the rule and its noise (Δ = 2/(nλ) in θ) unchanged. total (the
    default when neither gamma nor tune is given): the public rule of
    :mod:`dpcausal.commands.owl.penalty` picks λ from n, ε, the dimension and α. auto: a private
    selection from the public grid of owl.auto at a share of ε (its own events in the plan and the
    receipt); the released θ is then λ·θ̂ (the same rule, in the units whose noise does not depend
    on λ). Give at most one of lambda, gamma and tune."""
    auto: AutoSpec | None = None
    """Settings of lambda: auto (default grid 10⁻⁶ … 1, share 0.2, half the rows score); only with
    lambda: auto."""
    gamma: PositiveFinite | None = None
    """The old form, in explicit units: the ridge penalty γ > 0 of the sum-form objective
    Σ wᵢℓ(Aᵢθᵀv(xᵢ)) + (γ/2)‖θ‖², in **outcome units × rows** (the weights wᵢ = B′ᵢ/π carry the
    outcome's units: γ = 75 on an outcome in dollars is a vanishing penalty, in thousands of
    dollars a strong one). Δ = 2W/γ. Prefer lambda; give at most one of lambda, gamma and tune."""
    tune: TuneSpec | None = None
    """Choose γ from a grid (in γ's units) on a separate PUBLIC file (Algorithm 2, corrected)
    instead of giving lambda or gamma; costs no ε."""
    kernel: Literal["linear", "rff"] = "linear"
    """linear (default): a rule linear in the scaled covariates; rff: linear in random Fourier
    features of them (a Gaussian-kernel rule, set by owl.rff)."""
    rff: RffSpec | None = None
    """Random Fourier feature settings for kernel: rff (default {dim: 20, bandwidth: 1.0,
    seed: 0}); only with kernel: rff."""
    huber_h: PositiveFinite = 0.5
    """Smoothing width h > 0 of the Huber-smoothed hinge loss (default 0.5): the loss is
    quadratic within h of the hinge. Changes the fit (and solver speed), not the sensitivity."""
    scaling: Literal["minmax", "maxabs"] = "minmax"
    """How clipped covariates are scaled before the rule: minmax (default) maps [lo, hi] to
    [0, 1]; maxabs divides by max(|lo|, |hi|). Either way each mapped row has norm ≤ 1, as the
    sensitivity requires."""
    intercept: bool = True
    """Append a constant feature (default true); it is penalised by γ like the other
    coordinates and adds one dimension to θ (and to the noise)."""
    outcome_direction: Literal["higher", "lower"] = "higher"
    """higher (default): larger outcomes are better; lower: smaller are better (the outcome and
    its bounds are negated before fitting)."""
    eta: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    """Positivity offset η ≥ 0, in outcome units: weights use B′ = clip(B, L, U) − L + η > 0. It
    adds η/π_min to the weight bound W (hence to the noise). Default: 10⁻⁴ of the outcome range
    (U − L), unit-free."""
    apply_to: Path | None = None
    """A file of NEW covariate rows (never the training data) to write recommendations.csv for,
    from the released rule (post-processing: no extra ε)."""
    plot: bool = True
    """Write rule.png (default true): the released coefficients with their noise intervals and,
    with apply_to, the scored rows' margins with their noise band (drawn from released numbers
    only, no extra ε)."""

    @model_validator(mode="after")
    def _consistent(self) -> OwlSection:
        given = [n for n, v in (("lambda", self.ridge_lambda), ("gamma", self.gamma),
                                ("tune", self.tune)) if v is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of owl.lambda, owl.gamma and owl.tune (got "
                             f"{' and '.join(given)}); without any, lambda: total")
        if self.auto is not None and self.ridge_lambda != "auto":
            raise ValueError("owl.auto is only used with lambda: auto")
        if self.rff is not None and self.kernel != "rff":
            raise ValueError("owl.rff is only used with kernel: rff")
        return self


class OwlSpec(CommonSpec):
    """Full spec of ``dpcausal owl``."""

    owl: OwlSection
    """The owl method's own settings: the arms, the design propensity, γ, the feature map."""
