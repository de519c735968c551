"""The ``cate.ate`` section: the average treatment effect with a private confidence interval."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dpcausal.spec.base import PositiveFinite, StrictModel, check_interval

Share = Annotated[float, Field(gt=0.0, lt=1.0)]
MAX_GROUPS = 16
"""At most this many groups per release (the sensitivity needs their largest overlap, found by
trying every subset)."""


class AteGroup(StrictModel):
    """A public covariate region: the rows whose covariates lie in every listed [lo, hi]."""

    name: Annotated[str, Field(min_length=1, max_length=80)]
    """The group's name in ate.csv and ate.json."""
    where: dict[str, Annotated[list[float], Field(min_length=2, max_length=2)]]
    """Covariate → [lo, hi] in raw units, closed at both ends (e.g. {age: [25, 49]}); covariates
    not listed are unrestricted. Public: fixed before the run, never chosen from the data. (A
    list, not a tuple: the cate section is validated in Python mode, where a YAML list is not
    a tuple.)"""

    @model_validator(mode="after")
    def _nonempty(self) -> AteGroup:
        if not self.where:
            raise ValueError(f"cate.ate.groups: group '{self.name}' needs at least one covariate "
                             "range in 'where' (the whole population is the overall ATE)")
        for cov, rng in self.where.items():
            try:
                check_interval((rng[0], rng[1]))
            except ValueError as exc:
                raise ValueError(f"cate.ate.groups: group '{self.name}', {cov}: {exc}") from exc
        return self


