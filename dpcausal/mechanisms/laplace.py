"""The Laplace mechanism."""

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
class LaplaceMechanism:
    """Add i.i.d. Laplace noise of scale ``b = l1_sensitivity / epsilon`` to every coordinate.

    Notes
    -----
    Neighbouring relation: whatever relation ``l1_sensitivity`` was derived under (the caller's).
    Sensitivity: Δ₁ = max over neighbours ‖f(D) − f(D′)‖₁.
    Guarantee: pure ε-DP. The density ratio of the output at any point t is
    exp((‖t − f(D′)‖₁ − ‖t − f(D)‖₁)/b) ≤ exp(Δ₁/b) = exp(ε) by the triangle inequality.
    Numerics: float64 sampling (idealized numerics; Mironov 2012 attacks not mitigated).

    References
    ----------
    Dwork, McSherry, Nissim, Smith (2006), "Calibrating noise to sensitivity in private data analysis".
    """

    epsilon: float
    l1_sensitivity: float
    stage: str = "laplace"

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_sensitivity(self.l1_sensitivity)
        check_noise_scale(self.stage, self.epsilon, self.scale)

    @property
    def scale(self) -> float:
        """The Laplace scale b = Δ₁/ε."""
        return self.l1_sensitivity / self.epsilon

    def event(self) -> PrivacyEvent:
        """Return the cost of this mechanism."""
        return PrivacyEvent(
            kind="laplace",
            stage=self.stage,
            epsilon=self.epsilon,
            delta=0.0,
            sensitivity=self.l1_sensitivity,
            norm="l1",
            noise_scale=self.scale,
        )

    @staticmethod
    def noise_curve(noise_scale: float, shift: float, params: Mapping[str, Any]) -> PrivacyCurve:
        """The privacy map of Laplace noise of scale b: the Laplace pair at a = shift/b (ℓ1 shift;
        one coordinate is the worst case of a vector shift of the same ℓ1 length)."""
        return PrivacyCurve("laplace", loss_ratio(shift, noise_scale))

    def privacy_loss(self, shift: float) -> PrivacyCurve:
        """The privacy curve of this release when its input moves by ``shift`` (ℓ1)."""
        return self.noise_curve(self.scale, shift, {})

    def release(
        self, value: npt.ArrayLike, *, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """Return ``value`` plus Laplace noise of scale b in every coordinate."""
        return np.asarray(self.release_many(value, 1, rng=rng)[0], dtype=np.float64)

    def release_many(
        self, value: npt.ArrayLike, count: int, *, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """``count`` independent releases of ``value``, stacked on a new first axis."""
        arr = np.asarray(value, dtype=np.float64)
        return arr + rng.laplace(0.0, self.scale, size=(count, *arr.shape))
