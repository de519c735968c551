"""Privacy-loss estimators: exact (gray-box) losses of output perturbation and selection, and a
black-box ε lower bound from releases on two neighbouring datasets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.mechanisms.exponential import ExponentialMechanism
from dpcausal.mechanisms.registry import privacy_loss
from dpcausal.mechanisms.subset_exponential import (
    SubsetExponentialMechanism,
    SubsetSelectionFamily,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class EventLoss:
    """The exact privacy loss of one mechanism between two pre-noise values."""

    stage: str
    kind: str
    shift: float
    """The observed change of the mechanism's input, in the event's norm."""
    sensitivity: float
    epsilon_loss: float
    """The smallest ε at which the pair is (ε, claimed δ)-DP: max over outputs of
    |log p_D(o) − log p_D′(o)| for pure mechanisms (claimed δ = 0)."""
    delta_at_claim: float
    """δ of this pair at the claimed ε (0 for a pure mechanism within its claim)."""


def event_loss(event: PrivacyEvent, a: FloatArray, b: FloatArray) -> EventLoss:
    """Exact loss of ``event``'s mechanism between inputs ``a`` (on D) and ``b`` (on D′).

    The loss is the mechanism's own privacy map at the observed shift
    (:func:`dpcausal.mechanisms.registry.privacy_loss`): ℓ2-Laplace ‖a − b‖₂/scale (attained along
    the line through a and b), Laplace ‖a − b‖₁/b, Gaussian and Gaussian process the ε at which the
    pair's privacy profile δ(ε) meets the claimed δ. Exponential (a, b are utility vectors): the
    exact max_k |log p_k − log p′_k| of the selection probabilities. Subset exponential (a, b are
    the items' utilities): the exact max over k-subsets, from the two partition functions. Subset
    family (a, b hold one utility row per selection): the exact max of the summed log-ratios.

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
    if event.kind == "subset_family":  # one utility row per selection (not conditional rows)
        shift = float(np.max(np.abs(a - b)))
        loss = SubsetSelectionFamily.family_loss(event.noise_scale, int(event.params["k"]), a, b)
        return EventLoss(event.stage, event.kind, shift, event.sensitivity, loss, 0.0)
    if a.ndim == 2:
        if a.shape != b.shape or a.shape[0] == 0:
            raise ValueError("conditional inputs must have the same non-empty shape on D and D′")
        rows = [event_loss(event, a[i], b[i]) for i in range(a.shape[0])]
        return EventLoss(event.stage, event.kind, max(x.shift for x in rows), event.sensitivity,
                         max(x.epsilon_loss for x in rows), max(x.delta_at_claim for x in rows))
    if event.kind == "exponential":
        shift = float(np.max(np.abs(a - b)))
        loss = ExponentialMechanism.selection_loss(event.noise_scale, a, b)
        return EventLoss(event.stage, event.kind, shift, event.sensitivity, loss, 0.0)
    if event.kind == "subset_exponential":
        shift = float(np.max(np.abs(a - b)))
        loss = SubsetExponentialMechanism.selection_loss(event.noise_scale,
                                                         int(event.params["k"]), a, b)
        return EventLoss(event.stage, event.kind, shift, event.sensitivity, loss, 0.0)
    diff = a - b
    shift = float(np.sum(np.abs(diff)) if event.norm == "l1" else np.linalg.norm(diff))
    curve = privacy_loss(event, shift)  # the mechanism's own privacy map (by event kind)
    return EventLoss(event.stage, event.kind, shift, event.sensitivity,
                     curve.epsilon(event.delta), curve.delta(event.epsilon))


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
    """Two-sided (1 − alpha) Clopper–Pearson interval of a binomial proportion (its Beta
    quantiles by the inverse regularised incomplete beta, as ``scipy.stats.beta.ppf`` computes
    them, without importing scipy.stats)."""
    lo = 0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, alpha / 2))
    hi = 1.0 if k == n else float(special.betaincinv(k + 1, n - k, 1 - alpha / 2))
    return lo, hi


def ratio_bound(ka: int, na: int, kb: int, nb: int, alpha: float, delta: float = 0.0) -> float:
    """ε lower bound of one event seen ``ka`` of ``na`` times on D and ``kb`` of ``nb`` on D′.

    (ε, δ)-DP says P(E|D) ≤ e^ε P(E|D′) + δ both ways, so ε ≥ log((p_lo(D) − δ)/p_hi(D′)) (and
    the symmetric bound) whenever the numerator is positive; each interval is at level ``alpha``.
    """
    a_lo, a_hi = clopper_pearson(ka, na, alpha)
    b_lo, b_hi = clopper_pearson(kb, nb, alpha)
    return max(math.log((a_lo - delta) / b_hi) if a_lo > delta else 0.0,
               math.log((b_lo - delta) / a_hi) if b_lo > delta else 0.0, 0.0)


