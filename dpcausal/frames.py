"""What a command needs of tables and files without reading any: a DataFrame's columns as
validated float64 arrays, and whether two paths name one file.

Commands receive their rows as pandas DataFrames from the pipeline (in memory) or from an engine's
batches; reading and writing files is ``dpcausal.io``'s job (it owns pyarrow), and this module
imports neither, so no command's method loads I/O.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpcausal.errors import DataError

if TYPE_CHECKING:
    import pandas as pd


def same_file(a: Path, b: Path) -> bool:
    """True when both paths name one file (symbolic and hard links included)."""
    try:
        return Path(a).resolve() == Path(b).resolve() or os.path.samefile(a, b)
    except OSError:
        return False


def numeric_column(frame: pd.DataFrame, column: str, path: Path | None) -> npt.NDArray[np.float64]:
    """Return ``column`` as a new float64 array, refusing non-numeric, missing and infinite values.

    The error names the file, the column and how many rows are bad, and points at the first one.
    A column that is already a plain NumPy int/uint/float column (what Parquet and typed CSV give)
    takes a fast path with the same result: only its finiteness needs checking.
    """
    import pandas as pd

    series = frame[column]
    if isinstance(series.dtype, np.dtype) and series.dtype.kind in "fiu":
        arr = series.to_numpy(dtype=np.float64, copy=True)
        _check_finite(arr, column, path)
        return arr
    if pd.api.types.is_bool_dtype(series):
        series = series.astype("float64")
    values = pd.to_numeric(series, errors="coerce")
    arr = values.to_numpy(dtype=np.float64, na_value=np.nan)
    was_missing = series.isna().to_numpy()
    non_numeric = np.isnan(arr) & ~was_missing
    if non_numeric.any():
        first = int(np.flatnonzero(non_numeric)[0])
        raise DataError(
            f"{path}: column '{column}' has {int(non_numeric.sum())} non-numeric value(s) "
            f"(first at data row {first + 1}); the column must be numeric", file=path,
            column=column
        )
    _check_finite(arr, column, path)
    return arr


def numeric_matrix(frame: pd.DataFrame, columns: list[str], path: Path | None
                   ) -> npt.NDArray[np.float64]:
    """``np.column_stack([numeric_column(frame, c, path) for c in columns])``, the same values and
    errors, filled column by column into one (Fortran-ordered) array without the extra copies."""
    out = np.empty((len(frame), len(columns)), dtype=np.float64, order="F")
    for j, column in enumerate(columns):
        series = frame[column]
        if isinstance(series.dtype, np.dtype) and series.dtype.kind in "fiu":
            out[:, j] = series.to_numpy()
            _check_finite(out[:, j], column, path)
        else:
            out[:, j] = numeric_column(frame, column, path)
    return out


def numeric_columns(frame: pd.DataFrame, columns: list[str], path: Path | None
                    ) -> list[npt.NDArray[np.float64]]:
    """``[numeric_column(frame, c, path) for c in columns]``, the same values and errors, but a
    plain NumPy float64 column is returned without a copy (possibly a read-only view of the
    frame: do not write into the arrays)."""
    out = []
    for column in columns:
        series = frame[column]
        if isinstance(series.dtype, np.dtype) and series.dtype == np.float64:
            arr = series.to_numpy()
            _check_finite(arr, column, path)
            out.append(arr)
        else:
            out.append(numeric_column(frame, column, path))
    return out


def _check_finite(arr: npt.NDArray[np.float64], column: str, path: Path | None) -> None:
    bad = ~np.isfinite(arr)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{path}: column '{column}' has {int(bad.sum())} missing, NaN or infinite value(s) "
            f"(first at data row {first + 1}); dpcausal never drops rows: fix or remove them "
            "before the run (a rule that depends only on each row itself, applied to every row)",
            file=path, column=column
        )
