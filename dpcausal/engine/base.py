"""What every engine offers a method: a fixed, public partition of the rows into pieces, and
``map_sum`` — a per-piece statistic summed on the client in piece order.

A piece is a run of consecutive rows (Parquet row groups of one file, or a whole CSV file) whose
global start row is known from metadata alone, so anything public that depends on rows (a split,
a subsample) is a function of the global row index and not of how the rows are partitioned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dpcausal.errors import EXIT_IO, DataError, DPCausalError
from dpcausal.io.tables import TableInfo, parquet_files


class EngineError(DPCausalError):
    """An engine (a Dask scheduler or worker) failed: nothing was released, written or charged."""

    exit_code = EXIT_IO


@dataclass(frozen=True, slots=True)
class Piece:
    """Consecutive rows ``[start, start + n_rows)`` of the table: row groups of one Parquet file
    (``row_groups``), or a whole CSV file (``row_groups`` is None)."""

    path: Path
    start: int
    n_rows: int
    row_groups: tuple[int, ...] | None


def plan_pieces(info: TableInfo, target_rows: int) -> list[Piece]:
    """Cut the table into pieces of about ``target_rows`` rows, from metadata only (no row read).

    Parquet: consecutive row groups of one file are grouped until ``target_rows`` is reached, in
    file order. CSV: one piece (it is streamed in batches by the local engine)."""
    if info.format != "parquet":
        return [Piece(info.path.resolve(), 0, info.n_rows, None)]
    pieces: list[Piece] = []
    start = 0
    for f in parquet_files(info.path):
        f = f.resolve()  # workers of a remote cluster do not share our working directory
        meta = pq.ParquetFile(f).metadata
        group: list[int] = []
        rows = 0
        for rg in range(meta.num_row_groups):
            group.append(rg)
            rows += meta.row_group(rg).num_rows
            if rows >= target_rows:
                pieces.append(Piece(f, start, rows, tuple(group)))
                start, group, rows = start + rows, [], 0
        if group and rows:
            pieces.append(Piece(f, start, rows, tuple(group)))
            start += rows
    return pieces


def _where(path: Path, start: int) -> str:
    return f"{path} (batch from data row {start + 1})"


def batch_error(exc: DataError, start: int) -> DataError:
    """A per-batch DataError with every 'data row k' (counted within the batch) rewritten to the
    global row number, as the in-memory path would report it."""
    message = re.sub(r"data row (\d+)", lambda m: f"data row {int(m.group(1)) + start}", str(exc))
    return DataError(f"{message} (counts are within the batch that starts at data row {start + 1})")


def iter_piece(piece: Piece, columns: Sequence[str], batch_rows: int
               ) -> Iterator[tuple[int, pd.DataFrame]]:
    """Stream ``(global start row, frame)`` batches of a piece, reading only ``columns``."""
    cols = list(dict.fromkeys(columns))
    start = piece.start
    try:
        if piece.row_groups is None:
            reader = pacsv.open_csv(
                piece.path, read_options=pacsv.ReadOptions(block_size=max(batch_rows * 64, 1 << 20)),
                convert_options=pacsv.ConvertOptions(include_columns=cols))
            batches: Any = reader
        else:
            batches = pq.ParquetFile(piece.path).iter_batches(
                batch_size=batch_rows, row_groups=list(piece.row_groups), columns=cols)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            yield start, pa.Table.from_batches([batch]).to_pandas()
            start += batch.num_rows
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{_where(piece.path, start)}: cannot read the data file: "
                        f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
                        ) from exc


def read_piece(piece: Piece, columns: Sequence[str]) -> pd.DataFrame:
    """One piece as a single frame (the Dask engine's partition)."""
    frames = [f for _, f in iter_piece(piece, columns, max(piece.n_rows, 1))]
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def tree_add(a: Any, b: Any) -> Any:
    """Sum two statistics of the same shape: arrays, floats, or tuples/lists/dicts of them."""
    if a is None:
        return b
    if isinstance(a, tuple | list):
        return type(a)(tree_add(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return {k: tree_add(a[k], b[k]) for k in a}
    return np.add(a, b)


PrepareFn = Callable[[pd.DataFrame, int], Any]
"""(frame of one batch, its global start row) → the method's per-row mapped arrays."""
StatFn = Callable[[Any, int], Any]
"""(prepared batch, its global start row) → a statistic to be summed over batches."""


class Engine(Protocol):
    """The data-pass interface a method's engine path uses."""

    n_rows: int
    description: str
    passes: int

    def load(self, prepare: PrepareFn) -> None:
        """Set the per-batch row mapping (clipping, features); every later pass starts from it."""

    def map_sum(self, stat: StatFn) -> Any:
        """Σ over batches of ``stat(prepared batch, start)``, summed on the client in row order."""

    def map_list(self, stat: StatFn) -> list[Any]:
        """``[stat(prepared batch, start) ...]`` in row order (for small public-index subsamples)."""

    def close(self) -> None:
        """Release the engine's resources."""
