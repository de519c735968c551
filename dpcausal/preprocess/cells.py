"""Reading cells row by row: numbers, declared levels and arm labels, and the bad cells of a table
(counted per column and kind, with the first row), never quoting a value.

Pure pandas/NumPy (no pyarrow): the same functions run on a whole table in memory and on every
batch of the streaming engines, which add up the counts over batches (:class:`Problems`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpcausal.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

NULL_TOKENS = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
               "1.#QNAN", "N/A", "NA", "NULL", "NaN", "n/a", "nan", "null")
"""Text that means a missing cell: the CSV reader's (pyarrow's) null markers. A numeric CSV
column reads them as missing; a text column keeps them as text, so they are matched here (after
the declared levels: a level named "NA" stays a level)."""


def is_number_column(col: pd.Series) -> bool:
    """True for a NumPy bool/int/uint/float column (what Parquet and typed CSV give)."""
    return isinstance(col.dtype, np.dtype) and col.dtype.kind in "biuf"


def is_number(value: Any) -> bool:
    """True for a bool, int or float label (compared as a number with a number column)."""
    return isinstance(value, bool | int | float)


def text_missing(text: pd.Series) -> BoolArray:
    """Missing cells of a text column: null, or one of :data:`NULL_TOKENS`."""
    return np.asarray(text.isna().to_numpy() | text.isin(NULL_TOKENS).to_numpy(), dtype=bool)


def numbers(col: pd.Series) -> tuple[FloatArray, BoolArray, BoolArray]:
    """``(values, missing, non_numeric)`` of a column as float64: a missing or non-numeric cell is
    NaN in ``values`` and flagged in its mask (infinite values stay, as ±inf)."""
    import pandas as pd

    if is_number_column(col):
        x = col.to_numpy(dtype=np.float64, copy=True)
        return x, np.isnan(x), np.zeros(len(x), dtype=bool)
    if pd.api.types.is_bool_dtype(col):
        x = col.astype("float64").to_numpy(dtype=np.float64, na_value=np.nan)
        return x, np.isnan(x), np.zeros(len(x), dtype=bool)
    text = col.astype("string")
    missing = text_missing(text)
    x = pd.to_numeric(text.where(~missing), errors="coerce").to_numpy(dtype=np.float64,
                                                                       na_value=np.nan)
    return x, missing, np.isnan(x) & ~missing


def label_matches(col: pd.Series, label: Any) -> BoolArray:
    """Where ``col`` holds ``label``: numbers compare as numbers, anything else as text (a text
    label never matches a number column)."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
        if is_number(label):
            return np.asarray((col == label).to_numpy(dtype=bool, na_value=False))
        return np.zeros(len(col), dtype=bool)
    return np.asarray((col.astype("string") == str(label)).to_numpy(dtype=bool, na_value=False))


def level_codes(col: pd.Series, levels: Sequence[Any], texts: Sequence[str]
                ) -> tuple[npt.NDArray[np.int64], BoolArray]:
    """``(code, missing)``: each cell's index in ``levels`` (−1: none of them) and whether it is
    missing. Number columns compare with the numeric levels as numbers; text columns with every
    level's text (``texts``), exactly. A missing cell is one that matches no level and is null or
    a :data:`NULL_TOKENS` text."""
    import pandas as pd

    n = len(col)
    if pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
        code = np.full(n, -1, dtype=np.int64)
        for i, level in enumerate(levels):
            if is_number(level):
                code[label_matches(col, level) & (code < 0)] = i
        missing = np.asarray(col.isna().to_numpy(), dtype=bool) & (code < 0)
        return code, missing
    text = col.astype("string")
    code = pd.Index(list(texts), dtype=object).get_indexer(text.to_numpy(dtype=object,
                                                                           na_value=None))
    return code.astype(np.int64), text_missing(text) & (code < 0)


@dataclass(frozen=True)
class Problem:
    """One kind of bad cell in one column: how many, the first (0-based global row), and the
    sentence that says what is wrong and how to fix it (never a cell's value)."""

    column: str
    what: str
    fix: str
    count: int
    first: int

    def line(self) -> str:
        """``column 'x' has 3 <what> (first at data row 12); <fix>``."""
        return (f"column '{self.column}' has {self.count} {self.what} (first at data row "
                f"{self.first + 1}); {self.fix}")


@dataclass
class Problems:
    """Bad cells of a table, keyed by (column, what); batches of one table add up."""

    found: dict[tuple[str, str], Problem] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.found)

    def add(self, column: str, what: str, fix: str, bad: BoolArray, start: int = 0) -> None:
        """Count the cells where ``bad`` holds (rows numbered from ``start``)."""
        if not bad.any():
            return
        problem = Problem(column, what, fix, int(bad.sum()), start + int(np.argmax(bad)))
        self.merge_one(problem)

    def merge_one(self, p: Problem) -> None:
        """Add one problem's count; keep the earliest first row."""
        old = self.found.get((p.column, p.what))
        if old is not None:
            p = Problem(p.column, p.what, p.fix, old.count + p.count, min(old.first, p.first))
        self.found[(p.column, p.what)] = p

    def merge(self, other: Problems) -> Problems:
        """Add ``other``'s counts into this one (another batch of the same table)."""
        for p in other.found.values():
            self.merge_one(p)
        return self

    def error(self, path: Any, what: str = "data file", order: Sequence[str] = ()) -> DataError:
        """One DataError listing every problem of every column (in ``order``'s column order, then
        by kind), so a table read whole and read in batches give the same message."""
        rank = {c: i for i, c in enumerate(order)}
        items = sorted(self.found.values(),
                       key=lambda p: (rank.get(p.column, len(rank)), p.column, p.what))
        first = items[0].column
        if len(items) == 1:
            return DataError(f"{path}: {items[0].line()}", file=path, column=first)
        columns = len({p.column for p in items})
        lines = "\n".join(f"  - {p.line()}" for p in items)
        return DataError(f"{path}: the {what} has bad values in {columns} column(s), every "
                         f"problem listed here (nothing was computed, spent or written):\n{lines}",
                         file=path, column=first)
