"""The local streaming engine: passes read the table in column-projected batches (Parquet row
groups, CSV blocks). Mapped batches are kept in memory up to ``cache_mb``; the batches beyond it
are re-read and re-mapped on every pass, so peak memory is set by ``cache_mb`` and ``batch_rows``,
not by the table size. A CSV file is streamed once more when the engine starts, to fix its column
types over the whole file as the in-memory reader does (``tables.csv_column_types``); every read
checks the file is still the one inspected and yields the rows counted (``base.iter_piece``).

With a preprocessor (``dpcausal.preprocess``), every batch is transformed before ``prepare``, and
the first pass checks every batch's cells: its problems are added up over all batches (no batch
is prepared after the first bad one) and the pass ends with one error listing them all, before
any statistic of the pass is returned (so before any noise)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dpcausal.engine.base import PrepareFn, StatFn, iter_piece, plan_pieces, tree_add
from dpcausal.io.tables import TableInfo
from dpcausal.preprocess.cells import Problems


def _nbytes(obj: Any) -> int:
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, tuple | list):
        return sum(_nbytes(o) for o in obj)
    return 64


class LocalEngine:
    """Stream batches of ``batch_rows`` rows; sum the per-batch statistics in row order."""

    def __init__(self, info: TableInfo, columns: Sequence[str], batch_rows: int,
                 cache_mb: int = 0, prep: Any = None) -> None:
        self.n_rows = info.n_rows
        self.path = info.path
        self.prep = prep
        self._checked = prep is None
        self.columns = list(columns)
        self.pieces = plan_pieces(info, batch_rows, self.columns)
        self.batch_rows = batch_rows
        self.cache_bytes = cache_mb * 1024 * 1024
        self.description = (f"local streaming ({batch_rows} rows per batch, "
                            f"cache {cache_mb} MB)")
        self.passes = 0
        self._prepare: PrepareFn | None = None
        self._cache: list[tuple[int, Any]] = []
        self._cached_rows = -1  # rows covered by the cache; -1 until the first pass ends
        self._used = 0

    def load(self, prepare: PrepareFn) -> None:
        self._prepare = prepare
        self._cache, self._cached_rows, self._used = [], -1, 0

    def _batches(self) -> Iterator[tuple[int, Any]]:
        assert self._prepare is not None, "load() first"
        self.passes += 1
        first = self._cached_rows < 0
        if first:  # an earlier first pass did not finish: start the cache afresh
            self._cache, self._used = [], 0
        yield from self._cache
        skip = max(self._cached_rows, 0)
        filling = first
        found = Problems()
        for piece in self.pieces:
            if piece.start + piece.n_rows <= skip:
                continue
            for start, frame in iter_piece(piece, self.columns, self.batch_rows):
                if start < skip:
                    continue
                if self.prep is not None:
                    if not self._checked:
                        found.merge(self.prep.problems(frame, start))
                        if found:  # keep counting; prepare nothing more
                            continue
                    frame = self.prep.transform(frame)
                part = self._prepare(frame, start)
                del frame
                if filling:
                    size = _nbytes(part)
                    if self._used + size <= self.cache_bytes:
                        self._cache.append((start, part))
                        self._used += size
                    else:
                        filling = False
                        self._cached_rows = start
                yield start, part
        if not self._checked:  # a whole pass: every row was checked
            if found:
                raise self.prep.error(found, self.path)
            self._checked = True
        if first and filling:
            self._cached_rows = self.n_rows

    def map_sum(self, stat: StatFn) -> Any:
        total = None
        for start, part in self._batches():
            total = tree_add(total, stat(part, start))
        return total

    def map_list(self, stat: StatFn) -> list[Any]:
        return [stat(part, start) for start, part in self._batches()]

    def close(self) -> None:
        self._prepare = None
        self._cache = []
