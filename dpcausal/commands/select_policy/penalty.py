"""select-policy's nuisance learners at given penalties, and the public total-error rule that picks
the penalties when the spec leaves them to it (``lambda_mu: total``, ``lambda_e: total``).

**The learners' effective ranges** (public, from λ alone). Every computed outcome model has
‖θ_a‖ ≤ h/√λ_μ + E (the ridge's norm ball plus its public solve error), so μ̂_a(x) − c lies in
±R_x(h/√λ_μ + E); every accepted logistic fit has ‖θ‖ ≤ √(2 ln 2/λ_e) + D (the minimiser's ball
plus the certificate's distance), so σ(θᵀx̃) lies in [σ(−L), σ(L)], L = R_x(√(2 ln 2/λ_e) + D).
With ``effective_bounds: true`` (default) μ̂ is clipped to the spec's μ-range intersected with
c ± R_x(h/√λ_μ + E), and ê to [ζ′, 1 − ζ′] with ζ′ = max(ζ, σ(−L)): the clips do not bind (the
predictions already lie there, up to rounding), so the fit is the same, while B_ψ, R_{Y,μ} and ρ*
— computed from the narrower public ranges — shrink: a heavily penalised propensity is clipped
near ½ and its 1/ζ² leaves Δ. Any public clip range keeps the certificate valid (Lemma 2 needs
only ê ≥ ζ′ and μ̂ in the μ-range; clipping is 1-Lipschitz), so this is a calibration choice, not
an assumption about the data.

**The total-error rule.** A penalty λ trades the exponential mechanism's noise (Δ_cert falls like
1/(mλ) until it reaches the floor 2B_ψ) against the shrinkage of the nuisance fits, which biases
the doubly robust utilities only when *both* nuisances are shrunk (the DR remainder is a product).
So (λ_μ, λ_e) minimise, over a log grid of the penalties the float64 solves can guarantee,

    t(λ_μ, λ_e) + h_V(λ_μ, λ_e) + S·(1 − k_μ)(1 − k_e),

t the (1 − α) utility gap of the plan (the chosen policy's DR value is within t of the best
policy's with probability ≥ 1 − α: the headline accuracy, in outcome units), h_V the (1 − α)
Laplace half-width of the value release when the spec asks for one (0 otherwise: Δ/n is its
sensitivity too, so a penalty good for the choice at a large ε can swamp the value), S = (y_hi − y_lo)/4
(the size of one covariate's effect across its bounds, a quarter of the outcome range), and
k = I/(I + λ) the share of a covariate's effect a fit keeps under the uniform-box proxy of its
curvature (I_μ = ½·⅓: an arm's share times E x̃_j² for x̃_j uniform on [−1, 1]; I_e = ¼·⅓: the
logistic's σ′ ≤ ¼). Everything is relative to the public bounds, n, m, d, M and ε: rescaling the
outcome (kg ↔ g) rescales t and S alike and leaves the penalties, hence the release's law,
unchanged. As ε → ∞, t vanishes and the penalties go to the smallest guaranteed values (the
non-private AIPW limit); at small ε they stop where Δ reaches its floor. Data concentrated in the
middle of their box have less curvature than the proxy, so the kept shares the dry run reports are
a best case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dpcausal.accounting.events import MAX_NOISE_SCALE
from dpcausal.learners import (
    CertifiedLogistic,
    CertifiedRidge,
    SpilloverCertificate,
    certify_spillover,
)
from dpcausal.mechanisms.noise_law import exponential_utility_gap, laplace_halfwidth
from dpcausal.numerics import expit

GRID = tuple(float(v) for v in 10.0 ** np.arange(-4.0, 3.001, 0.25))
"""The candidate penalties of the total-error rule: 10⁻⁴ to 10³ in steps of 10^¼."""
CURVATURE_MU = 0.5 / 3.0
"""I_μ: an arm's share (½) times E x̃_j² (⅓) for a covariate uniform on its box."""
CURVATURE_E = 0.25 / 3.0
"""I_e: the logistic's σ′ ≤ ¼ times E x̃_j² (⅓)."""
EFFECT_SHARE = 0.25
"""S = this share of the outcome range: the size of one covariate's effect across its bounds."""


@dataclass(frozen=True)
class Nuisances:
    """The certified learners at one pair of penalties, with their (effective) clip ranges and
    the spillover certificate they give."""

    ridge: CertifiedRidge
    logistic: CertifiedLogistic
    zeta: float
    """ζ′: ê is clipped to [ζ′, 1 − ζ′] (≥ the spec's ζ)."""
    mu_bounds: tuple[float, float]
    """The range μ̂ is clipped to (within the spec's μ-range)."""
    certificate: SpilloverCertificate


@dataclass(frozen=True)
class PenaltyInputs:
    """The public inputs of the learners and of the rule."""

    zeta: float
    y_bounds: tuple[float, float]
    mu_bounds: tuple[float, float]
    d: int
    m: int
    n: int
    tol: float
    certificate: Literal["erm", "trivial"]
    effective: bool


def effective_ranges(ridge: CertifiedRidge, logistic: CertifiedLogistic, p: PenaltyInputs
                     ) -> tuple[float, tuple[float, float]]:
    """(ζ′, μ-range): the public ranges the fits' predictions lie in (module docstring)."""
    if not p.effective:
        return p.zeta, p.mu_bounds
    rx = math.sqrt(p.d + 1)
    reach = rx * (ridge.half_range / math.sqrt(ridge.lam) + ridge.solve_error(p.d))
    lo, hi = max(p.mu_bounds[0], ridge.center - reach), min(p.mu_bounds[1], ridge.center + reach)
    mu = (lo, hi) if lo < hi else p.mu_bounds
    acc = logistic.accuracy(p.m, p.d)
    logit = rx * (math.sqrt(2.0 * math.log(2.0) / logistic.lam) + acc.distance)
    zeta = min(0.5, max(p.zeta, expit(-logit)))
    return zeta, mu


