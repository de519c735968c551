"""A table given in memory (the Python API's DataFrame or Arrow table) standing in for the data file.

For the length of one run the API registers the table under a label (``<DataFrame>``) and points
the spec's ``data.path`` at that label; :func:`dpcausal.io.tables.inspect_table` and
:func:`~dpcausal.io.tables.read_table` then read the registered table instead of a file. So every
reader of the data path — the pipeline, a command's side input on its own data file (the panel
structure of synth-control), synth-control's wide header — sees the table through the same column
checks, and its rows through the same Arrow types, as a file's.

What differs from a file, and why it is sound: the row count ``len(table)`` is public by the same
assumption as a file's (the neighbouring relation replaces a row, it never adds one); there is no
file identity to compare (size, mtime), as nothing can rewrite the table between the plan and the
read except the caller's own code; and the release is rendered as from a CSV file (CSV tables, no
Parquet copies).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from dpcausal.errors import DataError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

LABELS = {"dataframe": Path("<DataFrame>"), "arrow": Path("<Arrow table>")}
"""The labels an in-memory table is registered and named under (in messages: ``<DataFrame>:
column 'x' ...``)."""


@dataclass(frozen=True, eq=False)
class MemoryTable:
    """A pandas DataFrame or an Arrow table registered under ``label``."""

    label: Path
    data: pd.DataFrame | pa.Table

    @property
    def columns(self) -> tuple[str, ...]:
        """The column names (a DataFrame's non-string names as ``str(name)``)."""
        names = self.data.column_names if _is_arrow_table(self.data) else self.data.columns
        return tuple(str(c) for c in names)

    @property
    def n_rows(self) -> int:
        """The number of rows: public, as a file's row count is."""
        return self.data.num_rows if _is_arrow_table(self.data) else len(self.data)

    def read(self, columns: list[str]) -> pd.DataFrame:
        """``columns`` (unique, present: the caller has checked) as a new DataFrame with the types a
        file gives: each column goes through Arrow as a file's does, so a pandas-only type
        (categorical, nullable integer, mixed objects) arrives as the plain type a file would
        hold, or is refused naming the column (never quoting a cell)."""
        return self.read_arrow(columns).to_pandas()

    def read_arrow(self, columns: list[str]) -> pa.Table:
        """``columns`` as the Arrow table :meth:`read` converts to pandas."""
        import pyarrow as pa

        arrays = [_column(self, c) for c in columns]
        return pa.Table.from_arrays(arrays, names=list(columns))


def _is_arrow_table(data: Any) -> bool:
    """Whether ``data`` is a pyarrow Table (without importing pyarrow when nothing has)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(data, pa.Table)


def _column(table: MemoryTable, name: str) -> pa.ChunkedArray:
    import pyarrow as pa
    import pyarrow.compute as pc

    data = table.data
    try:
        if not _is_arrow_table(data):  # a pandas DataFrame
            position = [str(c) for c in data.columns].index(name)
            col = pa.chunked_array([pa.Array.from_pandas(data.iloc[:, position])])
        else:
            col = data.column(data.column_names.index(name))
        if pa.types.is_dictionary(col.type):  # a categorical: its values, as a file holds them
            col = pc.cast(col, col.type.value_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise DataError(
            f"{table.label}: column '{name}' cannot be read as one typed column (mixed or "
            f"unsupported values, {type(exc).__name__}; content not shown): give each column one "
            "type, as a CSV or Parquet file would hold it", file=table.label, column=name) from exc
    return col


_TABLES: ContextVar[Mapping[Path, MemoryTable] | None] = ContextVar("dpcausal_memory_tables",
                                                                     default=None)


def lookup(path: Path | None) -> MemoryTable | None:
    """The in-memory table registered under ``path`` in this context, if any."""
    tables = _TABLES.get()
    return None if path is None or tables is None else tables.get(Path(path))


@contextmanager
def registered(table: MemoryTable) -> Iterator[Path]:
    """Register ``table`` under its label for the body of the ``with`` (this thread or task
    only: a context variable); yields the label."""
    token = _TABLES.set({**(_TABLES.get() or {}), table.label: table})
    try:
        yield table.label
    finally:
        _TABLES.reset(token)


def as_memory_table(data: Any) -> MemoryTable | None:
    """``data`` as an in-memory table: a pandas DataFrame, a pyarrow Table, or any object with the
    Arrow C stream interface (``__arrow_c_stream__``: polars, DuckDB results...); None for
    anything else (a path).

    A path (or None) is answered without importing pandas or pyarrow: a caller holding a
    DataFrame or an Arrow table has imported its library already, so only then is it checked
    against.
    """
    if data is None or isinstance(data, str | PurePath):
        return None
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(data, pd.DataFrame):
        if isinstance(data.columns, pd.MultiIndex):
            raise DataError(f"{LABELS['dataframe']}: the DataFrame has MultiIndex columns; "
                            "flatten them to one name per column", file=LABELS["dataframe"])
        return MemoryTable(LABELS["dataframe"], data)
    if _is_arrow_table(data):
        return MemoryTable(LABELS["arrow"], data)
    if hasattr(data, "__arrow_c_stream__"):
        import pyarrow as pa

        return MemoryTable(LABELS["arrow"], pa.table(data))
    return None
