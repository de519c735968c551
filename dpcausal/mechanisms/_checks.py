"""Parameter checks shared by the mechanisms."""

from __future__ import annotations

import math


def check_epsilon(epsilon: float) -> None:
    """Raise ValueError unless ε is finite and > 0."""
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")


def check_sensitivity(sensitivity: float) -> None:
    """Raise ValueError unless the sensitivity is finite and >= 0."""
    if not (isinstance(sensitivity, int | float) and math.isfinite(sensitivity) and sensitivity >= 0):
        raise ValueError(f"sensitivity must be finite and >= 0, got {sensitivity!r}")
