"""The privacy plan of one run: built from the spec and public sizes alone, before any row is read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from dpcausal.accounting.budget import Budget, compose_events
from dpcausal.accounting.events import PrivacyEvent

Guarantee = Literal["pure", "approximate", "asymptotic"]


@dataclass(frozen=True)
class PrivacyPlan:
    """Every mechanism a run will execute, with its cost, and the guarantee they add up to.

    Parameters
    ----------
    command
        The CLI command.
    events
        One event per mechanism, in the order they run.
    neighbouring
        The neighbouring relation and privacy unit, e.g.
        ``{"relation": "replace-one", "unit": "row", "n_public": True}``.
    guarantee
        ``pure`` (ε), ``approximate`` (ε, δ) or ``asymptotic``.
    dp_guarantee
        False for uncertified modes kept only for paper reproduction.
    assumptions
        The public bounds and constants the sensitivities rely on.
    details
        Public, command-specific facts about the plan (e.g. the expected noise norm).
    """

    command: str
    events: tuple[PrivacyEvent, ...]
    neighbouring: dict[str, Any]
    guarantee: Guarantee
    dp_guarantee: bool
    assumptions: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def cost(self) -> Budget:
        """The total (ε, δ): basic composition, parallel over parts of a public split."""
        return compose_events(e.to_dict() for e in self.events)

    def event(self, stage: str) -> PrivacyEvent:
        """Return the event of ``stage``."""
        for ev in self.events:
            if ev.stage == stage:
                return ev
        raise KeyError(stage)
