"""The privacy plan of one run: built from the spec and public sizes alone, before any row is read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from dpcausal.accounting.budget import Budget, compose_events
from dpcausal.accounting.events import PrivacyEvent

Guarantee = Literal["pure", "approximate", "asymptotic"]
IntervalKind = Literal["noise", "total"]


@dataclass(frozen=True, slots=True)
class PredictedAccuracy:
    """The predicted (1 − α) half-width of one released quantity, from public inputs alone.

    Parameters
    ----------
    quantity
        The released quantity's name as outputs write it (e.g. ``"margin"``, ``"theta[2]"``).
    units
        Its units, in words (e.g. ``"outcome units"``, ``"score v(x)·θ"``).
    halfwidth
        h: the released value is within ±h of the value without noise (``kind="noise"``) or of
        the estimand (``kind="total"``) with probability 1 − α (at least 1 − α if ``bound``).
    alpha
        α of the (1 − α) interval.
    kind
        ``noise`` (the privacy noise only) or ``total`` (sampling error and noise).
    law
        The law the half-width comes from, in words with its public parameters.
    bound
        True when h is a bound (coverage ≥ 1 − α) rather than the exact quantile.
    headline
        The quantity ``accuracy.max_halfwidth`` and ``--target-halfwidth`` refer to by default
        (one per plan).
    n_search
        Whether ``--target-halfwidth`` may search the n that meets a target by re-planning at
        other n (False where the half-width does not depend on n, or a plan at another n would
        be costly, e.g. owl's γ tuning).
    note
        What else changes the half-width, said when no ε meets a target (e.g. a penalty).
    """

    quantity: str
    units: str
    halfwidth: float
    alpha: float
    kind: IntervalKind
    law: str
    bound: bool = False
    headline: bool = False
    n_search: bool = True
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of ``--dry-run --json`` (``level`` = 1 − α)."""
        return {"quantity": self.quantity, "units": self.units, "halfwidth": self.halfwidth,
                "level": 1.0 - self.alpha, "alpha": self.alpha, "kind": self.kind,
                "law": self.law, "bound": self.bound, "headline": self.headline,
                **({"note": self.note} if self.note else {})}


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
    accuracy
        The predicted half-width of each released quantity (DESIGN principle 9), one entry
        marked ``headline``; empty for a command that does not predict its accuracy yet.
    """

    command: str
    events: tuple[PrivacyEvent, ...]
    neighbouring: dict[str, Any]
    guarantee: Guarantee
    dp_guarantee: bool
    assumptions: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    accuracy: tuple[PredictedAccuracy, ...] = ()

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

    def predicted(self, quantity: str | None = None) -> PredictedAccuracy | None:
        """The predicted accuracy of ``quantity`` (default: the headline), or None."""
        for acc in self.accuracy:
            if (acc.quantity == quantity) if quantity is not None else acc.headline:
                return acc
        return None
