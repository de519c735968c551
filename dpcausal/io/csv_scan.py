"""A CSV file's header and row count without pyarrow (issue 24: a dry run's start-up).

``--dry-run`` needs a file's column names and row count only. Importing pyarrow costs more CPU
than planning a run on a small file, so a plain CSV is scanned here with numpy, in blocks
(bounded memory): the header split at commas, and the non-empty lines after it counted. The scan
answers only where it provably agrees with what :func:`pyarrow.csv.read_csv` (the reader of the
rows, with its defaults) makes of the file: no quote character anywhere, every line ending in
``\\n`` or ``\\r\\n``, a non-empty UTF-8 header, and every non-empty line with as many fields as
the header. Empty lines are skipped, as pyarrow's ``ignore_empty_lines`` does. Any other file —
quoted fields, a bare ``\\r``, a ragged line, an undecodable header — returns None and is
inspected by pyarrow, as before, so its parse errors are pyarrow's.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import BinaryIO

import numpy as np

BLOCK_BYTES = 1 << 24
"""Bytes scanned at once (16 MB, extended to the end of its last line)."""

_NL, _CR, _COMMA, _QUOTE = 10, 13, 44, 34
_BOM = b"\xef\xbb\xbf"


def _open(path: Path) -> BinaryIO:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def scan_csv(path: Path) -> tuple[tuple[str, ...], int] | None:
    """``(column names, data rows)`` of the CSV file ``path`` (``.csv.gz`` decompressed), or None
    when the file is outside what this scan reads exactly like pyarrow (see the module)."""
    with _open(path) as fh:
        header = fh.readline()
        if header.startswith(_BOM):
            header = header[len(_BOM):]
        line = header.rstrip(b"\n").removesuffix(b"\r")
        if not line or _QUOTE in line or _CR in line:
            return None
        try:
            names = tuple(line.decode("utf-8").split(","))
        except UnicodeDecodeError:
            return None
        commas = len(names) - 1
        rows = 0
        while True:
            block = fh.read(BLOCK_BYTES)
            if not block:
                return names, rows
            if not block.endswith(b"\n"):
                block += fh.readline()
            counted = _count_block(block, commas)
            if counted is None:
                return None
            rows += counted


def _count_block(block: bytes, commas: int) -> int | None:
    """Non-empty lines of ``block`` (whole lines), or None if a line has a quote, a bare
    ``\\r`` or a number of commas other than ``commas``."""
    arr = np.frombuffer(block, dtype=np.uint8)
    if bool(np.any(arr == _QUOTE)):
        return None
    ends = np.flatnonzero(arr == _NL)
    if ends.size == 0 or ends[-1] != arr.size - 1:  # a last line without its newline
        ends = np.append(ends, arr.size)
    starts = np.concatenate(([0], ends[:-1] + 1))
    cr = np.flatnonzero(arr == _CR)
    if cr.size and not bool(np.all(np.isin(cr + 1, ends))):  # \r only as the \r of a \r\n
        return None
    length = ends - starts
    if cr.size:
        length = length - np.isin(ends - 1, cr)
    filled = length > 0
    at = np.flatnonzero(arr == _COMMA)  # commas before byte k: searchsorted(at, k) (issue 24:
    per_line = np.searchsorted(at, ends) - np.searchsorted(at, starts)  # a cumsum cost 10×)
    if not bool(np.all(per_line[filled] == commas)):
        return None
    return int(np.count_nonzero(filled))
