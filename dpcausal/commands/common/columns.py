"""The columns of a command with covariates, an outcome and a binary treatment, as one record
validated at setup: every role a name (never None), every bound the sensitivity needs present.

The spec's ``data.columns`` and ``bounds`` leave every role optional, since each command needs a
different set; a command checks its own set once, with its own messages, then works with this
record, so no later step has to narrow an optional column or bound again.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpcausal.errors import MissingBoundsError, SpecError
from dpcausal.spec.base import CommonSpec


@dataclass(frozen=True, slots=True)
class ArmColumns:
    """Covariates, outcome and treatment columns with their public bounds."""

    covariates: tuple[str, ...]
    outcome: str
    treatment: str
    outcome_bounds: tuple[float, float]
    """The public [lo, hi] every outcome is clipped to (``bounds.outcome``)."""
    covariate_bounds: tuple[tuple[float, float], ...]
    """The public [lo, hi] of each covariate, in the order of ``covariates``."""

    @classmethod
    def from_spec(cls, spec: CommonSpec, command: str) -> ArmColumns:
        """The record of ``spec``; the command has checked its own needs first (with its own
        messages), so the errors here only guard that nothing was missed."""
        cols, bounds = spec.data.columns, spec.bounds
        if cols.outcome is None or cols.treatment is None:
            raise SpecError(f"data.columns: {command} needs both 'outcome' and 'treatment' columns")
        if bounds.outcome is None:
            raise MissingBoundsError(f"bounds.outcome is missing: {command} needs public outcome "
                                     "bounds [lo, hi]")
        covariate_bounds = []
        for name in cols.covariates:
            bound = bounds.covariate(name)
            if bound is None:
                raise MissingBoundsError(f"bounds.covariates has no bound for {name}: {command} "
                                         "needs public bounds for every covariate")
            covariate_bounds.append(bound)
        return cls(tuple(cols.covariates), cols.outcome, cols.treatment, bounds.outcome,
                   tuple(covariate_bounds))

    def numeric_domain(self) -> dict[str, tuple[float, float]]:
        """Every covariate and the outcome with its public range (the audit's row domain)."""
        return {**dict(zip(self.covariates, self.covariate_bounds, strict=True)),
                self.outcome: self.outcome_bounds}
