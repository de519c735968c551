"""How sure a select-policy release is (DESIGN principle 9), from public inputs alone.

- **The choice** (headline, ``value_gap``): the exponential mechanism releases a policy whose DR
  value is, with probability at least 1 − α, within t = (2Δ/(nε))·ln((M − 1)(1 − α)/α) of the
  best DR value in the library (:func:`dpcausal.mechanisms.noise_law.exponential_utility_gap`
  over the utilities U = nV̂, divided by n): a bound over every utility vector, exact when the
  other M − 1 policies sit just below max V̂ − t. In outcome units (score units for regime fixed).
- **The value** (``value_release``): V̂(π̂) + Laplace(Δ/(nε₂)): the (1 − α) noise interval
  ±(Δ/(nε₂))·ln(1/α), exact; the estimand (a mean outcome) lies in the outcome bounds, so the
  released value is clamped to them (:mod:`dpcausal.intervals`).
- **Shrinkage** (dry run): the nuisance fits' kept share of a covariate's effect under the
  uniform-box proxy (:mod:`dpcausal.commands.select_policy.penalty`), with a warning when both
  are below one half — the DR utilities may then be biased whatever ε is.

All of it is post-processing of public parameters: no ε.
"""

from __future__ import annotations

from typing import Any

from dpcausal.accounting.plan import PredictedAccuracy
from dpcausal.commands.select_policy.penalty import (
    CURVATURE_E,
    CURVATURE_MU,
    kept_share,
    value_gap,
)
from dpcausal.commands.select_policy.setup import NuisanceInputs, Setup
from dpcausal.intervals import interval_record
from dpcausal.mechanisms.noise_law import laplace_halfwidth

KEPT_WARN = 0.5
"""Below this kept share (both nuisances) the dry run warns about shrinkage."""


def units(setup: Setup) -> str:
    """The units of the value (and of its gap)."""
    return ("score units (regime fixed)" if setup.regime == "fixed" else "outcome units")


def gap_law(setup: Setup, epsilon: float) -> str:
    """The law the gap comes from, in words with its public parameters."""
    return (f"exponential mechanism, Gumbel scale 2Δ/ε = {2 * setup.utility_sensitivity / epsilon:.4g}"
            f" over M = {setup.library.size} policies, /n = {setup.n}")


def predicted(setup: Setup, *, epsilon: float, alpha: float,
              value_epsilon: float | None) -> tuple[PredictedAccuracy, ...]:
    """The plan's predicted accuracies: the value gap (headline) and the released value."""
    ruled = setup.penalty is not None
    note = "a smaller library, more scoring rows, wider ζ or narrower outcome bounds narrow it"
    if ruled:
        note += ("; the total-error rule re-picks λ_μ, λ_e at each ε and n (less shrinkage for "
                 "more noise), so the gap is not monotone in them: a planned ε meets the target "
                 "but need not be the smallest; fix lambda_mu and lambda_e to plan at them")
    out = [PredictedAccuracy(
        "value_gap", f"{units(setup)}: the chosen policy's DR value below the library's best",
        value_gap(setup.utility_sensitivity, setup.n, epsilon, setup.library.size, alpha),
        alpha, "noise", gap_law(setup, epsilon), bound=True, headline=True,
        n_search=not ruled, note=note)]
    if value_epsilon is not None:
        scale = setup.utility_sensitivity / setup.n / value_epsilon
        out.append(PredictedAccuracy("value", f"{units(setup)}: the released DR value",
                                     laplace_halfwidth(scale, alpha), alpha, "noise",
                                     f"Laplace(b={scale:.4g})", n_search=not ruled))
    return tuple(out)


def gap_record(setup: Setup, *, epsilon: float, alpha: float) -> dict[str, Any]:
    """selection.json's statement of how sure the choice is."""
    t = value_gap(setup.utility_sensitivity, setup.n, epsilon, setup.library.size, alpha)
    return {"value_gap": t, "level": 1.0 - alpha, "kind": "noise", "bound": True,
            "units": units(setup), "law": gap_law(setup, epsilon),
            "statement": (f"in at least {100 * (1 - alpha):g}% of runs the chosen policy's DR "
                          f"value is within {t:.4g} of the best DR value in the library (over the "
                          "privacy noise; the DR values themselves carry sampling error)")}


def value_record(setup: Setup, value: float, *, epsilon: float, alpha: float) -> dict[str, Any]:
    """The released value (on the outcome's own scale: ``sign`` applied) as {estimate, interval,
    clamped} (the interval convention): clamped to the declared outcome bounds (the estimand, a
    mean outcome, lies there), or to [−B, B] in regime fixed (a mean of clipped scores)."""
    scale = setup.utility_sensitivity / setup.n / epsilon
    return interval_record(value, laplace_halfwidth(scale, alpha), alpha=alpha,
                           law=f"Laplace(b={scale:.4g})", bounds=value_bounds(setup))


def value_bounds(setup: Setup) -> tuple[float, float]:
    """The public range of a policy's value on the outcome's own scale: the declared outcome
    bounds, or [−B, B] in regime fixed."""
    inputs = setup.inputs
    if isinstance(inputs, NuisanceInputs):  # y_bounds are on the signed scale: undo the sign
        lo, hi = sorted((inputs.sign * inputs.y_bounds[0], inputs.sign * inputs.y_bounds[1]))
        return float(lo), float(hi)
    return -float(inputs.bound), float(inputs.bound)


def shrinkage(setup: Setup) -> dict[str, Any]:
    """The dry run's shrinkage statement for the learned regime (empty otherwise)."""
    if setup.nuisances is None:
        return {}
    lam_mu, lam_e = setup.nuisances.ridge.lam, setup.nuisances.logistic.lam
    k_mu, k_e = kept_share(lam_mu, CURVATURE_MU), kept_share(lam_e, CURVATURE_E)
    out: dict[str, Any] = {"lambda_mu": lam_mu, "lambda_e": lam_e,
                           "outcome_model_keeps": k_mu, "propensity_model_keeps": k_e,
                           "propensity_clip": setup.nuisances.zeta,
                           "outcome_model_clip": list(setup.nuisances.mu_bounds)}
    if max(k_mu, k_e) < KEPT_WARN:
        out["warning"] = (
            f"shrinkage: λ_μ = {lam_mu:.3g} and λ_e = {lam_e:.3g} keep only "
            f"{100 * k_mu:.2g}% and {100 * k_e:.2g}% of a covariate's effect "
            "(covariates uniform on their box; less if they fill less of it): the outcome and "
            "propensity models are both close to flat, so the DR utilities can be biased at any ε; "
            "a larger ε lets the total-error rule pick smaller penalties")
    return out
