"""Budgets and basic sequential composition.

Composition here is *basic*: ε and δ add up over mechanisms and over runs on the same dataset. It is
loose but always valid, needs no assumptions about the mechanisms, and is what a user can recompute
from the receipts by hand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

# A spend is allowed when it exceeds the cap by at most this relative amount, so that e.g. three runs of
# 0.1 fit a cap of 0.3 despite binary floating point. The slack is far below any meaningful ε.
CAP_RELATIVE_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class Budget:
    """An (ε, δ) pair."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise ValueError(f"budget epsilon must be finite and >= 0, got {self.epsilon!r}")
        if not (0.0 <= self.delta <= 1.0):
            raise ValueError(f"budget delta must be in [0, 1], got {self.delta!r}")

    def __add__(self, other: Budget) -> Budget:
        return Budget(self.epsilon + other.epsilon, min(1.0, self.delta + other.delta))

    def fits_within(self, cap: Budget) -> bool:
        """Return whether this spend is within ``cap`` on both coordinates (with float slack)."""
        return self.epsilon <= cap.epsilon * (1 + CAP_RELATIVE_SLACK) and self.delta <= cap.delta * (
            1 + CAP_RELATIVE_SLACK
        )

    def to_dict(self) -> dict[str, float]:
        """Return the JSON form."""
        return {"epsilon": self.epsilon, "delta": self.delta}


def compose(budgets: Iterable[Budget]) -> Budget:
    """Basic sequential composition: sum ε and δ exactly (``math.fsum``)."""
    items = list(budgets)
    return Budget(
        math.fsum(b.epsilon for b in items), min(1.0, math.fsum(b.delta for b in items))
    )
