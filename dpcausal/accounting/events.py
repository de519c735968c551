"""Frozen privacy events: the closed vocabulary of the receipt.

An event records what one mechanism costs and why (its sensitivity and noise scale), computed from
public quantities alone, before any data is touched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

EventKind = Literal["laplace", "gaussian", "exponential", "l2_laplace", "gaussian_process"]


@dataclass(frozen=True, slots=True)
class PrivacyEvent:
    """The cost of one mechanism.

    Parameters
    ----------
    kind
        The mechanism family.
    stage
        Where in the method the mechanism runs, e.g. ``"owl.theta"``.
    epsilon, delta
        The privacy parameters this mechanism consumes.
    sensitivity
        The sensitivity the noise is calibrated to, in the norm named by ``norm``.
    norm
        ``"l1"``, ``"l2"`` or ``"utility"`` (exponential mechanism: range of one utility).
    noise_scale
        The scale of the noise drawn (Laplace b, Gaussian sigma, Gamma scale; for the exponential
        mechanism the Gumbel scale 2Δ/ε).
    params
        Public parameters the sensitivity was derived from (bounds, γ, dimension...).
    partition
        ``None`` (default): the mechanism reads every row. ``"<split>/<part>"``: it reads only part
        ``<part>`` of a public, data-independent partition ``<split>`` of the rows into disjoint parts
        (e.g. ``"cate.halves/1"``). Under replace-one neighbours a record lies in exactly one part, so
        events on different parts of one split compose in parallel (max, not sum); see
        :func:`dpcausal.accounting.budget.compose_events`.
    """

    kind: EventKind
    stage: str
    epsilon: float
    delta: float
    sensitivity: float
    norm: Literal["l1", "l2", "utility"]
    noise_scale: float
    params: dict[str, Any] = field(default_factory=dict)
    partition: str | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"event epsilon must be finite and > 0, got {self.epsilon!r}")
        if not (0.0 <= self.delta < 1.0):
            raise ValueError(f"event delta must be in [0, 1), got {self.delta!r}")
        if not (math.isfinite(self.sensitivity) and self.sensitivity >= 0):
            raise ValueError(f"event sensitivity must be finite and >= 0, got {self.sensitivity!r}")
        if self.partition is not None and self.partition.count("/") != 1:
            raise ValueError(f"event partition must look like 'split/part', got {self.partition!r}")

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form used in receipts and the ledger (``partition`` only when set)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "stage": self.stage,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sensitivity": self.sensitivity,
            "norm": self.norm,
            "noise_scale": self.noise_scale,
            "params": dict(self.params),
        }
        if self.partition is not None:
            out["partition"] = self.partition
        return out
