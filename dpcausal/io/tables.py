"""Read CSV and Parquet files: only the declared columns, with errors a user can act on.

Bad values are refused, never dropped: dropping a row because of its own content changes the
neighbouring relation a sensitivity was derived under, and silently changes n.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from dpcausal.errors import DataError
from dpcausal.io import memory
from dpcausal.io.csv_scan import scan_csv
from dpcausal.io.magic import check_csv_bytes

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

TableFormat = Literal["csv", "parquet"]


def table_format(path: Path) -> TableFormat:
    """Infer the format from the file name; refuse what we cannot read."""
    name = Path(path).name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz", ".txt")):
        return "csv"
    raise DataError(
        f"{path}: unknown file type; use a .csv (or .csv.gz) or .parquet file", file=path
    )


@dataclass(frozen=True, slots=True, eq=False)
class FileStamp:
    """One data file as it was when inspected: its identity (``file_identity``) and, for Parquet,
    the footer's row count and schema. The engines compare every file they open against it."""

    path: Path
    identity: tuple[int, ...]
    n_rows: int | None = None
    schema: pa.Schema | None = None


def file_identity(path: Path) -> tuple[int, ...]:
    """``(size, mtime_ns, ctime_ns, inode, device)`` of ``path``: what changes when a file is
    rewritten, appended to or replaced — ctime too when the mtime is set back (``touch -r``,
    ``cp -p``, ``rsync -t``), which ``utime`` cannot undo. (A ``chmod`` also moves ctime: a
    data-independent refusal, never a silent change.)"""
    st = os.stat(path)
    return (int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns), int(st.st_ino),
            int(st.st_dev))


def changed_error(path: Path) -> DataError:
    """The refusal when a data file differs from what was inspected and planned."""
    return DataError(f"{path}: the file changed while running; nothing was released or spent; "
                     "rerun", file=path)


@dataclass(frozen=True, slots=True)
class TableInfo:
    """What a dry run may know about a file: its format, column names and row count (``files``:
    each data file's stamp at inspection, in file order)."""

    path: Path
    format: TableFormat
    columns: tuple[str, ...]
    n_rows: int
    files: tuple[FileStamp, ...] = ()


def safe_reason(exc: Exception) -> str:
    """Why a file could not be read, without echoing its contents.

    pyarrow's parse errors quote the offending row (``Expected 6 columns, got 7: <the row>``) and
    its conversion errors the cell (``invalid value 'Smith-John-1957-03-02'``): one person's
    record would land in a cron or CI log. Keep the part before any quoted text.
    """
    if "checksum verification failed" in str(exc):
        return ("a Parquet page failed its checksum: the file is corrupted (restore it from its "
                "source, or rewrite it)")
    if isinstance(exc, OSError) and not _is_arrow_invalid(exc):
        return exc.strerror or type(exc).__name__
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "CSV parse error" in text or "columns, got" in text:
        head = text.split(": ", 2)
        return ": ".join(head[:2]) + " (row content not shown); check the row's fields and quoting"
    if "conversion" in text.lower() or "convert" in text.lower():
        column = re.match(r"In CSV column #(\d+)", text)
        where = f" in CSV column #{column.group(1)}" if column else ""
        return (f"a value{where} could not be converted (content not shown); check the column "
                "types")
    cut = min((i for i in (text.find("'"), text.find('"'), text.find("`")) if i >= 0),
              default=-1)
    if cut >= 0:
        return text[:min(cut, 200)].rstrip(" :") + " (content not shown)"
    return text[:200]


_safe_reason = safe_reason  # the former private name


def _require_file(path: Path | None, what: str) -> Path:
    if path is None:
        raise DataError(f"no {what} given; set data.path in the spec or pass --data FILE")
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: {what} not found; check the path (relative paths are from the "
                        "current directory)", file=p)
    if p.is_dir():
        parquet_files(p, what)
    elif not p.is_file():
        raise DataError(f"{p}: {what} is not a file", file=p)
    return p


