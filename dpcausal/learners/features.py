"""The certified learners' public feature map: clip to public bounds, rescale to [−1, 1], intercept.

Every mapped row x̃ = (1, x₁, …, x_d) has entries in [−1, 1], so ‖x̃‖₂ ≤ R_x = √(d + 1) whatever
the raw values are (out-of-range values are clipped first). The map uses public bounds only, so it
is record-local and adds no sensitivity (spec select_policy §2.8, pitfall 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class UnitBoxFeatures:
    """x ↦ (1, 2(clip(x) − lo)/(hi − lo) − 1).

    Parameters
    ----------
    names
        Covariate names, in order.
    lower, upper
        Public per-covariate bounds (lo < hi).
    """

    names: tuple[str, ...]
    lower: FloatArray
    upper: FloatArray

    def __post_init__(self) -> None:
        lo = np.asarray(self.lower, dtype=np.float64)
        hi = np.asarray(self.upper, dtype=np.float64)
        if lo.shape != (len(self.names),) or hi.shape != lo.shape:
            raise ValueError("lower/upper must have one entry per covariate name")
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
            raise ValueError("every covariate bound must be finite with lo < hi")

    @property
    def d(self) -> int:
        """Number of covariates (without the intercept)."""
        return len(self.names)

    @property
    def dim(self) -> int:
        """d + 1 (the intercept is inside θ and penalised)."""
        return self.d + 1

    @property
    def radius(self) -> float:
        """R_x = √(d + 1) ≥ ‖x̃‖₂ for every mapped row."""
        return math.sqrt(self.dim)

    def transform(self, x: npt.ArrayLike) -> FloatArray:
        """Map raw rows (n × d) to x̃ (n × (d + 1)), intercept first."""
        arr = np.asarray(x, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != self.d:
            raise ValueError(f"x must be n × {self.d}, got shape {arr.shape}")
        out = np.empty((arr.shape[0], self.dim), dtype=np.float64)
        out[:, 0] = 1.0
        width = self.upper - self.lower
        np.clip(arr, self.lower, self.upper, out=out[:, 1:])
        out[:, 1:] -= self.lower
        out[:, 1:] *= 2.0 / width
        out[:, 1:] -= 1.0
        # guard against rounding past ±1 (keeps ‖x̃‖ ≤ R_x exact)
        np.clip(out[:, 1:], -1.0, 1.0, out=out[:, 1:])
        return out

    def to_dict(self) -> dict[str, Any]:
        """Public description (for receipts and model files)."""
        return {
            "map": "clip to [lo, hi], rescale to [-1, 1], intercept first",
            "bounds": {n: [float(a), float(b)] for n, a, b in
                       zip(self.names, self.lower, self.upper, strict=True)},
            "R_x": self.radius,
        }
