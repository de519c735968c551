"""What a data file really is, from its first bytes: a CSV named file that is compressed, or is a
Parquet file, is refused with what it is and the fix, before pyarrow parses it as text."""

from __future__ import annotations

from pathlib import Path

from dpcausal.errors import DataError

MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\xfd7zXZ\x00", "xz"), (b"PK\x03\x04", "zip"), (b"PAR1", "Parquet"),
)
"""Leading bytes of the binary formats a ``.csv`` file is most often by mistake."""


def check_csv_bytes(path: Path) -> None:
    """Refuse a CSV file whose first bytes say it is not plain text, naming what it is.

    pyarrow reads a ``.csv.gz`` file (gzip) as it streams it, in memory and on the engines alike;
    gzip bytes under a plain ``.csv`` name would be parsed as text ("Expected 1 columns, got 2"),
    and a ``.csv.gz`` name on a file that is not gzip fails as deep. Only the format's magic
    bytes are read (like the header, no data value)."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    kind = next((name for magic, name in MAGIC if head.startswith(magic)), None)
    gz_name = Path(path).name.lower().endswith(".gz")
    if gz_name and kind != "gzip":
        raise DataError(f"{path}: the name ends in .gz but the file is not gzip-compressed"
                        f"{f' (it is a {kind} file)' if kind else ''}; rename it to .csv",
                        file=path)
    if gz_name or kind is None:
        return
    fix = {"gzip": "name it .csv.gz (dpcausal decompresses .csv.gz as it reads) or decompress it",
           "Parquet": "name it .parquet"}.get(kind, "decompress it (dpcausal reads .csv, .csv.gz "
                                                   "and .parquet files)")
    what = "a Parquet file" if kind == "Parquet" else f"a {kind}-compressed file"
    raise DataError(f"{path}: the file is {what}, not CSV text, but its name says CSV: {fix}",
                    file=path)