def parquet_files(path: Path, what: str = "data file") -> list[Path]:
    """The Parquet files of a partitioned dataset directory, in file order (sorted by relative
    path; hidden and ``_``-prefixed files such as ``_SUCCESS`` or ``_metadata`` are skipped).
    A plain file is returned as a one-element list."""
    p = Path(path)
    if not p.is_dir():
        return [p]
    files = sorted(
        (f for f in p.rglob("*") if f.is_file() and f.name.lower().endswith((".parquet", ".pq"))
         and not any(part.startswith((".", "_")) for part in f.relative_to(p).parts)),
        key=lambda f: f.relative_to(p).as_posix(),
    )
    if not files:
        raise DataError(f"{p}: the {what} is a directory with no .parquet files; point data.path "
                        "at a CSV/Parquet file or a directory of Parquet files", file=p)
    return files


def inspect_table(path: Path | None, what: str = "data file") -> TableInfo:
    """Return the schema and row count of ``path`` without reading values into any computation.

    ``path`` may be the label of an in-memory table (:mod:`dpcausal.io.memory`): its columns and
    row count, without any file stamp."""
    mem = memory.lookup(path)
    if mem is not None:
        if mem.n_rows == 0:
            raise DataError(f"{mem.label}: the {what} has no rows", file=mem.label)
        return TableInfo(mem.label, "csv", mem.columns, mem.n_rows)
    p = _require_file(path, what)
    fmt = "parquet" if p.is_dir() else table_format(p)
    try:
        if p.is_dir():
            columns, n_rows, stamps = _inspect_parquet_dir(p, what)
        elif fmt == "parquet":
            stamps = (_parquet_stamp(p),)
            assert stamps[0].schema is not None
            assert stamps[0].n_rows is not None
            columns = tuple(stamps[0].schema.names)
            n_rows = stamps[0].n_rows
        else:
            stamps = (FileStamp(p.resolve(), file_identity(p)),)
            check_csv_bytes(p)
            columns, n_rows = scan_csv(p) or _inspect_csv_pyarrow(p)
    except Exception as exc:
        if not (isinstance(exc, OSError) or _is_arrow_invalid(exc)):
            raise
        raise DataError(f"{p}: cannot read the {what}: {safe_reason(exc)}", file=p) from exc
    if n_rows == 0:
        raise DataError(f"{p}: the {what} has no rows", file=p)
    return TableInfo(p, fmt, columns, int(n_rows), stamps)


