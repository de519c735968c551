"""An isotropic Gaussian noise vector whose σ is fixed by the caller's own calibration.

Used where the Gaussian noise does not enter as output perturbation of a fixed-sensitivity value (so
the analytic calibration of :class:`~dpcausal.mechanisms.gaussian.GaussianMechanism` does not apply),
e.g. the noise vector b of objective perturbation, whose privacy proof (tail event + change of
variables) yields its own σ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.events import PrivacyEvent, check_noise_scale
from dpcausal.mechanisms._checks import check_epsilon, check_sensitivity
from dpcausal.mechanisms.curve import PrivacyCurve, loss_ratio


@dataclass(frozen=True, slots=True)
class GaussianNoiseVector:
    """Add N(0, σ² I_dim) noise; σ comes from the caller's derivation (stated in ``params``).

    Notes
    -----
    Neighbouring relation, sensitivity and guarantee: the caller's. This class only samples and
    records the cost; the caller must document why σ gives (``epsilon``, ``delta``) for its use
    (e.g. ``dpcausal.commands.two_stage.calibration`` for objective perturbation).
    """

    epsilon: float
    delta: float
    l2_sensitivity: float
    sigma: float
    dim: int
    stage: str = "gaussian_vector"
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_sensitivity(self.l2_sensitivity)
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")
        if self.sigma <= 0:
            raise ValueError(f"sigma must be finite and > 0, got {self.sigma!r}")
        check_noise_scale(self.stage, self.epsilon, self.sigma)  # inf or NaN: ε too small
        if not (isinstance(self.dim, int | np.integer) and self.dim >= 1):
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")

    def event(self) -> PrivacyEvent:
        """Return the cost of this mechanism."""
        return PrivacyEvent(
            kind="gaussian",
            stage=self.stage,
            epsilon=self.epsilon,
            delta=self.delta,
            sensitivity=self.l2_sensitivity,
            norm="l2",
            noise_scale=self.sigma,
            params={"dim": int(self.dim), "calibration": "caller", **self.params},
        )

    @staticmethod
    def noise_curve(noise_scale: float, shift: float, params: Mapping[str, Any]) -> PrivacyCurve:
        """The privacy map of the noise law alone: the Gaussian pair at μ = shift/σ (ℓ2). The
        release's own claim may rest on more than this (the caller's proof): the accountant composes
        events with ``calibration: caller`` by their stated (ε, δ)."""
        return PrivacyCurve("gaussian", loss_ratio(shift, noise_scale))

    def privacy_loss(self, shift: float) -> PrivacyCurve:
        """The privacy curve of this release when its input moves by ``shift`` (ℓ2)."""
        return self.noise_curve(self.sigma, shift, {})

    def release(
        self, value: npt.ArrayLike, *, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """Return ``value`` (shape (dim,)) plus one N(0, σ² I) draw."""
        return np.asarray(self.release_many(value, 1, rng=rng)[0], dtype=np.float64)

    def release_many(
        self, value: npt.ArrayLike, count: int, *, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """``count`` independent releases of ``value``, shape (count, dim)."""
        arr = np.asarray(value, dtype=np.float64)
        if arr.shape != (int(self.dim),):
            raise ValueError(f"value must have shape ({self.dim},), got {arr.shape}")
        return arr + rng.normal(0.0, self.sigma, size=(count, *arr.shape))
