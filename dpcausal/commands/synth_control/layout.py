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
under pandas; a dictionary-encoded (categorical) Parquet column's periods are sorted by value
(pandas sorted a categorical in its category order; a memory table's categorical was decoded
already). pyarrow's conversions to numpy and from Python values are not used (they import
pandas, pyarrow 26), nor ``pyarrow.compute`` on small panels (its import costs ~0.02 CPU-s).
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
    data_columns,
    panel_columns,
    plain_value,
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
"""Within this range a date converts to nanoseconds without overflow: numpy compares two
datetimes in the finer unit (pandas compares outside it too; there the comparison is left to
pandas)."""


def build_layout(spec: SynthControlSpec, table: pa.Table | pd.DataFrame,
                 path: Path | None) -> PanelLayout:
    """Read the public structure from the unit/time columns (long) or the header and time (wide).

    Refuses a missing target or donor, an unbalanced panel (naming the unit and period), duplicate
    cells, and T0 < 1 or no post period.
    """
    import pyarrow as pa

    sec = spec.synth_control
    cols = panel_columns(spec)
    table = _as_arrow(table, structure_columns(spec))
    if isinstance(cols, LongColumns):
        units = _Column(table.column(cols.unit))
        if units.missing.any():
            raise DataError(f"{path}: column '{cols.unit}' (unit) has missing values")
        codes, firsts = units.factorize()  # in order of first appearance, as pd.factorize
        uniques = units.values_at(firsts)
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
        rows = np.flatnonzero(row_unit >= 0)
        times = _Column(table.column(cols.time))
        row_time, firsts = _sorted_times(times, rows, path, cols.time)
        values = times.values_at(firsts)
        if pa.types.is_integer(times.col.type) and times.missing.any():
            values = [float(v) for v in values]  # pandas held the column as floats (NaN)
        counts = np.bincount(row_unit[rows] * len(firsts) + row_time,
                             minlength=len(used) * len(firsts)).reshape(len(used), len(firsts))
        _check_cells(counts, [uniques[i] for i in used], values, path)
        target, donors = uniques[used[0]], tuple(uniques[i] for i in donor_idx)
    else:
        times = _Column(table.column(cols.time))
        every = np.arange(times.n_rows)
        row_time, firsts = _sorted_times(times, every, path, cols.time)
        values = times.values_at(firsts)
        if len(firsts) != times.n_rows:
            repeated = np.ones(times.n_rows, dtype=bool)
            repeated[firsts] = False
            dup = times.values_at(np.array([int(np.argmax(repeated))]))[0]
            raise DataError(
                f"{path}: period {plain_value(dup)!r} appears in more than one row of column "
                f"'{cols.time}'; the wide layout needs one row per period")
        target = str(sec.target)
        donors = tuple(data_columns(spec)[2:])
    pre = _pre_mask(spec, times, firsts, values, path)
    t0 = int(pre.sum())
    if t0 < 1 or t0 == len(values):
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


