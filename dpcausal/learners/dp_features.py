"""Public feature map of the DP nuisance learners: box-scaled covariates with an intercept, ‖x̃‖ ≤ 1."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def unit_ball_scale(dim: int) -> float:
    """(1 − 8u)/√dim (u = 2⁻⁵³): a row of ``dim`` coordinates in [−1, 1] times this factor has
    ‖·‖₂ < 1 for the computed floats, whatever the rounding.

    Notes
    -----
    fl(√dim) ≥ √dim(1 − u), so fl(1/fl(√dim)) ≤ (1 + u)/(√dim(1 − u)); with the exact factor
    1 − 8u and the product's rounding, the scale is ≤ (1 − 8u)(1 + u)²/((1 − u)√dim) ≤ (1 − 5u)/√dim,
    and each rounded coordinate |fl(s_j·scale)| ≤ (1 − 4u)/√dim, so Σ_j v_j² ≤ (1 − 4u)² < 1.
    """
    return 1.0 / math.sqrt(dim) * (1.0 - 8.0 * 2.0**-53)


@dataclass(frozen=True)
class BoxFeatures:
    """x ↦ x̃ = (1, s(x)) / √(q + 1) with s(x) = (clip(x, lo, hi) − lo)/(hi − lo) ∈ [0, 1]^q, or,
    ``centered``, x̃ = (1, s(x) − ½) / √(1 + q/4).

    Built from the spec's public covariate box only; every x̃ has ‖x̃‖₂ ≤ 1, the bound the DP
    learners' sensitivities use. Centring at the middle of the box lets the covariates' coordinates
    be √(4(q + 1)/(q + 4)) times larger under the same norm bound (≈ 1.75 at q = 9), so a penalty
    λ shrinks a covariate's coefficient about 3 times less at the same noise.
    """

    lo: FloatArray
    hi: FloatArray
    centered: bool = False

    def __post_init__(self) -> None:
        if self.lo.shape != self.hi.shape or self.lo.ndim != 1 or not np.all(self.lo < self.hi):
            raise ValueError("the covariate box needs lo < hi in every coordinate")

    @property
    def dim(self) -> int:
        """Length of x̃ (q + 1)."""
        return int(self.lo.shape[0]) + 1

    def unit(self, x: npt.ArrayLike) -> FloatArray:
        """s(x): covariates clipped to the box and mapped to [0, 1]^q."""
        arr = np.atleast_2d(np.asarray(x, dtype=np.float64))
        return (np.clip(arr, self.lo, self.hi) - self.lo) / (self.hi - self.lo)

    def transform(self, x: npt.ArrayLike) -> FloatArray:
        """x̃ for every row of ``x``.

        The factor 1/√(q + 1) is shrunk by 8u (u = 2⁻⁵³) so that every computed coordinate is
        ≤ 1/√(q + 1) despite rounding: ‖x̃‖ ≤ 1 holds exactly for the floats the learners use."""
        s = self.unit(x)
        if self.centered:
            s = s - 0.5
        return np.column_stack([np.ones(s.shape[0]), s]) * self.scale

    @property
    def scale(self) -> float:
        """(1 − 8u)/√(q + 1) (centred: (1 − 8u)/√(1 + q/4), the same argument as
        :func:`unit_ball_scale` with the coordinates s − ½ ∈ [−½, ½]), rounded down past any
        rounding of the division."""
        if self.centered:
            return 1.0 / math.sqrt(1.0 + (self.dim - 1) / 4.0) * (1.0 - 8.0 * 2.0**-53)
        return unit_ball_scale(self.dim)

    def linear_range(self, theta: npt.ArrayLike) -> tuple[float, float]:
        """[min, max] of θᵀx̃ over the whole box (exact up to rounding: coordinate by coordinate,
        s_j ∈ [0, 1]); callers clip predictions into it, so rounding cannot leave it."""
        th = np.asarray(theta, dtype=np.float64)
        slope = th[1:] * self.scale
        base = float(th[0]) * self.scale + (-0.5 * float(slope.sum()) if self.centered else 0.0)
        return (base + float(np.minimum(slope, 0.0).sum()),
                base + float(np.maximum(slope, 0.0).sum()))
