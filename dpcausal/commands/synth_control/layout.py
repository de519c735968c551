"""The panel's public structure (:class:`~.panel.PanelLayout`) read from its unit and time values
as Arrow arrays, without pandas (issue 24: ``import pandas`` alone cost more than the whole plan).

The plan reads the structure from the side input "panel" (an Arrow table of the unit and time
columns); a release, an audit or a test hands a DataFrame, whose structure columns are taken
back to Arrow (the types :func:`dpcausal.io.tables.read_table` converted them from), so one
function decides the structure of every run. The layout's values are the Python values pandas
held before (``datetime.datetime`` where pandas had an equal ``Timestamp``): the receipt, the
tables and the refusals are unchanged. What is public is unchanged too: the unit and time
columns only (spec §1.3 and §6.4).

Types: integers, floats, text, booleans, dates and timestamps (naive or with a zone) behave as
under pandas; a dictionary-encoded (categorical) column is read as its plain values (sorted by
value, as a memory table's categorical already was), not in its category order.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.synth_control.panel import (
    MAX_NAMED,
    LongColumns,
    PanelLayout,
    _plain,
    data_columns,
    panel_columns,
    structure_columns,
    unit_key,
)
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import DataError, SpecError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

BoolArray = npt.NDArray[np.bool_]

_ISO = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?")
"""The ISO forms of a treatment time compared without pandas (any other string goes through
``pd.Timestamp``, as before)."""

_NS_RANGE = (np.datetime64("1678-01-01", "D"), np.datetime64("2262-01-01", "D"))
"""Within this range a date converts to nanoseconds without overflow (numpy's comparison of a
``datetime64[ns]`` column with a coarser stamp converts the stamp)."""


def build_layout(spec: SynthControlSpec, table: pa.Table | pd.DataFrame,
                 path: Path | None) -> PanelLayout:
    """Read the public structure from the unit/time columns (long) or the header and time (wide).

    Refuses a missing target or donor, an unbalanced panel (naming the unit and period), duplicate
    cells, and T0 < 1 or no post period.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    sec = spec.synth_control
    cols = panel_columns(spec)
    table = _as_arrow(table, structure_columns(spec))
    if isinstance(cols, LongColumns):
        unit_col = _column(table, cols.unit)
        if _has_missing(unit_col):
            raise DataError(f"{path}: column '{cols.unit}' (unit) has missing values")
        encoded = pc.dictionary_encode(unit_col.combine_chunks())  # in order of appearance
        codes = _integers(encoded.indices)
        uniques = _python_values(encoded.dictionary)
        keys = [unit_key(u) for u in uniques]
        by_key = {k: i for i, k in enumerate(keys)}
        if len(by_key) != len(keys):
            raise DataError(f"{path}: column '{cols.unit}' has unit ids that differ only in type "
                            "(e.g. 3 and '3'); make them unique")
        tkey = unit_key(sec.target)
        if tkey not in by_key:
            raise SpecError(f"synth_control.target: unit {sec.target!r} is not in column "
                            f"'{cols.unit}' of {path}; check the target id")
        if sec.donors is not None:
            missing = [d for d in sec.donors if unit_key(d) not in by_key]
            if missing:
                raise SpecError(f"synth_control.donors: unit(s) {', '.join(map(repr, missing))} "
                                f"not in column '{cols.unit}' of {path}")
            donor_idx = [by_key[unit_key(d)] for d in sec.donors]
        else:
            donor_idx = [i for i, k in enumerate(keys) if k != tkey]
        used = [by_key[tkey], *donor_idx]
        if len(used) < 2:
            raise DataError(f"{path}: no donor units besides the target {sec.target!r}")
        pos = np.full(len(uniques), -1, dtype=np.int64)
        pos[used] = np.arange(len(used))
        row_unit = pos[codes]
        keep = row_unit >= 0
        rows = np.flatnonzero(keep).astype(np.int64)
        time_col = _column(table, cols.time)
        kept = time_col.combine_chunks().take(
            pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)]))
        times = _sorted_times(kept, path, cols.time)
        values = _python_values(times)
        if pa.types.is_integer(time_col.type) and time_col.null_count:
            values = [float(v) for v in values]  # pandas held the column as floats (NaN)
        row_time = _integers(pc.index_in(kept, value_set=times))
        counts = np.bincount(row_unit[keep] * len(times) + row_time,
                             minlength=len(used) * len(times)).reshape(len(used), len(times))
        _check_cells(counts, [uniques[i] for i in used], values, path)
        target, donors = uniques[used[0]], tuple(uniques[i] for i in donor_idx)
    else:
        tcol = _column(table, cols.time).combine_chunks()
        times = _sorted_times(tcol, path, cols.time)
        values = _python_values(times)
        if len(times) != len(tcol):
            codes = _integers(pc.dictionary_encode(tcol).indices)
            repeated = np.ones(len(codes), dtype=bool)
            repeated[np.unique(codes, return_index=True)[1]] = False
            dup = _python_values(tcol.slice(int(np.argmax(repeated)), 1))[0]
            raise DataError(
                f"{path}: period {_plain(dup)!r} appears in more than one row of column "
                f"'{cols.time}'; the wide layout needs one row per period")
        target = str(sec.target)
        donors = tuple(data_columns(spec)[2:])
    pre = _pre_mask(spec, times, values, path)
    t0 = int(pre.sum())
    if t0 < 1 or t0 == len(times):
        where = "before" if t0 < 1 else "at or after"
        raise SpecError(
            f"synth_control.treatment_time: no period of {path} is {where} {sec.treatment_time!r}; "
            "synth-control needs at least one pre- and one post-intervention period"
        )
    return PanelLayout(sec.layout, target, donors, tuple(values), t0)


