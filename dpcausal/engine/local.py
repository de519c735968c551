"""The local streaming engine: every pass re-reads the table in column-projected batches (Parquet
row groups, CSV blocks), so peak memory is set by ``batch_rows``, not by the table size."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpcausal.engine.base import PrepareFn, StatFn, iter_piece, plan_pieces, tree_add
from dpcausal.io.tables import TableInfo


class LocalEngine:
    """Stream batches of ``batch_rows`` rows; sum the per-batch statistics in row order."""

    def __init__(self, info: TableInfo, columns: Sequence[str], batch_rows: int) -> None:
        self.n_rows = info.n_rows
        self.pieces = plan_pieces(info, batch_rows)
        self.columns = list(columns)
        self.batch_rows = batch_rows
        self.description = f"local streaming ({batch_rows} rows per batch)"
        self.passes = 0
        self._prepare: PrepareFn | None = None

    def load(self, prepare: PrepareFn) -> None:
        self._prepare = prepare

    def _batches(self) -> Any:
        assert self._prepare is not None, "load() first"
        self.passes += 1
        for piece in self.pieces:
            for start, frame in iter_piece(piece, self.columns, self.batch_rows):
                yield start, self._prepare(frame, start)

    def map_sum(self, stat: StatFn) -> Any:
        total = None
        for start, part in self._batches():
            total = tree_add(total, stat(part, start))
        return total

    def map_list(self, stat: StatFn) -> list[Any]:
        return [stat(part, start) for start, part in self._batches()]

    def close(self) -> None:
        self._prepare = None
