"""Issue 24: a dry run reads a CSV's header and row count with numpy (``dpcausal.io.csv_scan``),
and must count exactly the rows pyarrow's reader will read — n is public and sets every
sensitivity, and the release refuses a file whose row count changed since the plan."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dpcausal.io import csv_scan, tables

PLAIN = {
    "plain": b"a,b,c\n1,2,3\n4,5,6\n",
    "no final newline": b"a,b,c\n1,2,3\n4,5,6",
    "crlf": b"a,b,c\r\n1,2,3\r\n4,5,6\r\n",
    "empty lines": b"a,b,c\n1,2,3\n\n4,5,6\n\n\r\n7,8,9\n",
    "bom": b"\xef\xbb\xbfa,b,c\n1,2,3\n",
    "empty cells": b"a,b,c\n,,\n1,,3\n",
    "one column": b"x\n1\n2\n\n3\n",
    "header only": b"a,b\n",
    "utf-8 names": "é,ü\n1,2\n".encode(),
}
"""Files the scan reads itself."""

LEFT_TO_PYARROW = {
    "quoted": b'a,b\n"1,5",2\n3,4\n',
    "quoted newline": b'a,b\n"x\ny",2\n',
    "bare cr": b"a,b\r1,2\r3,4\r",
    "ragged": b"a,b\n1,2,3\n",
    "spaces line": b"a,b\n1,2\n \n",
}
"""Files it leaves to pyarrow (which reads or refuses them as before)."""


def _write(tmp_path: Path, name: str, data: bytes, gz: bool = False) -> Path:
    path = tmp_path / (name.replace(" ", "_") + (".csv.gz" if gz else ".csv"))
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("name", sorted(PLAIN))
def test_scan_counts_what_pyarrow_reads(tmp_path: Path, name: str, gz: bool) -> None:
    path = _write(tmp_path, name, PLAIN[name], gz)
    scanned = csv_scan.scan_csv(path)
    assert scanned is not None
    assert scanned == tables._inspect_csv_pyarrow(path)


@pytest.mark.parametrize("name", sorted(LEFT_TO_PYARROW))
def test_scan_leaves_other_files_to_pyarrow(tmp_path: Path, name: str) -> None:
    assert csv_scan.scan_csv(_write(tmp_path, name, LEFT_TO_PYARROW[name])) is None


def test_scan_counts_across_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_scan, "BLOCK_BYTES", 7)  # blocks end mid-line: extended to its end
    path = _write(tmp_path, "blocks", b"a,b\n" + b"".join(b"%d,%d\n" % (i, i) for i in range(50))
                  + b"\n\n1,2")
    assert csv_scan.scan_csv(path) == (("a", "b"), 51) == tables._inspect_csv_pyarrow(path)


def test_inspect_table_refuses_a_ragged_file_as_before(tmp_path: Path) -> None:
    from dpcausal.errors import DataError

    with pytest.raises(DataError, match="cannot read the data file"):
        tables.inspect_table(_write(tmp_path, "ragged", LEFT_TO_PYARROW["ragged"]))