def _as_arrow(table: pa.Table | pd.DataFrame, columns: list[str]) -> pa.Table:
    """``columns`` of ``table`` as Arrow: a DataFrame's go back to the Arrow types they were
    converted from (NaN and NaT as nulls)."""
    import pyarrow as pa

    if isinstance(table, pa.Table):
        return table
    return pa.Table.from_pandas(table[columns], preserve_index=False)


def _column(table: pa.Table, name: str) -> pa.ChunkedArray:
    """A column by name; a dictionary-encoded one as its plain values."""
    import pyarrow as pa

    col = table.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col


def _has_missing(col: pa.Array | pa.ChunkedArray) -> bool:
    """Nulls, or NaN in a float column (what ``isna`` finds in pandas)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if col.null_count:
        return True
    return pa.types.is_floating(col.type) and bool(pc.any(pc.is_nan(col)).as_py())


def _integers(arr: pa.Array) -> npt.NDArray[np.int64]:
    """An integer or timestamp Arrow array without nulls as int64, read from its data buffer:
    pyarrow's ``to_numpy`` (and ``pa.array`` of Python or numpy values) imports pandas."""
    import pyarrow as pa

    assert arr.null_count == 0
    kind = "u" if pa.types.is_unsigned_integer(arr.type) else "i"
    width = arr.type.bit_width // 8
    data = np.frombuffer(arr.buffers()[1], dtype=np.dtype(f"{kind}{width}"),
                         count=arr.offset + len(arr))
    return data[arr.offset:].astype(np.int64)


def _python_values(arr: pa.Array) -> list[Any]:
    """The values of ``arr`` as Python objects. Nanosecond timestamps are taken to microseconds
    when that loses nothing: a ``datetime`` equal to the ``Timestamp`` pandas held (pyarrow
    builds the latter, importing pandas, for nanosecond values and for any time zone; kept for
    sub-microsecond and zoned ones, as pandas held them)."""
    import pyarrow as pa

    kind = arr.type
    if pa.types.is_timestamp(kind) and kind.unit == "ns" and not np.any(_integers(arr) % 1000):
        arr = arr.cast(pa.timestamp("us", kind.tz))
    return arr.to_pylist()


def _sorted_times(values: pa.Array, path: Path | None, col: str) -> pa.Array:
    """The distinct periods in ascending order; refuses missing ones."""
    import pyarrow.compute as pc

    if _has_missing(values):
        raise DataError(
            f"{path}: column '{col}' (time) has missing values; every row needs a period")
    distinct = pc.unique(values)
    return distinct.take(pc.array_sort_indices(distinct))