def nuisances(lam_mu: float, lam_e: float, p: PenaltyInputs) -> Nuisances | tuple[str, str]:
    """The learners at (λ_μ, λ_e) and their certificate, or (field, why) when a float64 solve
    cannot be guaranteed at these public settings."""
    ridge0 = CertifiedRidge(lam_mu, p.y_bounds, p.mu_bounds, p.tol)
    logistic0 = CertifiedLogistic(lam_e, p.zeta, p.tol)
    for field, problem in (("lambda_mu", ridge0.problem(p.d)),
                           ("lambda_e", logistic0.problem(p.m, p.d))):
        if problem is not None:
            return field, problem
    zeta, mu = effective_ranges(ridge0, logistic0, p)
    ridge = CertifiedRidge(lam_mu, p.y_bounds, mu, p.tol)
    logistic = CertifiedLogistic(lam_e, zeta, p.tol)
    if p.certificate == "erm":
        # the trivial bounds hold too (every prediction lies in its clip range)
        beta_mu = min(ridge.beta(p.m, p.d), mu[1] - mu[0])
        beta_e = min(logistic.beta(p.m, p.d), 1.0 - 2.0 * zeta)
    else:
        beta_mu, beta_e = mu[1] - mu[0], 1.0 - 2.0 * zeta
    cert = certify_spillover(d=p.d, m=p.m, n=p.n, zeta=zeta, y_bounds=p.y_bounds, mu_bounds=mu,
                             beta_mu=beta_mu, beta_e=beta_e, certificate_type=p.certificate)
    return Nuisances(ridge, logistic, zeta, mu, cert)


def value_gap(delta: float, n: int, epsilon: float, library_size: int, alpha: float) -> float:
    """t in outcome units: P(V̂(chosen) ≥ max V̂ − t) ≥ 1 − α for the exponential mechanism at
    sensitivity Δ over M policies (utilities U = nV̂, Gumbel scale 2Δ/ε)."""
    return exponential_utility_gap(2.0 * delta / epsilon, library_size, alpha) / n


def kept_share(lam: float, curvature: float) -> float:
    """I/(I + λ): the share of a covariate's effect a ridge-type fit keeps (uniform-box proxy)."""
    return curvature / (curvature + lam)


@dataclass(frozen=True)
class PenaltyChoice:
    """The penalties the rule chose, and the public proxies it chose them by."""

    lambda_mu: float
    lambda_e: float
    value_gap: float
    value_halfwidth: float | None
    """h_V, when the spec releases the value."""
    shrinkage_bias: float
    kept_mu: float
    kept_e: float
    rule: str

    def to_dict(self) -> dict[str, Any]:
        """The plan's record of the choice."""
        return {"lambda_mu": self.lambda_mu, "lambda_e": self.lambda_e,
                "predicted_value_gap": self.value_gap,
                **({} if self.value_halfwidth is None
                   else {"predicted_value_halfwidth": self.value_halfwidth}),
                "shrinkage_bias_proxy": self.shrinkage_bias,
                "kept_share_outcome": self.kept_mu, "kept_share_propensity": self.kept_e,
                "rule": self.rule}


RULE = ("argmin over a log grid of (λ_μ, λ_e) of t + h_V + S·(1 − k_μ)(1 − k_e): t the plan's "
        "(1 − α) value gap, h_V the value release's (1 − α) half-width (0 without one), "
        "S = (outcome range)/4, k = I/(I + λ) with I_μ = 1/6, I_e = 1/12 (covariates uniform on "
        "their box)")


def choose_penalties(p: PenaltyInputs, *, epsilon: float, library_size: int, alpha: float,
                     lambda_mu: float | None, lambda_e: float | None,
                     value_epsilon: float | None = None) -> PenaltyChoice:
    """The total-error rule (module docstring); a penalty given as a number is kept fixed;
    ``value_epsilon``: the value release's ε (None: no value release).

    Raises
    ------
    ValueError
        No candidate pair can be solved with a guarantee (then a fixed penalty is too small) or
        every candidate's Gumbel scale is beyond float64 (ε too small).
    """
    scale = EFFECT_SHARE * (p.y_bounds[1] - p.y_bounds[0])
    mus = (lambda_mu,) if lambda_mu is not None else GRID
    es = (lambda_e,) if lambda_e is not None else GRID
    best: tuple[float, PenaltyChoice] | None = None
    for lm in mus:
        km = kept_share(lm, CURVATURE_MU)
        for le in es:
            fit = nuisances(lm, le, p)
            if not isinstance(fit, Nuisances):
                continue
            delta = fit.certificate.delta_cert
            if not 2.0 * delta / min(epsilon, value_epsilon or epsilon) <= MAX_NOISE_SCALE:
                continue  # beyond float64 (the plan names ε as the cause)
            ke = kept_share(le, CURVATURE_E)
            t = value_gap(delta, p.n, epsilon, library_size, alpha)
            h_v = (None if value_epsilon is None
                   else laplace_halfwidth(delta / p.n / value_epsilon, alpha))
            bias = scale * (1.0 - km) * (1.0 - ke)
            total = t + (h_v or 0.0) + bias
            if best is None or total < best[0]:
                best = (total, PenaltyChoice(lm, le, t, h_v, bias, km, ke, RULE))
    if best is None:
        raise ValueError("no penalty on the grid can be solved with a guarantee")
    return best[1]
