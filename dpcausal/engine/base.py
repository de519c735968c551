"""What every engine offers a method: a fixed, public partition of the rows into pieces, and
``map_sum`` — a per-piece statistic summed on the client in piece order.

A piece is a run of consecutive rows (Parquet row groups of one file, or a whole CSV file) whose
global start row is known from metadata alone, so anything public that depends on rows (a split,
a subsample) is a function of the global row index and not of how the rows are partitioned.

The rows streamed are the rows counted: n (public, from the inspection) sets every sensitivity,
so each piece carries its file's identity (``tables.file_identity``) as inspected, which is checked
whenever the piece is opened (every local batch pass, every Dask partition read, recomputes
included) and after it is read, and the rows it yields are counted against ``piece.n_rows``. A
file that changed fails the run with ``changed_error`` (exit 2) before anything is released.
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

from dpcausal.errors import DataError
from dpcausal.io import tables
from dpcausal.io.tables import (
    TableInfo,
    changed_error,
    csv_column_types,
    file_identity,
    parquet_files,
    safe_reason,
)
from dpcausal.solvers.backend import Backend, StatFn


@dataclass(frozen=True, slots=True)
class Piece:
    """Consecutive rows ``[start, start + n_rows)`` of the table: row groups of one Parquet file
    (``row_groups``), or a whole CSV file (``row_groups`` is None)."""

    path: Path
    start: int
    n_rows: int
    row_groups: tuple[int, ...] | None
    identity: tuple[int, ...] | None = None
    """The file's ``tables.file_identity`` at inspection (None only for hand-made pieces)."""
    csv_types: tuple[tuple[str, pa.DataType], ...] | None = None
    """CSV: the column types fixed over the whole file (``tables.csv_column_types``)."""


def _stamps(info: TableInfo) -> dict[Path, tables.FileStamp]:
    """The inspection's file stamps by resolved path (taken now when the info has none)."""
    if info.files:
        return {s.path.resolve(): s for s in info.files}
    fresh = tables.inspect_table(info.path)
    if fresh.n_rows != info.n_rows:
        raise changed_error(info.path)
    return {s.path.resolve(): s for s in fresh.files}


def check_identity(path: Path, identity: tuple[int, ...] | None) -> None:
    """Refuse when ``path`` is no longer the file that was inspected."""
    if identity is None:
        return
    try:
        now = file_identity(path)
    except OSError as exc:
        raise changed_error(path) from exc
    if now != identity:
        raise changed_error(path)


def plan_pieces(info: TableInfo, target_rows: int, columns: Sequence[str] | None = None
                ) -> list[Piece]:
    """Cut the table into pieces of about ``target_rows`` rows.

    Parquet: consecutive row groups of one file are grouped until ``target_rows`` is reached, in
    file order, from the footers alone (no row read); each file must still be the one inspected
    and the footers' row counts must add up to ``info.n_rows``. CSV: one piece (streamed in
    batches by the local engine); with ``columns``, the file is streamed once here to fix their
    types over the whole file (as the in-memory reader does) and to count its rows."""
    stamps = _stamps(info)
    if info.format != "parquet":
        path = info.path.resolve()
        stamp = stamps.get(path)
        if stamp is None:  # not the file inspected (e.g. a symlink re-pointed since)
            raise changed_error(path)
        identity = stamp.identity
        check_identity(path, identity)
        types = None
        if columns is not None:
            found, rows = csv_column_types(path, list(columns), tables.CSV_BLOCK_BYTES)
            check_identity(path, identity)
            if rows != info.n_rows:
                raise changed_error(path)
            types = tuple(found.items())
        return [Piece(path, 0, info.n_rows, None, identity, types)]
    pieces: list[Piece] = []
    start = 0
    for f in parquet_files(info.path):
        f = f.resolve()  # workers of a remote cluster do not share our working directory
        stamp = stamps.get(f)
        if stamp is None:  # a file appeared after the inspection
            raise changed_error(f)
        identity = stamp.identity
        check_identity(f, identity)
        meta = pq.ParquetFile(f).metadata
        if meta.num_rows != stamp.n_rows:
            raise changed_error(f)
        group: list[int] = []
        rows = 0
        for rg in range(meta.num_row_groups):
            group.append(rg)
            rows += meta.row_group(rg).num_rows
            if rows >= target_rows:
                pieces.append(Piece(f, start, rows, tuple(group), identity))
                start, group, rows = start + rows, [], 0
        if group and rows:
            pieces.append(Piece(f, start, rows, tuple(group), identity))
            start += rows
    if start != info.n_rows:
        raise changed_error(info.path)
    return pieces


def _where(path: Path, start: int) -> str:
    return f"{path} (batch from data row {start + 1})"


def batch_error(exc: DataError, start: int) -> DataError:
    """A per-batch DataError with every 'data row k' (counted within the batch) rewritten to the
    global row number, as the in-memory path would report it."""
    message = re.sub(r"data row (\d+)", lambda m: f"data row {int(m.group(1)) + start}", str(exc))
    return DataError(f"{message} (a count covers only the batch of rows that holds it: the whole "
                     "file may have more)")


def iter_piece(piece: Piece, columns: Sequence[str], batch_rows: int
               ) -> Iterator[tuple[int, pd.DataFrame]]:
    """Stream ``(global start row, frame)`` batches of a piece, reading only ``columns``.

    The file must still be the one inspected (checked when opened and when read to the end) and
    must yield exactly ``piece.n_rows`` rows; otherwise ``changed_error``. Read errors never
    echo a cell value (``tables.safe_reason``)."""
    cols = list(dict.fromkeys(columns))
    start = piece.start
    end = piece.start + piece.n_rows
    check_identity(piece.path, piece.identity)
    try:
        if piece.row_groups is None:
            types = dict(piece.csv_types) if piece.csv_types is not None else {}
            reader = pacsv.open_csv(
                piece.path,
                read_options=pacsv.ReadOptions(
                    block_size=max(batch_rows * 64, tables.CSV_BLOCK_BYTES)),
                convert_options=pacsv.ConvertOptions(
                    include_columns=cols, column_types={c: t for c, t in types.items()
                                                        if c in cols}))
            batches: Any = reader
        else:
            batches = pq.ParquetFile(piece.path, page_checksum_verification=True).iter_batches(
                batch_size=batch_rows, row_groups=list(piece.row_groups), columns=cols)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if start + batch.num_rows > end:  # more rows than counted: never use them
                raise changed_error(piece.path)
            yield start, pa.Table.from_batches([batch]).to_pandas()
            start += batch.num_rows
    except (pa.ArrowInvalid, OSError) as exc:
        check_identity(piece.path, piece.identity)  # a changed file is the better diagnosis
        raise DataError(f"{_where(piece.path, start)}: cannot read the data file: "
                        f"{safe_reason(exc)}") from exc
    if start != end:
        raise changed_error(piece.path)
    check_identity(piece.path, piece.identity)


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


class Engine(Backend, Protocol):
    """The data-pass interface a command's engine path uses: a solver's :class:`Backend` (every
    pass a ``map_sum`` or ``map_list`` of per-batch statistics) whose rows are read and mapped
    batch by batch."""

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