def _inspect_csv_pyarrow(path: Path) -> tuple[tuple[str, ...], int]:
    """Column names and row count of a CSV file as pyarrow parses it (the files
    :func:`dpcausal.io.csv_scan.scan_csv` leaves to it: quoted fields, ragged lines...)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    columns = tuple(pacsv.open_csv(path).schema.names)
    if not columns:
        return columns, 0
    first = columns[0]
    return columns, pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        include_columns=[first], column_types={first: pa.string()})).num_rows


def _is_arrow_invalid(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``pyarrow.ArrowInvalid`` (asked without importing pyarrow: nothing
    can raise one before it is imported)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(exc, pa.ArrowInvalid)


def _parquet_stamp(path: Path) -> FileStamp:
    """A Parquet file's identity, footer row count and schema (the identity taken first, so a
    rewrite after it shows as a change)."""
    import pyarrow.parquet as pq

    identity = file_identity(path)
    meta = pq.ParquetFile(path)
    return FileStamp(Path(path).resolve(), identity, int(meta.metadata.num_rows),
                     meta.schema_arrow)


def _inspect_parquet_dir(path: Path, what: str
                         ) -> tuple[tuple[str, ...], int, tuple[FileStamp, ...]]:
    """Columns, total row count and file stamps of a directory of Parquet files, from metadata
    alone; every file must have the same column names (their types are checked, for the columns
    a command reads, by :func:`check_columns`)."""
    columns: tuple[str, ...] | None = None
    n_rows = 0
    stamps = []
    for f in parquet_files(path, what):
        stamp = _parquet_stamp(f)
        assert stamp.schema is not None
        assert stamp.n_rows is not None
        names = tuple(stamp.schema.names)
        if columns is None:
            columns = names
        elif set(names) != set(columns):
            raise DataError(f"{f}: its columns differ from the other files of {path}; every "
                            "file of a partitioned dataset must have the same columns", file=f)
        n_rows += stamp.n_rows
        stamps.append(stamp)
    assert columns is not None
    return columns, n_rows, tuple(stamps)


def check_column_types(info: TableInfo, columns: list[str]) -> None:
    """Refuse a directory of Parquet files whose files disagree on the type of a column in
    ``columns`` (from the footers inspected, before any row is read): in memory the files could
    not be concatenated, and on an engine the batches would be read with different types."""
    stamps = [s for s in info.files if s.schema is not None]
    if len(stamps) < 2:
        return
    first = stamps[0]
    assert first.schema is not None
    for column in dict.fromkeys(columns):
        if column not in first.schema.names:
            continue
        want = first.schema.field(column).type
        for stamp in stamps[1:]:
            assert stamp.schema is not None
            got = stamp.schema.field(column).type
            if got != want:
                raise DataError(
                    f"{stamp.path}: column '{column}' has type {got} but {first.path.name} has "
                    f"{want}; every file of the partitioned dataset {info.path} must store a "
                    "column with one type: rewrite the files with the same schema (e.g. cast "
                    f"'{column}' to {want} before writing)", file=stamp.path
                )


def nearest_names(name: str, names: Sequence[str], k: int = 5) -> list[str]:
    """Up to ``k`` of ``names`` closest to ``name``: case-insensitive equals first, then by
    ``difflib`` similarity (ratio ≥ 0.5), best first."""
    same_case = [n for n in names if n.lower() == name.lower() and n != name]
    close = difflib.get_close_matches(name, list(dict.fromkeys(names)), n=k, cutoff=0.5)
    return list(dict.fromkeys([*same_case, *close]))[:k]


def check_columns(info: TableInfo, columns: list[str], role: str = "") -> None:
    """Refuse when any of ``columns`` is missing from the file, or is the name of more than one
    of its columns (readers would silently take the first, or fail on the second).

    A missing column's message lists the file's columns nearest to it first (``difflib``), then
    the others, at most 20 in all."""
    wanted = list(dict.fromkeys(columns))
    missing = [c for c in wanted if c not in info.columns]
    if missing:
        near = {c: nearest_names(c, info.columns) for c in missing}
        named = ", ".join(f"'{c}'" + (f" (nearest: {', '.join(repr(n) for n in near[c])})"
                                      if near[c] else "") for c in missing)
        first = list(dict.fromkeys(n for c in missing for n in near[c]))
        shown = list(dict.fromkeys([*first, *info.columns]))
        listing = ", ".join(shown[:20]) + (" ..." if len(shown) > 20 else "")
        raise DataError(
            f"{info.path}: column(s) {named}{role} not found; the file's {len(info.columns)} "
            f"column(s), nearest first: {listing}. Fix data.columns in the spec or the file",
            file=info.path, column=missing[0])
    for column in wanted:
        count = info.columns.count(column)
        if count > 1:
            raise DataError(
                f"{info.path}: the file has {count} columns named '{column}'; dpcausal cannot "
                "tell which one the spec means: rename or drop the duplicates in the file's "
                "header", file=info.path, column=column)
    check_column_types(info, columns)


def read_table(path: Path | None, columns: list[str], what: str = "data file") -> pd.DataFrame:
    """Read only ``columns`` of ``path`` into a DataFrame (in the file's row order)."""
    mem = memory.lookup(path)
    if mem is not None:
        check_columns(inspect_table(path, what), columns)
        return mem.read(list(dict.fromkeys(columns)))
    # one pandas block per column (zero-copy for numeric columns without nulls): the default
    # consolidates same-typed columns into one 2-D block, a full copy of the table (~0.4 CPU-s
    # of owl at 10⁶ × 22); the frame holds the same values and dtypes (issue 24)
    return read_arrow(path, columns, what).to_pandas(split_blocks=True)


def read_arrow(path: Path | None, columns: list[str], what: str = "data file") -> pa.Table:
    """Read only ``columns`` of ``path`` into an Arrow table (in the file's row order): the
    values :func:`read_table` holds, before their conversion to pandas — for a reader that needs
    no pandas (synth-control's plan reads the panel's unit and time values, issue 24)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    info = inspect_table(path, what)
    check_columns(info, columns)
    cols = list(dict.fromkeys(columns))
    mem = memory.lookup(path)
    if mem is not None:
        return mem.read_arrow(cols)
    try:
        if info.path.is_dir():
            table = pa.concat_tables([_read_parquet(f, cols)
                                      for f in parquet_files(info.path, what)])
        elif info.format == "parquet":
            table = _read_parquet(info.path, cols)
        else:
            table = pacsv.read_csv(
                info.path, convert_options=pacsv.ConvertOptions(include_columns=cols)
            )
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{info.path}: cannot read the {what}: {safe_reason(exc)}",
                        file=info.path) from exc
    if table.num_rows == 0:
        raise DataError(f"{info.path}: the {what} has no rows", file=info.path)
    return table


def _read_parquet(path: Path, columns: list[str]) -> pa.Table:
    """``columns`` of one Parquet file, in that order, pages checksum-verified. Read through
    ``ParquetFile`` rather than ``pq.read_table``: the latter goes through ``pyarrow.dataset``,
    whose import alone costs ~0.2 CPU-s of every run (issue 24); one file reads the same."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path, page_checksum_verification=True) as file:
        return file.read(columns=columns).select(columns)


CSV_BLOCK_BYTES = 1 << 20
"""The smallest block the streaming CSV reader parses at once (pyarrow's default, 1 MB)."""


def csv_column_types(path: Path, columns: list[str], block_size: int = CSV_BLOCK_BYTES
                     ) -> tuple[dict[str, pa.DataType], int]:
    """The types :func:`read_table` infers for ``columns`` over the WHOLE CSV file, found by
    streaming it (bounded memory), and the number of data rows.

    pyarrow's streaming reader fixes each column's type from its first block, so a late ``0.75``
    in an integer-looking column, or a late label in a 0/1 column, fails there while the
    in-memory reader (which widens the type over the whole file) accepts it. Reading with these
    explicit types makes a streamed batch hold the values the in-memory frame holds whatever the
    block boundaries: a column whose every value parses as a number (int64 or double in memory)
    is read as float64 (the methods convert numbers to float64 anyway); one made of true/false
    values as bool; anything else as text (converted, or refused, row by row by the method, as
    in memory). Known difference: a column pyarrow would read in memory as a timestamp, or as
    hexadecimal integers, is read as text here (a method reading it as numbers then refuses it
    on the engine).
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        names = list(pacsv.open_csv(path).schema.names)
    except (pa.ArrowInvalid, OSError) as exc:  # it read fine at inspection: it changed since
        raise changed_error(path) from exc
    cols = list(dict.fromkeys(columns))
    types: dict[str, pa.DataType] = {c: pa.float64() for c in cols}
    for _ in range(2 * len(cols) + 1):
        rows = 0
        try:
            reader = pacsv.open_csv(
                path, read_options=pacsv.ReadOptions(block_size=block_size),
                convert_options=pacsv.ConvertOptions(include_columns=cols, column_types=types))
            for batch in reader:
                rows += batch.num_rows
            return types, rows
        except pa.ArrowInvalid as exc:
            # pyarrow names the row too when it reads on one thread (OMP_NUM_THREADS=1, which the
            # command line sets on machines with at most 2 cores): "In CSV column #2: Row #2: ..."
            found = re.match(r"In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error",
                             str(exc))
            column = names[int(found.group(1))] if found and int(found.group(1)) < len(names) \
                else None
            if column not in types or types[column] == pa.string():
                raise DataError(f"{path}: cannot read the data file: {safe_reason(exc)}", file=path
                                ) from exc
            types[column] = pa.bool_() if types[column] == pa.float64() else pa.string()
    raise AssertionError("unreachable: every column loosens at most twice")  # pragma: no cover