class _Column:
    """One Arrow column as numpy keys that sort and compare as its values — read from its data
    buffers for numbers, booleans, dates and timestamps (ticks), ranks of the distinct values
    for text and the rest — and its missing cells (nulls; NaN in a float column, as ``isna``).
    Without ``to_numpy`` (which imports pandas) and, below :data:`HASHED_ROWS` rows, without
    ``pyarrow.compute``."""

    def __init__(self, col: pa.ChunkedArray) -> None:
        self.col = col
        self.n_rows = len(col)
        keys = _buffer_values(col.type, col.chunks)
        if keys is None:
            self.keys, self.missing = _ranked_values(col)
        else:
            self.keys, self.missing = keys, _nulls(col.chunks)
            if keys.dtype.kind == "f":
                self.missing |= np.isnan(keys)

    def factorize(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(code of each row, first row of each code), codes in order of first appearance."""
        codes, firsts = self.sorted_codes(np.arange(self.n_rows))
        order = np.argsort(firsts, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        return rank[codes], firsts[order]

    def sorted_codes(self, rows: npt.NDArray[np.int64]
                     ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(rank of each of ``rows`` among their distinct values in ascending order, the first
        of ``rows`` holding each distinct value)."""
        keys = self.keys[rows]
        if keys.dtype.kind == "b":
            keys = keys.astype(np.int64)
        if keys.dtype.kind in "iu" and len(keys):  # by counting when the span is small
            lo = int(keys.min())
            span = int(keys.max()) - lo + 1
            if span <= 4 * len(keys) + 1024:
                offset = (keys - keys.dtype.type(lo)).astype(np.int64)
                present = np.zeros(span, dtype=bool)
                present[offset] = True
                codes = (np.cumsum(present) - 1)[offset]
                first = np.full(int(present.sum()), len(keys), dtype=np.int64)
                np.minimum.at(first, codes, np.arange(len(keys)))
                return codes, rows[first]
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return inverse.reshape(-1).astype(np.int64), rows[first]

    def values_at(self, rows: npt.NDArray[np.int64]) -> list[Any]:
        """The Python values of ``rows`` as pandas held them: ``datetime`` for a timestamp
        that pandas held as an equal ``Timestamp`` (pyarrow builds a ``Timestamp``, importing
        pandas, for nanosecond and zoned values; kept for sub-microsecond and zoned ones)."""
        import pyarrow as pa

        kind = self.col.type
        if pa.types.is_timestamp(kind) and kind.tz is None:
            ticks = self.keys[rows]
            if kind.unit != "ns" or not np.any(ticks % 1000):
                return list(ticks.view(f"M8[{kind.unit}]").astype("M8[us]").astype(object))
        return [self.col.slice(int(r), 1).to_pylist()[0] for r in rows]


def _buffer_values(kind: pa.DataType, chunks: list[pa.Array]) -> npt.NDArray[Any] | None:
    """The values of the chunks of a fixed-width column (numbers, booleans, dates, timestamps as
    ticks, durations) from their data buffers (a null's slot holds any value); None for other
    types."""
    import pyarrow as pa

    if pa.types.is_boolean(kind):
        parts = [np.unpackbits(np.frombuffer(c.buffers()[1], np.uint8), bitorder="little")[
            c.offset:c.offset + len(c)].astype(bool) for c in chunks]
        return np.concatenate(parts) if parts else np.empty(0, bool)
    if pa.types.is_integer(kind):
        dtype = np.dtype(f"{'u' if pa.types.is_unsigned_integer(kind) else 'i'}"
                         f"{kind.bit_width // 8}")
    elif pa.types.is_floating(kind):
        dtype = np.dtype(f"f{kind.bit_width // 8}")
    elif (pa.types.is_timestamp(kind) or pa.types.is_date(kind)
          or pa.types.is_duration(kind)):
        dtype = np.dtype(f"i{kind.bit_width // 8}")
    else:
        return None
    parts = [np.frombuffer(c.buffers()[1], dtype, count=c.offset + len(c))[c.offset:]
             for c in chunks]
    return np.concatenate(parts) if parts else np.empty(0, dtype)


HASHED_ROWS = 50_000
"""From this many rows a text (or other non-numeric) column is factorized by
``pyarrow.compute.dictionary_encode`` (its import costs ~0.02 CPU-s; Python's dictionary ~0.3
µs a row)."""


def _ranked_values(col: pa.ChunkedArray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Each row's rank among the column's distinct values in ascending (Python) order — keys
    that sort and compare as the values — and which rows are null (rank −1)."""
    if len(col) >= HASHED_ROWS:
        import pyarrow as pa
        import pyarrow.compute as pc

        plain = col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col
        encoded = pc.dictionary_encode(plain.combine_chunks())
        distinct = encoded.dictionary.to_pylist()
        missing = _nulls([encoded.indices])
        indices = _buffer_values(encoded.indices.type, [encoded.indices])
        assert indices is not None
        codes = np.where(missing, 0, indices)
    else:
        values = col.to_pylist()
        missing = np.array([v is None for v in values], dtype=bool)
        index: dict[Any, int] = {}
        codes = np.fromiter((0 if v is None else index.setdefault(v, len(index))
                             for v in values), dtype=np.int64, count=len(values))
        distinct = list(index)
    order = sorted(range(len(distinct)), key=distinct.__getitem__)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    return np.where(missing, -1, rank[codes] if len(distinct) else 0), missing


def _nulls(chunks: list[pa.Array]) -> npt.NDArray[np.bool_]:
    """Which rows of a column's chunks are null, from their validity bitmaps."""
    parts = []
    for c in chunks:
        bitmap = c.buffers()[0]
        if c.null_count == 0 or bitmap is None:
            parts.append(np.zeros(len(c), dtype=bool))
        else:
            bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")
            parts.append(~bits[c.offset:c.offset + len(c)].astype(bool))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _sorted_times(times: _Column, rows: npt.NDArray[np.int64], path: Path | None,
                  col: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(period of each of ``rows``, first row of each period), periods in ascending order;
    refuses missing ones."""
    if times.missing[rows].any():
        raise DataError(
            f"{path}: column '{col}' (time) has missing values; every row needs a period")
    return times.sorted_codes(rows)


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
            named = ", ".join(f"unit {plain_value(labels[u])!r} at time {plain_value(times[t])!r}"
                              for u, t in zip(ui[:MAX_NAMED], ti[:MAX_NAMED], strict=True))
            more = f" (and {len(ui) - MAX_NAMED} more)" if len(ui) > MAX_NAMED else ""
            raise DataError(f"{path}: {len(ui)} {what} panel cell(s): {named}{more}; {fix}")


def _pre_mask(spec: SynthControlSpec, times: _Column, firsts: npt.NDArray[np.int64],
              values: list[Any], path: Path | None) -> BoolArray:
    """times < treatment_time, with a clear error when the types cannot be compared: timestamps
    as instants, numbers as numbers, anything else (text, dates, booleans) as its text."""
    import pyarrow as pa

    t_star = spec.synth_control.treatment_time
    col = spec.data.columns.time
    kind = times.col.type
    if pa.types.is_timestamp(kind):
        stamps = times.keys[firsts].view(f"M8[{kind.unit}]")
        stamp = _naive_stamp(t_star) if kind.tz is None else None
        if stamp is None or stamps.min() < _NS_RANGE[0] or stamps.max() >= _NS_RANGE[1]:
            return _pandas_before(spec, times, firsts, path)
        return np.asarray(stamps < stamp)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
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


def _pandas_before(spec: SynthControlSpec, times: _Column, firsts: npt.NDArray[np.int64],
                   path: Path | None) -> BoolArray:
    """times < pd.Timestamp(treatment_time) by pandas: for a column with a time zone and for
    treatment times :func:`_naive_stamp` leaves to it (other strings, floats, aware datetimes)."""
    import pandas as pd
    import pyarrow as pa

    t_star = spec.synth_control.treatment_time
    series = pa.chunked_array([times.col.slice(int(r), 1) for r in firsts],
                              type=times.col.type).to_pandas()
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