class AteSpec(StrictModel):
    """How ``estimand: ate`` estimates the effect and its interval. Every value is public."""

    weights: Literal["clipped", "overlap"] = "clipped"
    """clipped (default): the ATE by doubly robust (AIPW) scores with the propensity clipped to
    [ζ, 1 − ζ] (ζ = cate.propensity_clip, default 0.1 here): the noise grows like 1/ζ. overlap:
    the overlap-weighted effect (ATO) E[e(1−e)τ(X)]/E[e(1−e)], a different estimand (the effect
    where treated and untreated overlap) whose scores need no 1/ζ: much less noise."""
    nuisance_rows: Literal["all", "split", "crossfit"] = "all"
    """Which rows fit the DP nuisance models. all (default): every row, then every row is scored
    (the models are DP, so a row's own influence on them is bounded: no own-observation bias
    beyond the DP noise; costs nuisance_share·ε + the rest, sequentially). split: a secret random
    first part (cate.first_half_fraction) fits them, the rest is scored (each part gets the whole
    ε, in parallel, but only part of the rows is scored). crossfit: `folds` disjoint folds, each
    fits its own models at nuisance_share·ε (in parallel) and every row is scored by the average
    of the other folds' models."""
    folds: Annotated[int, Field(ge=2, le=10)] = 2
    """Number of folds of nuisance_rows: crossfit (2 to 10)."""
    nuisance_share: Share = 0.3
    """Share of ε (and all of δ) spent on the DP nuisance models when nuisance_rows is all or
    crossfit (0 to 1, default 0.3); the rest goes to the scores' releases. Ignored by split (the
    two parts are disjoint and each gets the whole ε)."""
    propensity: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    """A public propensity P(A = 1), the same for every row (a randomized trial's design
    probability): no propensity model is fit, nothing is spent on one, and the interval holds
    whatever the outcome model. Default: none (a DP logistic model is fit)."""
    propensity_learner: Literal["output", "objective"] = "output"
    """How the DP propensity model is fit. output (default): ℓ2-logistic + Gaussian output
    perturbation, whose noise 2/(mλ) forces a large penalty λ (cate.nuisance.propensity_l2): on
    small observational data the model keeps little of an effect and part of the confounding
    stays in the estimate. objective: Gaussian objective perturbation with a certified solve
    (docs/proofs/cate_ate.md §3.8): a penalty 5–50× smaller, so barely shrunk, but noisier; the
    interval does not include the propensity model's noise. On NHEFS-shaped observational
    simulations it removes most of the confounding bias the output learner leaves (coverage
    0.935–0.94 instead of 0.80 at ε = 5 and 1 with nuisance_share 0.5 and
    cate.nuisance.propensity_share 0.8), at a wider interval; on a trial without a public
    propensity the output learner is narrower (benchmarks/RESULTS.md). Not with cate.ate.propensity or
    cate.nuisance.propensity_l2."""
    outcome_model: Literal["auto", "ridge", "means", "pooled", "none"] = "auto"
    """auto (default): ridge when the penalty rule keeps at least half of a covariate's effect at
    this ε and n (the dry run says which), else means. ridge: a DP ridge model per arm
    (cate.nuisance.outcome_l2); means: the two arms' DP means (Laplace; far less noise than a
    regression on a small data set); pooled: one DP mean of the outcome over both arms, used as
    μ̂₀ = μ̂₁ (one Laplace draw on all rows: the centre for residual_clip); none: μ̂ ≡ the middle
    of bounds.outcome (nothing spent). Without residual_clip the interval is valid with any of
    them when the propensity is right (double robustness); a better outcome model only narrows
    it."""
    variance: Literal["private", "bound"] = "private"
    """How the interval learns the scores' variance. private (default): a Laplace release of the
    scores' second moment, its own charged event (variance_share of the scores' ε), and the
    interval integrates that release's noise exactly. bound: the public sd_bound (costs no ε;
    the interval holds only if the bound is true)."""
    sd_bound: PositiveFinite | None = None
    """variance: bound only: a public upper bound on the standard deviation of the scores, in
    outcome units (e.g. from a previous study); never derived from this data."""
    variance_share: Share = 0.5
    """Share of the scores' ε spent on the variance release (variance: private; default 0.5)."""
    groups: list[AteGroup] = Field(default_factory=list, max_length=MAX_GROUPS)
    """Public covariate regions (at most 16) whose effects are released too, each with its
    interval; their sizes are released with noise. Groups may overlap (the noise grows with the
    largest number of groups one row can be in)."""
    groups_share: Share = 0.3
    """Share of the scores' ε spent on the groups' releases when there are groups (default 0.3)."""
    residual_clip: PositiveFinite | None = None
    """A public residual clip r in outcome units (default: none, no clip). Every Y − μ̂_a(X) in the
    doubly robust scores is clipped to [−r, r], so the scores' range — which sets both the
    estimate's Laplace noise and the private variance's — shrinks from about (outcome range)/ζ to
    about (μ̂'s range) + 2r/ζ. The price is a Huber-type bias that the interval does NOT include
    (as it does not include ζ's): the residual is measured against the *fitted* outcome model, so
    the clipped scores average to the effect only when that model is close to right AND the
    residuals beyond ±r are rare or symmetric. With the clip, a right propensity alone no longer
    makes the estimate unbiased (double robustness is lost): a far-off outcome model (the arms'
    noisy DP means at small ε, a strongly shrunk ridge) or a one-sided outcome tail biases it.
    Choose r from public knowledge, several times the residual sd you expect of a good outcome
    model (with outcome_model: pooled, several times the outcome's own sd), never from this data.
    Must be below the outcome range; refused with outcome_model: none (μ̂ is then the middle of
    the bounds, so the clip would simply truncate the outcome). On NHEFS-shaped observational
    simulations (outcome sd ≈ 8 kg, range 95) r = 24 with outcome_model: pooled,
    propensity_learner: objective, nuisance_share 0.65, variance_share 0.2,
    cate.nuisance.propensity_share 0.95 and cate.propensity_clip 0.1 covered 94.5 % at ε = 5 (1.4×
    the non-private interval's width) and 94.2 % at ε = 1 over 6,000 fresh releases each
    (configs/cate_ate_observational.yaml); the best setting with the arms' means instead (r = 28,
    ζ = 0.125, nuisance_share 0.7, propensity_share 0.8) covered 92.9 % at 1.42×; a one-sided
    outcome tail costs 2.5 points at ε = 5 (benchmarks/RESULTS.md, "A pooled DP centre")."""
    planning_sd: PositiveFinite | None = None
    """Dry run only: a guess of the scores' standard deviation (outcome units) at which the dry
    run predicts the total half-width; the release never uses it."""

    @model_validator(mode="after")
    def _consistent(self) -> AteSpec:
        if (self.variance == "bound") != (self.sd_bound is not None):
            raise ValueError("cate.ate: sd_bound goes with variance: bound (and only with it): give "
                             "both, or neither for the private variance")
        if self.propensity is not None and "propensity_learner" in self.model_fields_set:
            raise ValueError("cate.ate.propensity_learner: cate.ate.propensity is a public "
                             "constant, so no propensity model is fit; remove one of them")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError("cate.ate.groups: two groups have the same name")
        if "all" in names:
            raise ValueError("cate.ate.groups: 'all' is the name of the overall effect; rename the "
                             "group")
        return self