def _check_cells(counts: npt.NDArray[np.int64], labels: list[Any], times: list[Any],
                 path: Path | None) -> None:
    """Refuse missing (unit, time) cells and duplicated ones, naming the first few."""
    for bad, what, fix in (
        (counts == 0, "missing", "synth-control needs a balanced panel: every used unit observed "
         "at every period. Fill the cells by a rule that uses only that unit's own series, or drop "
         "the unit or period by a public rule (never because of its values)"),
        (counts > 1, "duplicated", "keep one row per (unit, time)"),
    ):
        if bad.any():
            ui, ti = np.nonzero(bad)
            named = ", ".join(f"unit {_plain(labels[u])!r} at time {_plain(times[t])!r}"
                              for u, t in zip(ui[:MAX_NAMED], ti[:MAX_NAMED], strict=True))
            more = f" (and {len(ui) - MAX_NAMED} more)" if len(ui) > MAX_NAMED else ""
            raise DataError(f"{path}: {len(ui)} {what} panel cell(s): {named}{more}; {fix}")


def _pre_mask(spec: SynthControlSpec, times: pa.Array, values: list[Any],
              path: Path | None) -> BoolArray:
    """times < treatment_time, with a clear error when the types cannot be compared: timestamps
    as instants, numbers as numbers, anything else (text, dates, booleans) as its text."""
    import pyarrow as pa

    t_star = spec.synth_control.treatment_time
    col = spec.data.columns.time
    if pa.types.is_timestamp(times.type):
        stamp = _naive_stamp(t_star) if times.type.tz is None else None
        if stamp is None:
            return _pandas_before(spec, times, path)
        return np.asarray(_integers(times).view(f"M8[{times.type.unit}]") < stamp)
    if pa.types.is_integer(times.type) or pa.types.is_floating(times.type):
        if isinstance(t_star, bool) or not isinstance(t_star, int | float):
            raise SpecError(
                f"synth_control.treatment_time: column '{col}' of {path} holds numbers; give the "
                f"first post-intervention period as a number (got {t_star!r})"
            )
        return np.array([float(v) < float(t_star) for v in values], dtype=bool)
    if not isinstance(t_star, str):
        raise SpecError(
            f"synth_control.treatment_time: column '{col}' of {path} holds text; give the first "
            f"post-intervention period as text in the same format (got {t_star!r}), e.g. quoted"
        )
    return np.array([str(v) < t_star for v in values], dtype=bool)


def _naive_stamp(t_star: Any) -> np.datetime64 | None:
    """``pd.Timestamp(t_star)`` as a numpy datetime for the forms compared without pandas: a
    naive datetime, a date (its midnight), an integer (nanoseconds since the epoch, as pandas
    reads it) and an ISO date or date-time string; None for anything else."""
    stamp: np.datetime64 | None = None
    if isinstance(t_star, bool):
        return None
    if isinstance(t_star, int):
        return np.datetime64(t_star, "ns") if -2**63 < t_star < 2**63 else None
    if isinstance(t_star, dt.datetime):
        stamp = np.datetime64(t_star, "us") if t_star.tzinfo is None else None
    elif isinstance(t_star, dt.date):
        stamp = np.datetime64(t_star, "D")
    elif isinstance(t_star, str) and _ISO.fullmatch(t_star):
        try:
            stamp = np.datetime64(dt.datetime.fromisoformat(t_star), "us")
        except ValueError:
            return None
    if stamp is None or not _NS_RANGE[0] <= stamp < _NS_RANGE[1]:
        return None
    return stamp


def _pandas_before(spec: SynthControlSpec, times: pa.Array, path: Path | None) -> BoolArray:
    """times < pd.Timestamp(treatment_time) by pandas: for a column with a time zone and for
    treatment times :func:`_naive_stamp` leaves to it (other strings, floats, aware datetimes)."""
    import pandas as pd

    t_star = spec.synth_control.treatment_time
    series = times.to_pandas()
    try:
        stamp = pd.Timestamp(t_star)
        if series.dt.tz is not None and stamp.tzinfo is None:
            stamp = stamp.tz_localize(series.dt.tz)
        return np.asarray(series < stamp)
    except (ValueError, TypeError) as exc:
        raise SpecError(
            f"synth_control.treatment_time: {t_star!r} is not a date comparable with the "
            f"dates of column '{spec.data.columns.time}' of {path}; give it as an ISO date, e.g. "
            "2020-01-01"
        ) from exc
