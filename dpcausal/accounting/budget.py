"""Budgets and basic sequential composition.

Composition here is *basic*: ε and δ add up over mechanisms and over runs on the same dataset. It is
loose but always valid, needs no assumptions about the mechanisms, and is what a user can recompute
from the receipts by hand. The one refinement is *parallel* composition over a public partition of the
rows (:func:`compose_events`): events tagged with parts of one split cost the max over the parts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

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


def by_partition(events: Iterable[Mapping[str, Any]], cost: Callable[[Mapping[str, Any]], T]
                 ) -> tuple[list[T], dict[str, dict[str, list[T]]]]:
    """``cost`` of each event, as (untagged events, split → part → the part's events)."""
    plain: list[T] = []
    splits: dict[str, dict[str, list[T]]] = {}
    for ev in events:
        c = cost(ev)
        part = ev.get("partition")
        if part is None:
            plain.append(c)
        else:
            split, _, name = str(part).partition("/")
            splits.setdefault(split, {}).setdefault(name, []).append(c)
    return plain, splits


def compose_events(events: Iterable[Mapping[str, Any]]) -> Budget:
    """Total cost of one run's events (receipt dicts with ``epsilon``, ``delta``, optional ``partition``).

    Events without ``partition`` read every row and add up (basic composition). Events tagged
    ``"<split>/<part>"`` read only one part of a public, data-independent partition of the rows into
    disjoint parts; under replace-one neighbours (n public) a changed record lies in exactly one part,
    so only that part's events see it: a split costs max over its parts of the part's summed (ε, δ)
    (parallel composition; McSherry 2009, Thm 4), taken coordinate-wise. Different splits add up.
    Without partition tags this equals :func:`compose` (backwards compatible).
    """
    plain, splits = by_partition(events, lambda ev: Budget(float(ev["epsilon"]), float(ev["delta"])))
    for parts in splits.values():
        totals = [compose(bs) for bs in parts.values()]
        plain.append(Budget(max(t.epsilon for t in totals), max(t.delta for t in totals)))
    return compose(plain)
