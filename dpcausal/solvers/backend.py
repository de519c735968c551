"""Where a solver's data passes run: a backend sums a per-piece statistic over the rows.

A solver written against :class:`Backend` has one implementation whatever holds the rows: the
prepared table in memory (:class:`InMemory`, one piece), or an engine's batches and partitions
(:mod:`dpcausal.engine`, which implements the same two methods). A statistic is a function
``stat(piece, start)`` of one piece of prepared rows and the global index of its first row; a
backend adds the statistics of its pieces in row order (``map_sum``) or returns them
(``map_list``), so anything that depends on row positions is a function of the global index and
not of the partitioning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

StatFn = Callable[[Any, int], Any]
"""(prepared piece, its global start row) → a statistic to be summed over pieces."""


class Backend(Protocol):
    """The data passes a solver may make."""

    @property
    def n_rows(self) -> int:
        """The number of rows (public)."""

    def map_sum(self, stat: StatFn) -> Any:
        """Σ over pieces of ``stat(piece, start)``, summed in row order."""

    def map_list(self, stat: StatFn) -> list[Any]:
        """``[stat(piece, start) ...]`` in row order (for small public-index subsamples)."""


@dataclass
class InMemory:
    """The in-memory backend: the whole prepared table as one piece starting at row 0."""

    piece: Any
    n_rows: int
    passes: int = 0
    """Passes made so far (public facts of the solver's path; never published)."""

    def map_sum(self, stat: StatFn) -> Any:
        """``stat(piece, 0)``: one piece, nothing to add."""
        self.passes += 1
        return stat(self.piece, 0)

    def map_list(self, stat: StatFn) -> list[Any]:
        """``[stat(piece, 0)]``."""
        self.passes += 1
        return [stat(self.piece, 0)]