def max_attainable(n_test: int, n_events: int, *, confidence: float = 0.95, share: float = 1.0,
                   delta: float = 0.0) -> float:
    """The largest ε lower bound ``n_test`` releases per side can give: an event seen in a fraction
    ``share`` of one side's releases and never on the other (``share=1``: the absolute ceiling)."""
    alpha = (1 - confidence) / (2 * n_events)
    return ratio_bound(max(1, round(share * n_test)), n_test, 0, n_test, alpha, delta)


def releases_needed(epsilon: float, n_events: int, *, confidence: float = 0.95,
                    share: float = 0.5, margin: float = 1.0, delta: float = 0.0) -> int:
    """The fewest test releases per side for which an event of probability ``share`` on one side
    and 0 on the other gives a bound ≥ ε + ``margin`` (so the test can reach past the claim)."""
    target = epsilon + margin
    lo, hi = 1, 2
    while max_attainable(hi, n_events, confidence=confidence, share=share, delta=delta) < target:
        lo, hi = hi, 2 * hi
        if hi > 2**40:
            return hi
    while hi - lo > max(1, lo // 100):  # 1 % is close enough
        mid = (lo + hi) // 2
        ok = max_attainable(mid, n_events, confidence=confidence, share=share, delta=delta) >= target
        lo, hi = (lo, mid) if ok else (mid, hi)
    return hi


@dataclass(frozen=True)
class Event:
    """A candidate distinguishing event: a named indicator over rows of releases."""

    name: str
    kind: str
    direction: FloatArray | None = None
    threshold: float = 0.0
    centre: FloatArray | None = None
    radius: float = 0.0

    def contains(self, x: FloatArray) -> npt.NDArray[np.bool_]:
        """Which releases (rows of ``x``) fall in the event."""
        return self.hits(self.statistic(x))

    def statistic(self, x: FloatArray) -> FloatArray:
        """The projection (half-spaces), the distance to the centre (balls), or 0/1 (singletons)."""
        if self.kind in ("≥", "≤"):
            assert self.direction is not None
            return np.asarray(x @ self.direction, dtype=np.float64)
        assert self.centre is not None
        if self.kind == "ball":
            return np.asarray(np.linalg.norm(x - self.centre, axis=1), dtype=np.float64)
        return np.asarray(np.all(x == self.centre, axis=1), dtype=np.float64)

    def hits(self, stat: FloatArray) -> npt.NDArray[np.bool_]:
        """Membership from :meth:`statistic`."""
        if self.kind == "≥":
            return np.asarray(stat >= self.threshold)
        if self.kind == "≤":
            return np.asarray(stat <= self.threshold)
        if self.kind == "ball":
            return np.asarray(stat <= self.radius)
        return np.asarray(stat > 0.5)


PROJECTION_QUANTILES = (0.5, 0.75, 0.9, 0.97, 0.99)
BALL_QUANTILES = (0.01, 0.05, 0.2, 0.5)
MAX_SINGLETONS = 32
N_EVENTS = 2 * len(PROJECTION_QUANTILES) + 2 * len(BALL_QUANTILES)
"""Events of continuous releases (a discrete release may add up to MAX_SINGLETONS singletons)."""


def candidate_events(sel_a: FloatArray, sel_b: FloatArray) -> list[Event]:
    """Events chosen on a selection sample (never the one they are tested on).

    Half-spaces along the direction between the two sample means at several quantiles; balls
    around each sample's coordinate-wise median (these catch samplers whose density is unbounded
    near the centre, e.g. an ℓ2-Laplace with a 1-D radius law); and, for a release that takes few
    values (a selection), each value seen.
    """
    direction = sel_a.mean(axis=0) - sel_b.mean(axis=0)
    if not np.any(direction):
        direction = np.ones(sel_a.shape[1])
    scores = np.concatenate([sel_a, sel_b]) @ direction
    events: list[Event] = []
    for q in PROJECTION_QUANTILES:
        events.append(Event(f"projection ≥ q{q}", "≥", direction, float(np.quantile(scores, q))))
        events.append(Event(f"projection ≤ q{1 - q:.2g}", "≤", direction,
                            float(np.quantile(scores, 1 - q))))
    for name, src in (("D", sel_a), ("D'", sel_b)):
        centre = np.median(src, axis=0)
        radii = np.linalg.norm(src - centre, axis=1)
        for q in BALL_QUANTILES:
            events.append(Event(f"ball around median of {name}, r=q{q}", "ball", centre=centre,
                                radius=float(np.quantile(radii, q))))
    pooled = np.concatenate([sel_a, sel_b])
    if len(np.unique(pooled[:4 * MAX_SINGLETONS], axis=0)) <= MAX_SINGLETONS:  # cheap pre-check
        values = np.unique(pooled, axis=0)
        if len(values) <= MAX_SINGLETONS:
            events += [Event(f"release = {v.tolist()}", "=", centre=v) for v in values]
    return events


def count_in(events: list[Event], x: FloatArray) -> npt.NDArray[np.int64]:
    """How many rows of ``x`` fall in each event (each projection and distance computed once)."""
    cache: dict[tuple[str, int], FloatArray] = {}
    counts = np.zeros(len(events), dtype=np.int64)
    for i, ev in enumerate(events):
        key = ("p", id(ev.direction)) if ev.kind in ("≥", "≤") else (ev.kind, id(ev.centre))
        if key not in cache:
            cache[key] = ev.statistic(x)
        counts[i] = int(np.count_nonzero(ev.hits(cache[key])))
    return counts


def best_bound(events: list[Event], ka: npt.NDArray[np.int64], kb: npt.NDArray[np.int64],
               na: int, nb: int, *, confidence: float, delta: float = 0.0) -> LowerBound:
    """The largest Bonferroni-corrected bound over ``events`` from their counts on each side."""
    alpha = (1 - confidence) / (2 * len(events))
    best = LowerBound(0.0, confidence, "none", 0.0, 0.0, na + nb)
    for ev, a, b in zip(events, ka, kb, strict=True):
        lb = ratio_bound(int(a), na, int(b), nb, alpha, delta)
        if lb > best.epsilon_lb:
            best = LowerBound(lb, confidence, ev.name, int(a) / na, int(b) / nb, na + nb)
    return best


def streamed_lower_bound(draw_d: Callable[[int, int], FloatArray],
                         draw_dp: Callable[[int, int], FloatArray], *, n_select: int,
                         n_test: int, chunk: int, confidence: float = 0.95,
                         delta: float = 0.0) -> LowerBound:
    """ε lower bound from releases drawn in chunks: ``draw_d(count, part)`` returns ``count``
    releases on D (one per row), part 0 for the selection sample and 1, 2, ... for the test
    chunks (each part must be a fresh, independent draw); likewise ``draw_dp`` on D′."""
    sel_a = _rows(draw_d(n_select, 0))
    events = candidate_events(sel_a, _rows(draw_dp(n_select, 0)))
    ka = np.zeros(len(events), dtype=np.int64)
    kb = np.zeros(len(events), dtype=np.int64)
    done, part = 0, 1
    while done < n_test:
        m = min(chunk, n_test - done)
        ka += count_in(events, _rows(draw_d(m, part)))
        kb += count_in(events, _rows(draw_dp(m, part)))
        done, part = done + m, part + 1
    return best_bound(events, ka, kb, n_test, n_test, confidence=confidence, delta=delta)


def _rows(x: npt.ArrayLike) -> FloatArray:
    arr = np.asarray(x, dtype=np.float64)
    return arr.reshape(len(arr), -1)


def epsilon_lower_bound(out_d: FloatArray, out_dp: FloatArray, *, confidence: float = 0.95,
                        rng: np.random.Generator, delta: float = 0.0) -> LowerBound:
    """ε lower bound from releases on D (``out_d``, one per row) and D′ (``out_dp``).

    Half of each sample (a random half) chooses the candidate events (:func:`candidate_events`) and
    the other half tests them. For each event E the bound is log(p_lo(E|D) / p_hi(E|D′)) (and the
    symmetric one) with Clopper–Pearson intervals Bonferroni-corrected over all events, so the
    reported bound holds at ``confidence``.
    """
    out_d, out_dp = _rows(out_d), _rows(out_dp)
    pa, pb = rng.permutation(len(out_d)), rng.permutation(len(out_dp))
    ha, hb = len(out_d) // 2, len(out_dp) // 2
    test_a, test_b = out_d[pa[ha:]], out_dp[pb[hb:]]
    events = candidate_events(out_d[pa[:ha]], out_dp[pb[:hb]])
    ka, kb = count_in(events, test_a), count_in(events, test_b)
    return best_bound(events, ka, kb, len(test_a), len(test_b), confidence=confidence, delta=delta)
