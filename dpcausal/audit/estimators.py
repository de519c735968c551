"""Privacy-loss estimators: exact (gray-box) losses of output perturbation and selection, and a
black-box ε lower bound from releases on two neighbouring datasets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special, stats

from dpcausal.accounting.events import PrivacyEvent

FloatArray = npt.NDArray[np.float64]


def gaussian_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of N(0,1) vs N(μ,1) (Balle & Wang 2018, Thm 8)."""
    if mu == 0.0:
        return 0.0
    return float(special.ndtr(mu / 2 - epsilon / mu)
                 - math.exp(epsilon + special.log_ndtr(-mu / 2 - epsilon / mu)))


@dataclass(frozen=True)
class EventLoss:
    """The exact privacy loss of one mechanism between two pre-noise values."""

    stage: str
    kind: str
    shift: float
    """The observed change of the mechanism's input, in the event's norm."""
    sensitivity: float
    epsilon_loss: float
    """max over outputs of |log p_D(o) − log p_D′(o)| (pure mechanisms); for Gaussian, the ε at
    which the pair's δ(ε) equals the claimed δ."""
    delta_at_claim: float
    """δ of this pair at the claimed ε (0 for pure mechanisms within their claim)."""


def event_loss(event: PrivacyEvent, a: FloatArray, b: FloatArray) -> EventLoss:
    """Exact loss of ``event``'s mechanism between inputs ``a`` (on D) and ``b`` (on D′).

    ℓ2-Laplace: sup_o log-ratio = ‖a − b‖₂/scale (attained along the line through a and b).
    Laplace: ‖a − b‖₁/b. Exponential (a, b are utility vectors): max_k |log p_k − log p′_k| of the
    exact selection probabilities. Gaussian: the pair's privacy profile δ(ε).

    Inputs with a ``distance(other)`` method (elements of a function space, e.g. an RKHS function
    released by the Gaussian-process mechanism, whose noise is isotropic in that space): the loss is
    that of two vectors at that distance (ℓ2 mechanisms only).

    Inputs with a ``privacy_loss(other, event)`` method (mechanisms whose loss is not a function of
    a pre-noise vector, e.g. objective perturbation): their own exact loss.

    Two-dimensional ``a``, ``b`` (one row per value of an earlier released output the mechanism's
    input depends on, e.g. the value of the policy an exponential mechanism chose): the loss is the
    worst row's, as the mechanism runs on exactly one row given what was released before it.
    """
    if hasattr(a, "privacy_loss"):  # e.g. objective perturbation: no pre-noise vector exists
        return a.privacy_loss(b, event)
    if hasattr(a, "distance"):  # an element of a function space, e.g. an RKHS function
        if event.kind not in ("l2_laplace", "gaussian", "gaussian_process"):
            raise ValueError(f"a distance-only input needs an ℓ2 mechanism, not {event.kind!r}")
        return event_loss(event, np.zeros(1), np.array([float(a.distance(b))]))
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim == 2:
        if a.shape != b.shape or a.shape[0] == 0:
            raise ValueError("conditional inputs must have the same non-empty shape on D and D′")
        rows = [event_loss(event, a[i], b[i]) for i in range(a.shape[0])]
        return EventLoss(event.stage, event.kind, max(x.shift for x in rows), event.sensitivity,
                         max(x.epsilon_loss for x in rows), max(x.delta_at_claim for x in rows))
    if event.kind == "l2_laplace":
        shift = float(np.linalg.norm(a - b))
        return EventLoss(event.stage, event.kind, shift, event.sensitivity, shift / event.noise_scale,
                         0.0)
    if event.kind == "laplace":
        shift = float(np.sum(np.abs(a - b)))
        return EventLoss(event.stage, event.kind, shift, event.sensitivity, shift / event.noise_scale,
                         0.0)
    if event.kind == "exponential":
        shift = float(np.max(np.abs(a - b)))
        la = a / event.noise_scale - special.logsumexp(a / event.noise_scale)
        lb = b / event.noise_scale - special.logsumexp(b / event.noise_scale)
        return EventLoss(event.stage, event.kind, shift, event.sensitivity,
                         float(np.max(np.abs(la - lb))), 0.0)
    if event.kind in ("gaussian", "gaussian_process"):
        shift = float(np.linalg.norm(a - b))
        mu = shift / event.noise_scale
        delta_at = gaussian_delta(mu, event.epsilon)
        eps_needed = 0.0
        if gaussian_delta(mu, 0.0) > event.delta:
            lo, hi = 0.0, max(1.0, event.epsilon)
            while gaussian_delta(mu, hi) > event.delta:
                hi *= 2
            for _ in range(100):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if gaussian_delta(mu, mid) > event.delta else (lo, mid)
            eps_needed = hi
        return EventLoss(event.stage, event.kind, shift, event.sensitivity, eps_needed, delta_at)
    raise ValueError(f"no exact loss for mechanism kind {event.kind!r}")


