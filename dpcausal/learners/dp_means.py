"""DP outcome means — per arm, or pooled over both arms: the outcome model of a doubly robust score
when a regression on the covariates would drown in noise (or a trial needs none)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.dp_ridge import OutcomeModel
from dpcausal.learners.rounding import UNIT_ROUNDOFF, effective_half_range
from dpcausal.mechanisms import LaplaceMechanism, NoiseGuard

FloatArray = npt.NDArray[np.float64]
SUMS_SHARE = 0.8
"""Share of the learner's ε spent on the per-arm sums (the rest on the per-arm counts)."""


@dataclass(frozen=True)
class OutcomeMeans(ABC):
    """What the DP outcome means share: the public centre c, the clipped outcome's half-range h and
    the sensitivity of a sum of m centred outcomes."""

    features: BoxFeatures
    y_bounds: tuple[float, float]
    epsilon: float
    m: int
    stage: str = "cate.nuisance.outcome"
    description = "outcome means"

    @property
    def center(self) -> float:
        """c = (y_lo + y_hi)/2."""
        return 0.5 * (self.y_bounds[0] + self.y_bounds[1])

    @property
    def sum_sensitivity(self) -> float:
        """ℓ1 sensitivity of the sums of centred outcomes (2h), rounding included."""
        h = effective_half_range(*self.y_bounds)
        return 2.0 * h + 4.0 * UNIT_ROUNDOFF * self.m * h

    @abstractmethod
    def mechanisms(self) -> tuple[LaplaceMechanism, ...]:
        """The Laplace releases, in the order :meth:`fit` draws them."""

    @abstractmethod
    def fit(self, x: FloatArray, a: FloatArray, y: FloatArray, *,
            noise: NoiseGuard) -> OutcomeModel:
        """Release the statistics and return the constant outcome model."""

    def _model(self, means: FloatArray) -> OutcomeModel:
        """The constant per-arm model μ̂_a = c + means[a] (x̃₀ = scale: μ̂_a = c + scale·θ_a0)."""
        theta = np.zeros((2, self.features.dim))
        theta[:, 0] = means / self.features.scale
        return OutcomeModel(self.features, theta, self.center, self.y_bounds)


@dataclass(frozen=True)
class DPArmMeans(OutcomeMeans):
    """μ̂_a = c + S̃_a / max(Ñ_a, 1), clipped to the outcome bounds, for a = 0, 1, with
    S_a = Σ_{A_i = a} (clip(Y_i) − c) and N_a = #{A_i = a}, each vector noised once.

    Notes
    -----
    Neighbouring relation: replace one of the m records (m public).
    Sensitivity: |clip(Y) − c| ≤ h (``effective_half_range``). A replaced record that stays in its
    arm changes that arm's sum by ≤ 2h and no count; one that switches arm changes the two sums
    by ≤ h each and the two counts by 1 each. So ‖ΔS‖₁ ≤ 2h and ‖ΔN‖₁ ≤ 2; the sums are exactly
    rounded (``math.fsum``), which adds at most 2u·m·h (|fl(S) − fl(S′)| ≤ |S − S′| + u(|S| + |S′|)).
    Guarantee: (S̃₀, S̃₁) is 0.8ε-DP and (Ñ₀, Ñ₁) 0.2ε-DP by the Laplace mechanism, ε-DP together
    (δ = 0); μ̂ is post-processing.
    """

    description = "per-arm outcome means"

    def mechanisms(self) -> tuple[LaplaceMechanism, ...]:
        """(sums, counts): the two Laplace releases."""
        return (LaplaceMechanism(SUMS_SHARE * self.epsilon, self.sum_sensitivity,
                                 stage=f"{self.stage}.sums"),
                LaplaceMechanism((1.0 - SUMS_SHARE) * self.epsilon, 2.0,
                                 stage=f"{self.stage}.counts"))

    def fit(self, x: FloatArray, a: FloatArray, y: FloatArray, *,
            noise: NoiseGuard) -> OutcomeModel:
        """Release the per-arm sums and counts and return the constant per-arm model."""
        if a.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows, got {a.shape[0]}")
        r = np.clip(y, *self.y_bounds) - self.center
        sums = np.array([math.fsum(r[a == arm]) for arm in (0, 1)])
        counts = np.array([float(np.sum(a == arm)) for arm in (0, 1)])
        m_sums, m_counts = self.mechanisms()
        s = noise.release(m_sums, sums)
        n = noise.release(m_counts, counts)
        means = np.clip(self.center + s / np.maximum(n, 1.0), *self.y_bounds) - self.center
        return self._model(np.asarray(means, dtype=np.float64))


@dataclass(frozen=True)
class DPPooledMean(OutcomeMeans):
    """μ̂₀ = μ̂₁ = c + S̃/m, clipped to the outcome bounds, with S = Σ_i (clip(Y_i) − c) over all m
    records (both arms): one number, the centre of the scores' residuals.

    Notes
    -----
    Neighbouring relation: replace one of the m records (m public, so no count is released).
    Sensitivity: |clip(Y) − c| ≤ h (``effective_half_range``), so a replaced record changes S by
    ≤ 2h whatever its arm; S is exactly rounded (``math.fsum``), which adds at most 2u·m·h
    (|fl(S) − fl(S′)| ≤ |S − S′| + u(|S| + |S′|)); ``sum_sensitivity`` (2h + 4u·m·h) covers it.
    Guarantee: S̃ is ε-DP by the Laplace mechanism (δ = 0); μ̂ is post-processing. With a
    residual clip r (``cate.ate.residual_clip``) a pooled centre leaves the scores as an
    inverse-propensity contrast of clip(Y − c̃): on the rows the clip leaves alone its noise
    reaches the estimate only through the arms' weight sums' departures from n, not as a
    difference of two noisy arm means, and it costs a single Laplace draw on all m rows.
    """

    description = "pooled outcome mean (both arms)"

    def mechanisms(self) -> tuple[LaplaceMechanism, ...]:
        """The one Laplace release of the pooled sum."""
        return (LaplaceMechanism(self.epsilon, self.sum_sensitivity, stage=f"{self.stage}.sum"),)

    def fit(self, x: FloatArray, a: FloatArray, y: FloatArray, *,
            noise: NoiseGuard) -> OutcomeModel:
        """Release the pooled sum and return the constant model, the same for both arms."""
        if a.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows, got {a.shape[0]}")
        total = math.fsum(np.clip(y, *self.y_bounds) - self.center)
        (mech,) = self.mechanisms()
        s = float(np.asarray(noise.release(mech, np.array([total])))[0])
        mean = float(np.clip(self.center + s / self.m, *self.y_bounds)) - self.center
        return self._model(np.full(2, mean))
