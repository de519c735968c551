"""The spec of ``dpcausal select-policy``: private policy selection with certified DR utilities."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from dpcausal.spec.arms import MultiArms
from dpcausal.spec.base import CommonSpec, Interval, PositiveFinite, StrictModel
from dpcausal.spec.split import RowSplit

ColumnName = Annotated[str, Field(min_length=1)]


class LibraryFile(StrictModel):
    """A public policy library file (YAML/JSON), written before the data is seen."""

    path: Path
    """YAML or JSON file of {policies: [...]} (constant, threshold, linear and rare_region
    policies; see configs/policies_example.yaml), written before the data is seen: never
    thresholds at data quantiles or policies learned on the data. Its SHA-256 is receipted."""


class LibraryGenerator(StrictModel):
    """The paper's 160-policy library (App. G.1), generated from a public seed."""

    generator: Literal["paper160"]
    """The only generator: the paper's library of 18 structured policies plus n_random random
    linear ones (App. G.1). M, the library size, enters the regret bound through log M."""
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
    """ε (> 0) of the Laplace release of the chosen policy's DR value (sensitivity Δ/n). It is
    charged on top of privacy.epsilon: the run's total ε is their sum."""


class SelectPolicySection(MultiArms):
    """The ``select_policy`` section."""

    section: ClassVar[str] = "select_policy"
    experimental_multi_arm: bool = False
    """Must be true to use select_policy.arms (K ≥ 3 arms): the K-arm certificate (multinomial
    logistic propensity, spec select_policy §2.9) is derived but not yet independently
    reviewed, and the receipt says so. Default false."""
    library: LibraryFile | LibraryGenerator
    """The public candidate policies: {path: FILE} or {generator: paper160, seed: N}. The
    exponential mechanism picks one; the regret's privacy term grows like log M."""
    regime: Literal["learned", "frozen", "fixed"] = "learned"
    """learned (default): outcome ridge and propensity ℓ2-logistic fitted on the first block,
    doubly robust scores on the second, every row protected (Δ_cert = max{2B_ψ, n·ρ*}); frozen:
    the nuisances come from a public model file (select_policy.frozen_model) and every row is
    scored (Δ = 2B_ψ); fixed: per-row score columns with a public bound (Δ = 2·bound)."""
    certificate: Literal["erm", "trivial"] = "erm"
    """``erm``: the ridge/logistic certificate; ``trivial``: β_μ = μ range, β_e = 1 − 2ζ
    (always valid, near-uniform selection)."""
    zeta: Annotated[float, Field(gt=0.0, le=0.5)] = 0.1
    """Propensity floor ζ in (0, 0.5] (default 0.1): ê is clipped to [ζ, 1 − ζ] (with K arms,
    ζ ≤ 1/K and the propensities are mapped into [ζ, 1 − (K − 1)ζ]). Δ grows like ζ⁻², so
    halving ζ roughly quadruples the noise; a larger ζ biases the DR scores."""
    mu_bounds: Interval | None = None
    """Public outcome-model range [μ_lo, μ_hi]; default bounds.outcome."""
    train_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.5
    """f in (0, 1) (default 0.5): m = ⌊f·N⌋ nuisance rows, n = N − m scoring rows (regime
    learned). More scoring rows shrink the regret's privacy term (∝ 1/n); more nuisance rows
    give better nuisance models and a smaller ρ*."""
    split: RowSplit = Field(default_factory=RowSplit)
    """Which rows form the nuisance block: a secret random permutation per run (default; the
    guarantee holds whatever the row order), {kind: seeded, seed: N} or {kind: index} (the first m
    rows); the last two assume the row order is independent of the data, as the receipt states."""
    lambda_mu: PositiveFinite | Literal["total"] = "total"
    """λ > 0 of the outcome ridge, averaged objective (1/m)Σℓ + (λ/2)‖θ‖² on covariates mapped to
    [−1, 1] (unit-free: rescaling the outcome rescales the fit, not λ). total (default): the
    public total-error rule of docs/proofs/select_policy.md §7 picks it with lambda_e, from n, m,
    d, ε, the library size and the bounds (small at large ε, where the release is the non-private
    AIPW choice; large at small ε, where Δ would swamp the choice). A number: that λ (the paper
    used 50, which flattens the fits: a larger λ means a smaller Δ and a more biased model)."""
    lambda_e: PositiveFinite | Literal["total"] = "total"
    """λ > 0 of the propensity ℓ2-logistic, same convention; total (default): chosen with
    lambda_mu by the total-error rule. A larger λ means a smaller Δ and a flatter propensity
    model (at λ = 50 the NHEFS-shaped propensity is 0.5 for everyone, its true share 0.26)."""
    effective_bounds: bool = True
    """Clip μ̂ and ê to the public ranges their fits provably stay in at these penalties
    (default true; docs/proofs/select_policy.md §7): the fits are unchanged and B_ψ, ρ* and Δ
    shrink — a heavily penalised propensity stays near ½, so ζ is raised to match. false: clip
    to the spec's μ-range and [ζ, 1 − ζ] only (the paper's Δ)."""
    solver_tol: Annotated[float, Field(gt=0.0, le=1e-3)] = 1e-10
    """Gradient-norm stopping tolerance τ of the nuisance solvers (in (0, 1e-3], default 1e-10);
    the slack L_g·2τ/λ is added to every stability bound β, so a looser τ means a larger Δ."""
    frozen_model: Path | None = None
    """Regime ``frozen``: a public nuisance model file (see configs/select_policy.yaml)."""
    fixed_scores: FixedScores | None = None
    """Regime ``fixed``: the score columns and their public bound."""
    outcome_direction: Literal["higher", "lower"] = "higher"
    """higher (default): larger outcomes are better, the policy of largest mean outcome is
    sought; lower: smaller are better (e.g. blood pressure): Y, its bounds, mu_bounds and a
    frozen model's predictions are negated before scoring (fixed scores too), so the policy of
    smallest mean outcome is sought. Δ is unchanged (it depends on the bounds' widths and
    magnitudes only); a released value is reported on the outcome's own scale."""
    value_release: ValueRelease | None = None
    """Also release the chosen policy's DR value by a separate Laplace step with its own ε;
    default none (only the policy's name is released)."""
    plot: bool = True
    """Write selection.png (default true): the exponential mechanism's guarantee — the probability
    that the chosen policy's DR value is within t of the library's best, against t, with
    value_gap marked — and, with value_release, the released value with its noise interval and the
    outcome bounds (drawn from released numbers and public parameters only, no extra ε)."""
    regret_beta: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.05
    """β of the printed regret privacy term 2Δ(log M + log 1/β)/(nε) (dry run only)."""
    chunk_rows: Annotated[int, Field(ge=1024, le=10_000_000)] = 32_768
    """Scoring rows per chunk (1,024 to 10,000,000; default 32,768): memory only, never the
    result."""

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
        if self.arms is not None:
            self._multi_arm_ok(len(self.arms))
        elif self.experimental_multi_arm:
            raise ValueError("select_policy.experimental_multi_arm is only used with "
                             "select_policy.arms (K ≥ 3 arms)")
        return self

    def _multi_arm_ok(self, k: int) -> None:
        """What K ≥ 3 arms needs: the experimental flag, regime learned, a library file, ζ ≤ 1/K."""
        if not self.experimental_multi_arm:
            raise ValueError(f"select_policy.arms: selection among K = {k} arms is experimental "
                             "(its certificate, spec select_policy §2.9, is not yet independently "
                             "reviewed); set select_policy.experimental_multi_arm: true to run "
                             "it (the receipt records it)")
        if self.regime != "learned":
            raise ValueError(f"select_policy.arms: regime {self.regime} takes two arms only; "
                             "K arms run in regime learned")
        if not isinstance(self.library, LibraryFile):
            raise ValueError("select_policy.arms: the paper160 generator makes two-arm policies; "
                             "give a library file of K-arm policies ({path: FILE}, see "
                             "configs/policies_3arm.yaml)")
        if self.zeta > 1.0 / k:
            raise ValueError(f"select_policy.zeta must be at most 1/K = {1.0 / k:.6g} with K = {k} "
                             "arms (the propensities are floored at zeta)")


class SelectPolicySpec(CommonSpec):
    """Full spec of ``dpcausal select-policy``."""

    select_policy: SelectPolicySection
    """The select-policy method's own settings: the arms, the library, the regime, the
    nuisance penalties."""
