"""The exponential mechanism over the k-subsets of n items, for utilities that add over items.

A k-subset S of {0, …, n − 1} is a vertex of the capped simplex {w ≥ 0, Σw = 1, w ≤ 1/k}
(weight 1/k on each member). With separable utilities u(S) = Σ_{j∈S} u_j the mechanism samples
P(S) ∝ exp(u(S)/T) exactly in O(n·k), by sequential inclusion decisions driven by elementary
symmetric polynomials (log-space, no enumeration of the C(n, k) subsets).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent, check_noise_scale
from dpcausal.mechanisms._checks import check_epsilon, check_sensitivity
from dpcausal.mechanisms.curve import PrivacyCurve, loss_ratio

FloatArray = npt.NDArray[np.float64]


def log_esp_suffixes(logits: npt.ArrayLike, k: int) -> FloatArray:
    """E[j, r] = log e_r(exp(logits[j:])): the elementary symmetric polynomials of every suffix.

    ``E`` has shape (n + 1, k + 1); e_0 = 1 (log 0), and e_r of fewer than r items is 0 (−inf).
    """
    la = np.asarray(logits, dtype=np.float64)
    n = la.size
    table = np.full((n + 1, k + 1), -np.inf)
    table[:, 0] = 0.0
    for j in range(n - 1, -1, -1):
        table[j, 1:] = np.logaddexp(table[j + 1, 1:], la[j] + table[j + 1, :-1])
    return table


def log_partition(logits: npt.ArrayLike, k: int) -> float:
    """log Σ_{|S|=k} exp(Σ_{j∈S} logits_j)."""
    return float(log_esp_suffixes(logits, k)[0, k])


def log_ratio_range(temperature: float, k: int, a: npt.ArrayLike,
                    b: npt.ArrayLike) -> tuple[float, float]:
    """(min, max) over k-subsets S of log P_a(S) − log P_b(S), P_u(S) ∝ exp(u(S)/T).

    The difference is Σ_{j∈S} d_j − (log Z_a − log Z_b) with d = (a − b)/T, linear in the
    subset's sum of d: its extremes are the sums of the k smallest and k largest d_j.
    """
    ua = np.asarray(a, dtype=np.float64) / temperature
    ub = np.asarray(b, dtype=np.float64) / temperature
    d = np.sort(ua - ub)
    dz = log_partition(ua - ua.max(), k) + k * ua.max() - (
        log_partition(ub - ub.max(), k) + k * ub.max())
    return float(np.sum(d[:k])) - dz, float(np.sum(d[-k:])) - dz


@dataclass(frozen=True, slots=True)
class SubsetExponentialMechanism:
    """Select a k-subset S of n items with probability ∝ exp(ε·Σ_{j∈S} u_j / Δ_u).

    Notes
    -----
    Neighbouring relation: the caller's, under which (i) at most **one** item's utility changes
    between neighbours and (ii) it changes by at most ``utility_sensitivity`` Δ_u. This holds when
    item j's utility is a function of record j alone (and public inputs), e.g. a donor's distance
    to a public target series under replace-one-donor neighbours.

    Sensitivity: Δ_u bounds |u_j(D) − u_j(D′)| for the one item j that changes.

    Guarantee: pure ε-DP. With T = Δ_u/ε, log P_D(S) − log P_D′(S) = (u(S) − u′(S))/T −
    log(Z/Z′). Only subsets containing j move, all by the same δ_j = u_j − u′_j, |δ_j| ≤ Δ_u:
    u(S) − u′(S) ∈ {0, δ_j}. If δ_j ≥ 0, Z′ ≤ Z ≤ e^{δ_j/T}Z′, so log(Z/Z′) ∈ [0, δ_j/T] and the
    difference lies in [−δ_j/T, δ_j/T] ⊂ [−ε, ε]; δ_j < 0 is symmetric. (The one-sided shift is
    why no factor 2 appears, as in the monotone exponential mechanism.)

    Sampling: exact. Items are visited in order; with r members still to choose, item j is taken
    with probability e^{u_j/T}·e_{r−1}(rest)/e_r(j, rest) — the chain rule of P(S) — from a table
    of log elementary symmetric polynomials of the suffixes (:func:`log_esp_suffixes`).

    References
    ----------
    McSherry & Talwar (2007), "Mechanism design via differential privacy"; the sampler is the
    standard one for conditional Poisson (fixed-size) sampling (Chen, Dempster & Liu 1994).
    """

    epsilon: float
    utility_sensitivity: float
    k: int
    stage: str = "subset_exponential"

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_sensitivity(self.utility_sensitivity)
        if self.utility_sensitivity == 0:
            raise ValueError("utility_sensitivity must be > 0 for the exponential mechanism")
        if not (isinstance(self.k, int | np.integer) and self.k >= 1):
            raise ValueError(f"k must be a positive integer, got {self.k!r}")
        check_noise_scale(self.stage, self.epsilon, self.temperature)

    @property
    def temperature(self) -> float:
        """T = Δ_u/ε: P(S) ∝ exp(u(S)/T)."""
        return self.utility_sensitivity / self.epsilon

    def event(self) -> PrivacyEvent:
        """Return the cost of this mechanism."""
        return PrivacyEvent(
            kind="subset_exponential",
            stage=self.stage,
            epsilon=self.epsilon,
            delta=0.0,
            sensitivity=self.utility_sensitivity,
            norm="utility",
            noise_scale=self.temperature,
            params={"k": int(self.k), "separable": True},
        )

    @staticmethod
    def noise_curve(noise_scale: float, shift: float, params: Mapping[str, Any]) -> PrivacyCurve:
        """Pure ε = shift/T when one item's utility moves by ``shift`` (class Notes)."""
        return PrivacyCurve("pure", loss_ratio(shift, noise_scale))

    def privacy_loss(self, shift: float) -> PrivacyCurve:
        """The privacy curve of this selection when one item's utility moves by ``shift``."""
        return self.noise_curve(self.temperature, shift, {})

    @staticmethod
    def selection_loss(noise_scale: float, k: int, a: npt.ArrayLike, b: npt.ArrayLike) -> float:
        """The exact max_S |log P_a(S) − log P_b(S)| between item utilities ``a`` and ``b``.

        Valid for any a, b (also when more than one item moved): :func:`log_ratio_range`.
        """
        lo, hi = log_ratio_range(noise_scale, k, a, b)
        return float(max(hi, -lo))

    def inclusion_probabilities(self, utilities: npt.ArrayLike) -> FloatArray:
        """P(j ∈ S) for every item (for tests and audits only: never released)."""
        la = self._logits(utilities)
        n = la.size
        table = log_esp_suffixes(la, self.k)
        prefix = log_esp_suffixes(la[::-1], self.k)[::-1]  # prefix[j, r] = log e_r(la[:j])
        log_z = table[0, self.k]
        out = np.empty(n)
        for j in range(n):
            # e_{k-1} of all items but j = Σ_r e_r(before j)·e_{k-1-r}(after j)
            parts = prefix[j, : self.k] + table[j + 1, self.k - 1 :: -1]
            out[j] = math.exp(la[j] + float(np.logaddexp.reduce(parts)) - log_z)
        return out

    def release(self, utilities: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
        """Return the selected subset as a 0/1 indicator over the items (k ones)."""
        return np.asarray(self.release_many(utilities, 1, rng=rng)[0], dtype=np.float64)

    def release_many(self, utilities: npt.ArrayLike, count: int, *,
                     rng: np.random.Generator) -> FloatArray:
        """``count`` independent selections, one 0/1 indicator row each."""
        la = self._logits(utilities)
        n, k = la.size, self.k
        table = log_esp_suffixes(la, k)
        out = np.zeros((count, n), dtype=np.float64)
        left = np.full(count, k, dtype=np.int64)
        uniform = rng.random((count, n))
        for j in range(n):
            r = left
            active = r > 0
            forced = active & (r >= n - j)  # every remaining item must be taken
            rr = np.maximum(r, 1)
            logp = la[j] + table[j + 1, rr - 1] - table[j, rr]
            take = active & (forced | (uniform[:, j] < np.exp(np.minimum(logp, 0.0))))
            out[take, j] = 1.0
            left = left - take.astype(np.int64)
        return out

    def _logits(self, utilities: npt.ArrayLike) -> FloatArray:
        u = np.asarray(utilities, dtype=np.float64)
        if u.ndim != 1 or not np.all(np.isfinite(u)):
            raise ValueError("utilities must be a 1-d array of finite values")
        if u.size < self.k:
            raise ValueError(f"cannot choose {self.k} items out of {u.size}")
        return np.asarray((u - u.max()) / self.temperature, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class SubsetSelectionFamily:
    """m independent k-subset selections (one per row of a utility matrix), each by
    P_i(S) ∝ exp(Σ_{j∈S} u_ij / T), with T = (2k + m − 1)·Δ_u/ε.

    Notes
    -----
    Neighbouring relation: the caller's, under which one neighbour moves (i) every utility of at
    most one selection, each by at most Δ_u, and (ii) at most one utility of every other
    selection, by at most Δ_u. (synth-control's placebos: changing donor j moves every distance
    of the placebo with j as its target, and j's own distance in every other placebo's pool.)

    Guarantee: pure ε-DP. The selections are independent, so the log-ratio of a joint output is
    the sum of theirs. The selection of (i) moves every k-subset's utility by at most kΔ_u and
    the partition function by the same factor range: |log-ratio| ≤ 2kΔ_u/T. Each selection of
    (ii) is the one-item case of :class:`SubsetExponentialMechanism`: ≤ Δ_u/T. With m − 1 of
    them the total is ≤ (2k + m − 1)Δ_u/T = ε.
    """

    epsilon: float
    utility_sensitivity: float
    k: int
    selections: int
    stage: str = "subset_family"

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_sensitivity(self.utility_sensitivity)
        if self.utility_sensitivity == 0:
            raise ValueError("utility_sensitivity must be > 0 for the exponential mechanism")
        for name in ("k", "selections"):
            value = getattr(self, name)
            if not (isinstance(value, int | np.integer) and value >= 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        check_noise_scale(self.stage, self.epsilon, self.temperature)

    @property
    def factor(self) -> int:
        """2k + m − 1: how many Δ_u/T one neighbour can add up to (class Notes)."""
        return 2 * int(self.k) + int(self.selections) - 1

    @property
    def temperature(self) -> float:
        """T = (2k + m − 1)·Δ_u/ε."""
        return self.factor * self.utility_sensitivity / self.epsilon

    def event(self) -> PrivacyEvent:
        """Return the cost of this mechanism."""
        return PrivacyEvent(
            kind="subset_family", stage=self.stage, epsilon=self.epsilon, delta=0.0,
            sensitivity=self.utility_sensitivity, norm="utility",
            noise_scale=self.temperature,
            params={"k": int(self.k), "selections": int(self.selections),
                    "factor": self.factor},
        )

    @staticmethod
    def noise_curve(noise_scale: float, shift: float, params: Mapping[str, Any]) -> PrivacyCurve:
        """Pure ε = factor·shift/T when the utilities move as in the class Notes by ``shift``."""
        return PrivacyCurve("pure", float(params["factor"]) * loss_ratio(shift, noise_scale))

    @staticmethod
    def family_loss(noise_scale: float, k: int, a: npt.ArrayLike, b: npt.ArrayLike) -> float:
        """The exact max over joint outputs of |Σ_i log-ratio_i| between utility matrices."""
        ua, ub = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        ranges = [log_ratio_range(noise_scale, k, ua[i], ub[i]) for i in range(ua.shape[0])]
        return float(max(sum(hi for _, hi in ranges), -sum(lo for lo, _ in ranges)))

    def release(self, utilities: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
        """One 0/1 indicator row per selection (k ones each)."""
        return np.asarray(self.release_many(utilities, 1, rng=rng)[0], dtype=np.float64)

    def release_many(self, utilities: npt.ArrayLike, count: int, *,
                     rng: np.random.Generator) -> FloatArray:
        """``count`` independent joint releases, shape (count, m, pool)."""
        u = np.asarray(utilities, dtype=np.float64)
        if u.ndim != 2 or u.shape[0] != self.selections:
            raise ValueError(f"utilities must be a ({self.selections}, pool) matrix")
        one = SubsetExponentialMechanism(self.epsilon, self.utility_sensitivity * self.factor,
                                         self.k, stage=self.stage)  # the same temperature T
        return np.stack([one.release_many(u[i], count, rng=rng) for i in range(u.shape[0])],
                        axis=1)