@dataclass(frozen=True)
class LowerBound:
    """A black-box ε lower bound: the best distinguishing event and its confidence."""

    epsilon_lb: float
    confidence: float
    event: str
    p_d: float
    p_dprime: float
    trials: int


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided (1 − alpha) Clopper–Pearson interval of a binomial proportion."""
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(out_d: FloatArray, out_dp: FloatArray, *, confidence: float = 0.95,
                        rng: np.random.Generator) -> LowerBound:
    """ε lower bound from releases on D (``out_d``, one per row) and D′ (``out_dp``).

    Half of each sample chooses candidate events — half-spaces along the direction between the two
    sample means, and balls around each sample's coordinate-wise median (these catch samplers whose
    density is unbounded near the centre) — and the other half tests them. For each event E the
    bound is log(p_lo(E|D) / p_hi(E|D′)) (and the symmetric one) with Clopper–Pearson intervals
    Bonferroni-corrected over all events, so the reported bound holds at ``confidence``.
    """
    out_d = np.atleast_2d(np.asarray(out_d, dtype=np.float64).reshape(len(out_d), -1))
    out_dp = np.atleast_2d(np.asarray(out_dp, dtype=np.float64).reshape(len(out_dp), -1))
    pa, pb = rng.permutation(len(out_d)), rng.permutation(len(out_dp))
    ha, hb = len(out_d) // 2, len(out_dp) // 2
    sel_a, test_a = out_d[pa[:ha]], out_d[pa[ha:]]
    sel_b, test_b = out_dp[pb[:hb]], out_dp[pb[hb:]]
    direction = sel_a.mean(axis=0) - sel_b.mean(axis=0)
    if not np.any(direction):
        direction = np.ones(out_d.shape[1])
    scores_sel = np.concatenate([sel_a, sel_b]) @ direction
    events: list[tuple[str, FloatArray, FloatArray]] = []
    for q in (0.5, 0.75, 0.9, 0.97, 0.99):
        for side, t in (("≥", np.quantile(scores_sel, q)), ("≤", np.quantile(scores_sel, 1 - q))):
            ind_a = (test_a @ direction >= t) if side == "≥" else (test_a @ direction <= t)
            ind_b = (test_b @ direction >= t) if side == "≥" else (test_b @ direction <= t)
            events.append((f"projection {side} q{q}", ind_a, ind_b))
    for name, centre_src in (("D", sel_a), ("D'", sel_b)):
        centre = np.median(centre_src, axis=0)
        radii_sel = np.linalg.norm(centre_src - centre, axis=1)
        for q in (0.01, 0.05, 0.2):
            r = float(np.quantile(radii_sel, q))
            events.append((f"ball around median of {name}, r=q{q}",
                           np.linalg.norm(test_a - centre, axis=1) <= r,
                           np.linalg.norm(test_b - centre, axis=1) <= r))
    alpha = (1 - confidence) / (2 * len(events))
    best = LowerBound(0.0, confidence, "none", 0.0, 0.0, len(test_a) + len(test_b))
    for name, ind_a, ind_b in events:
        ka, kb = int(ind_a.sum()), int(ind_b.sum())
        a_lo, a_hi = clopper_pearson(ka, len(ind_a), alpha)
        b_lo, b_hi = clopper_pearson(kb, len(ind_b), alpha)
        lb = max(math.log(a_lo / b_hi) if a_lo > 0 else 0.0,
                 math.log(b_lo / a_hi) if b_lo > 0 else 0.0)
        if lb > best.epsilon_lb:
            best = LowerBound(lb, confidence, name, ka / len(ind_a), kb / len(ind_b),
                              len(ind_a) + len(ind_b))
    return best
