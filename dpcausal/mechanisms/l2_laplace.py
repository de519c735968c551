"""The ℓ2-Laplace ("Gamma-norm") mechanism for vector output perturbation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent, check_noise_scale
from dpcausal.mechanisms._checks import check_epsilon, check_sensitivity
from dpcausal.mechanisms.curve import PrivacyCurve, loss_ratio


@dataclass(frozen=True, slots=True)
class L2LaplaceMechanism:
    """Add noise b ∈ ℝ^d with density ∝ exp(−ε‖b‖₂/Δ₂).

    The draw is a radius r ~ Gamma(shape=d, scale=Δ₂/ε) times a direction uniform on the unit sphere
    (a normalised standard Gaussian vector). In polar coordinates the density ∝ exp(−ε r/Δ) r^{d−1},
    which is exactly that Gamma law; a shape other than d breaks the guarantee.

    Notes
    -----
    Neighbouring relation: the caller's, under which ``l2_sensitivity`` holds.
    Sensitivity: Δ₂ = max over neighbours ‖f(D) − f(D′)‖₂.
    Guarantee: pure ε-DP. For any output t the density ratio is
    exp(ε(‖t − f(D′)‖ − ‖t − f(D)‖)/Δ₂) ≤ exp(ε‖f(D) − f(D′)‖/Δ₂) ≤ exp(ε).
    Expected noise norm E‖b‖ = dΔ₂/ε.

    References
    ----------
    Chaudhuri & Monteleoni (2009); Chaudhuri, Monteleoni & Sarwate (2011), JMLR 12, Alg. 1.
    """

    epsilon: float
    l2_sensitivity: float
    dim: int
    stage: str = "l2_laplace"

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_sensitivity(self.l2_sensitivity)
        if not (isinstance(self.dim, int | np.integer) and self.dim >= 1):
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")
        check_noise_scale(self.stage, self.epsilon, self.scale)

    @property
    def scale(self) -> float:
        """The Gamma scale Δ₂/ε."""
        return self.l2_sensitivity / self.epsilon

    @property
    def expected_norm(self) -> float:
        """E‖b‖₂ = dΔ₂/ε."""
        return self.dim * self.scale

    def event(self) -> PrivacyEvent:
        """Return the cost of this mechanism."""
        return PrivacyEvent(
            kind="l2_laplace",
            stage=self.stage,
            epsilon=self.epsilon,
            delta=0.0,
            sensitivity=self.l2_sensitivity,
            norm="l2",
            noise_scale=self.scale,
            params={"dim": int(self.dim), "expected_noise_norm": self.expected_norm},
        )

    @staticmethod
    def noise_curve(noise_scale: float, shift: float, params: Mapping[str, Any]) -> PrivacyCurve:
        """The privacy map of ℓ2-Laplace noise of Gamma scale s: pure ε = shift/s (ℓ2 shift).

        The density ratio is bounded by exp(shift/s) (class Notes); no exact curve tighter than
        the worst case of pure ε-DP is known in d > 1 dimensions, so PLD accounting gains only
        what composition of pure ε-DP gains (nothing at δ = 0)."""
        return PrivacyCurve("pure", loss_ratio(shift, noise_scale))

    def privacy_loss(self, shift: float) -> PrivacyCurve:
        """The privacy curve of this release when its input moves by ``shift`` (ℓ2)."""
        return self.noise_curve(self.scale, shift, {})

    def sample_noise(
        self, *, rng: np.random.Generator, count: int | None = None
    ) -> npt.NDArray[np.float64]:
        """Draw one noise vector b (``count=None``) or ``count`` of them, shape (count, dim)."""
        rows = 1 if count is None else int(count)
        direction = rng.standard_normal((rows, int(self.dim)))
        norm = np.linalg.norm(direction, axis=1)
        while np.any(norm == 0.0):  # probability zero, but never divide by it
            zero = norm == 0.0
            direction[zero] = rng.standard_normal((int(zero.sum()), int(self.dim)))
            norm = np.linalg.norm(direction, axis=1)
        radius = rng.gamma(shape=float(self.dim), scale=self.scale, size=rows)
        noise = (radius / norm)[:, None] * direction
        return np.asarray(noise[0] if count is None else noise, dtype=np.float64)

    def release(
        self, value: npt.ArrayLike, *, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """Return ``value`` (a vector of length ``dim``) plus one noise vector."""
        return np.asarray(self.release_many(value, 1, rng=rng)[0], dtype=np.float64)

    def release_many(
        self, value: npt.ArrayLike, count: int, *, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """``count`` independent releases of ``value``, shape (count, dim)."""
        arr = np.asarray(value, dtype=np.float64)
        if arr.shape != (int(self.dim),):
            raise ValueError(f"value must have shape ({self.dim},), got {arr.shape}")
        return arr + np.atleast_2d(self.sample_noise(rng=rng, count=count))
