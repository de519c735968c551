"""The exponential mechanism over a finite candidate set, sampled by Gumbel-max."""

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
class ExponentialMechanism:
    """Select index k with probability ∝ exp(ε·u_k / (2Δ_u)) (or /Δ_u when ``monotonic``).

    Notes
    -----
    Neighbouring relation: the caller's, under which ``utility_sensitivity`` holds.
    Sensitivity: Δ_u = max over neighbours and candidates |u_k(D) − u_k(D′)|.
    Guarantee: pure ε-DP (McSherry & Talwar 2007). If every utility moves in the same direction
    between neighbours (``monotonic=True``) the factor 2 can be dropped.
    Sampling: argmax_k (ε u_k/(2Δ_u) + G_k) with G_k i.i.d. standard Gumbel is an exact draw from the
    softmax above; it never forms exp() of large numbers.

    References
    ----------
    McSherry & Talwar (2007), "Mechanism design via differential privacy".
    """

    epsilon: float
    utility_sensitivity: float
    monotonic: bool = False
    stage: str = "exponential"

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_sensitivity(self.utility_sensitivity)
        if self.utility_sensitivity == 0:
            raise ValueError("utility_sensitivity must be > 0 for the exponential mechanism")
        check_noise_scale(self.stage, self.epsilon, self.temperature)

    @property
    def temperature(self) -> float:
        """The Gumbel scale 2Δ_u/ε (Δ_u/ε when monotonic)."""
        factor = 1.0 if self.monotonic else 2.0
        return factor * self.utility_sensitivity / self.epsilon

    def event(self) -> PrivacyEvent:
        """Return the cost of this mechanism."""
        return PrivacyEvent(
            kind="exponential",
            stage=self.stage,
            epsilon=self.epsilon,
            delta=0.0,
            sensitivity=self.utility_sensitivity,
            norm="utility",
            noise_scale=self.temperature,
            params={"monotonic": self.monotonic},
        )

    @staticmethod
    def noise_curve(noise_scale: float, shift: float, params: Mapping[str, Any]) -> PrivacyCurve:
        """The privacy map at Gumbel scale T when every utility moves by at most ``shift``: pure
        ε = 2·shift/T (shift/T when ``params["monotonic"]``), the worst case of pure ε-DP."""
        factor = 1.0 if params.get("monotonic") else 2.0
        return PrivacyCurve("pure", factor * loss_ratio(shift, noise_scale))

    def privacy_loss(self, shift: float) -> PrivacyCurve:
        """The privacy curve of this selection when every utility moves by at most ``shift``."""
        return self.noise_curve(self.temperature, shift, {"monotonic": self.monotonic})

    @staticmethod
    def selection_loss(noise_scale: float, a: npt.ArrayLike, b: npt.ArrayLike) -> float:
        """The exact loss max_k |log p_k − log p′_k| between utility vectors ``a`` and ``b`` at
        Gumbel scale T (for the audit: tighter than :meth:`noise_curve` for a given pair)."""
        from scipy import special

        ua = np.asarray(a, dtype=np.float64) / noise_scale
        ub = np.asarray(b, dtype=np.float64) / noise_scale
        la = ua - special.logsumexp(ua)
        lb = ub - special.logsumexp(ub)
        return float(np.max(np.abs(la - lb)))

    def probabilities(self, utilities: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Selection probabilities (for tests and audits only: never released)."""
        u = np.asarray(utilities, dtype=np.float64) / self.temperature
        p: npt.NDArray[np.float64] = np.exp(u - u.max())
        p /= p.sum()
        return p

    def release(self, utilities: npt.ArrayLike, *, rng: np.random.Generator) -> int:
        """Return the index of the selected candidate."""
        return int(self.release_many(utilities, 1, rng=rng)[0])

    def release_many(self, utilities: npt.ArrayLike, count: int, *,
                     rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """``count`` independent selections from the same utilities."""
        u = np.asarray(utilities, dtype=np.float64)
        if u.ndim != 1 or u.size == 0 or not np.all(np.isfinite(u)):
            raise ValueError("utilities must be a non-empty 1-d array of finite values")
        scores = (u - u.max()) / self.temperature + rng.gumbel(0.0, 1.0, size=(count, u.size))
        return np.asarray(np.argmax(scores, axis=1), dtype=np.int64)
