"""Public feature map of the DP nuisance learners: box-scaled covariates with an intercept, ‖x̃‖ ≤ 1."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class BoxFeatures:
    """x ↦ x̃ = (1, s(x)) / √(q + 1) with s(x) = (clip(x, lo, hi) − lo)/(hi − lo) ∈ [0, 1]^q.

    Built from the spec's public covariate box only; every x̃ has ‖x̃‖₂ ≤ 1, the bound the DP
    learners' sensitivities use.
    """

    lo: FloatArray
    hi: FloatArray

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
        return np.column_stack([np.ones(s.shape[0]), s]) * self.scale

    @property
    def scale(self) -> float:
        """(1 − 8u)/√(q + 1), rounded down past any rounding of the division."""
        return 1.0 / math.sqrt(self.dim) * (1.0 - 8.0 * 2.0**-53)
