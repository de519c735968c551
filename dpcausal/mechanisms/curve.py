"""The privacy curve of one mechanism at one shift: δ(ε), ε(δ), and its privacy loss distribution.

A mechanism whose input moves by ``shift`` (in its norm) between two neighbouring datasets is, for
privacy, a pair of output distributions. Every mechanism here is dominated by one of four pairs,
each fixed by one number:

- ``laplace`` — Lap(0, 1) vs Lap(a, 1), a = shift/b. For a vector with ℓ1 shift the one-coordinate
  pair is the worst case (the convention of dp-accounting's ``LaplaceDpEvent``; checked on a grid
  by the tests).
- ``gaussian`` — N(0, 1) vs N(μ, 1), μ = shift/σ (any dimension: the noise is isotropic, so only
  the ℓ2 length of the shift matters; Balle & Wang 2018, Thm 8).
- ``pure`` — the worst case of all ε-DP mechanisms (randomized response with loss ±ε; Kairouz, Oh &
  Viswanath 2015): used where no tighter exact curve is known (ℓ2-Laplace, exponential mechanism).
- ``claim`` — the worst case of all (ε, δ)-DP mechanisms (loss +∞ with probability δ, else ±ε):
  used for a release whose privacy follows from its own proof rather than from its noise alone
  (objective perturbation, caller-calibrated or uncertified releases).

:meth:`PrivacyCurve.pld` builds the pessimistic privacy loss distribution of the pair with Google's
``dp-accounting`` under its ``ADD_OR_REMOVE_ONE`` convention, whose pair is exactly the one above
(shift = the sensitivity as given). Its ``REPLACE_ONE`` convention would double the shift (a release
calibrated to ε = 1 would read as ε ≈ 2.1): never use it here, our sensitivities are already the
largest change between the neighbours of the caller's relation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Family = Literal["laplace", "gaussian", "pure", "claim"]

PLD_INTERVAL = 1e-4
"""Default discretisation interval of privacy loss distributions (dp-accounting's default)."""


def gaussian_delta(mu: float, epsilon: float, mu_rel_error: float = 0.0) -> float:
    """δ(ε) of N(0, 1) vs N(μ, 1): Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) (Balle & Wang 2018, Thm 8),
    rounded *up*: an upper bound on the exact value, never below it.

    Parameters
    ----------
    mu, epsilon
        The pair's μ = shift/σ and the ε at which δ is wanted.
    mu_rel_error
        A bound on the relative error of ``mu`` when it was itself rounded (Δ/σ: one division,
        u = 2⁻⁵³): the bound then holds for the exact μ.

    Notes
    -----
    Privacy-critical: the analytic Gaussian σ (:func:`dpcausal.mechanisms.gaussian.
    analytic_gaussian_sigma`) is the smallest σ with this value ≤ δ, and verification recomputes
    ε from it. Each term is computed in plain floats (:mod:`dpcausal.mechanisms.normal`, no scipy
    on the plan path, issue 24) together with a bound on its error: a = μ/2 − ε/μ and b = −μ/2 −
    ε/μ err by ≤ s·(r_μ + 3u) with s = μ/2 + ε/μ; ln Φ moves by at most (|x| + 2) per unit of its
    argument (φ(x)/Φ(x) ≤ |x| + 1, the Mills-ratio bound); p = Φ(a) and q = e^ε Φ(b) (formed in
    logs: no overflow of e^ε) get a relative error bound r_p and an absolute bound e_q on ln q, and
    p(1 + r_p) − min(1, e^{ln q − e_q})(1 − 2u) plus the rounding of these last operations (4u·p)
    is ≥ the exact δ (q ≤ p ≤ 1 exactly, so capping the lower bound of q at 1 only raises it).
    The bounds add ~1e-15 to ~1e-13 of p: against ``scipy.special`` (``ndtr``, ``log_ndtr``)
    the value is never lower, and larger by ~1e-13 of p at most (tested on a wide grid).
    """
    from dpcausal.mechanisms import normal

    if mu <= 0.0:
        return 0.0
    u = normal.UNIT
    s = mu / 2 + epsilon / mu
    arg_err = s * (mu_rel_error + 3.0 * u) * (1.0 + 4.0 * u)
    a = mu / 2 - epsilon / mu
    b = -mu / 2 - epsilon / mu
    p = normal.ndtr(a)
    r_p = 2.0 * (normal.ndtr_rel_error(a) + (abs(a) + 2.0) * arg_err)
    log_q = epsilon + normal.log_ndtr(b)
    q_log_err = normal.log_ndtr_abs_error(b) + (abs(b) + 2.0) * arg_err + u * abs(log_q)
    # a lower bound on q, capped at 1 (q ≤ p ≤ 1 exactly): no overflow when ε is huge and the
    # rounding of ε + ln Φ(b) dwarfs their difference (then q_low ≈ 0 and the bound is ≈ p)
    q_low = math.exp(min(0.0, log_q - q_log_err)) * (1.0 - 2.0 * u)
    upper = p * (1.0 + r_p) - q_low + 4.0 * u * p
    return min(1.0, max(0.0, upper))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest ε ≥ 0 with :func:`gaussian_delta` (μ, ε) ≤ δ (bisection, rounded up)."""
    if delta <= 0.0:
        return math.inf if mu > 0.0 else 0.0
    if gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(mu, hi) > delta:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gaussian_delta(mu, mid) > delta else (lo, mid)
        if hi - lo <= 1e-15 * hi:
            break
    return hi


def _pure_delta(epsilon: float, at: float) -> float:
    """δ(at) of randomized response with loss ±ε."""
    if at >= epsilon:
        return 0.0
    return -math.expm1(at - epsilon) / (1.0 + math.exp(-epsilon))


@dataclass(frozen=True, slots=True)
class PrivacyCurve:
    """The privacy profile of one release between two neighbouring inputs.

    Parameters
    ----------
    family
        Which dominating pair (module docstring).
    loss
        ``laplace``: a = shift/b; ``gaussian``: μ = shift/σ; ``pure``/``claim``: ε.
    claim_delta
        ``claim`` only: the stated δ (the probability of an unbounded loss).
    """

    family: Family
    loss: float
    claim_delta: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.loss) and self.loss >= 0.0):
            raise ValueError(f"a privacy curve needs a finite loss >= 0, got {self.loss!r}")
        if not 0.0 <= self.claim_delta < 1.0 or (self.claim_delta and self.family != "claim"):
            raise ValueError(f"claim_delta must be in [0, 1) and only for 'claim', got "
                             f"{self.claim_delta!r}")

    def delta(self, epsilon: float) -> float:
        """The smallest δ for which the release is (``epsilon``, δ)-DP."""
        if self.family == "gaussian":
            return gaussian_delta(self.loss, epsilon)
        if self.family == "laplace":
            return 0.0 if epsilon >= self.loss else 1.0 - math.exp((epsilon - self.loss) / 2.0)
        pure = _pure_delta(self.loss, epsilon)
        return self.claim_delta + (1.0 - self.claim_delta) * pure

    def epsilon(self, delta: float) -> float:
        """The smallest ε ≥ 0 for which the release is (ε, ``delta``)-DP (``inf`` if none)."""
        if self.family == "gaussian":
            return gaussian_epsilon(self.loss, delta)
        if delta < self.claim_delta:
            return math.inf
        if delta >= 1.0:
            return 0.0
        if self.family == "laplace":
            eps = self.loss + 2.0 * math.log1p(-delta)
        else:  # randomized response ±ε, after the claim's δ of unbounded loss
            rest = (delta - self.claim_delta) / (1.0 - self.claim_delta)
            left = 1.0 - rest * (1.0 + math.exp(-self.loss))
            eps = self.loss + math.log(left) if left > 0.0 else 0.0
        return min(self.loss, max(0.0, eps))

    def pld(self, interval: float = PLD_INTERVAL) -> Any:
        """The pessimistic privacy loss distribution of the pair (dp-accounting, connect-the-dots).

        Losses are rounded *up* to multiples of ``interval``; a composition of such PLDs
        over-estimates δ(ε), never under-estimates it.
        """
        # imported here: dp-accounting takes ~1 s to import and only `pld` ledgers need it
        from dp_accounting.pld import common
        from dp_accounting.pld import privacy_loss_distribution as pld

        if self.loss == 0.0 and self.claim_delta == 0.0:
            return pld.identity(interval)
        if self.family == "gaussian":
            return pld.from_gaussian_mechanism(1.0, sensitivity=self.loss,
                                               value_discretization_interval=interval)
        if self.family == "laplace":
            return pld.from_laplace_mechanism(1.0, sensitivity=self.loss,
                                              value_discretization_interval=interval)
        params = common.DifferentialPrivacyParameters(self.loss, self.claim_delta)
        return pld.from_privacy_parameters(params, value_discretization_interval=interval)


def loss_ratio(shift: float, noise_scale: float) -> float:
    """shift / scale, with 0 for no shift; a shift without noise has no finite loss (ValueError)."""
    if not (math.isfinite(shift) and shift >= 0.0):
        raise ValueError(f"a shift must be finite and >= 0, got {shift!r}")
    if shift == 0.0:
        return 0.0
    if not (math.isfinite(noise_scale) and noise_scale > 0.0):
        raise ValueError(f"noise scale {noise_scale!r} cannot hide a shift of {shift!r}")
    return shift / noise_scale
