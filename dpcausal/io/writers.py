"""Render outputs to bytes and write them atomically (temp file, fsync, os.replace)."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcausal.errors import OutputError
from dpcausal.io.durable import fsync_dir

if TYPE_CHECKING:
    import pandas as pd


def json_bytes(obj: Any) -> bytes:
    """Pretty, deterministic JSON (no NaN)."""
    return (json.dumps(obj, indent=2, allow_nan=False) + "\n").encode()


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """CSV without the index; floats in shortest round-trip form."""
    return frame.to_csv(index=False, lineterminator="\n").encode()


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    """Parquet (zstd) without the pandas index."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf, compression="zstd")
    return buf.getvalue()


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)  # mkstemp creates 0600; outputs get the usual mode
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        fsync_dir(path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the output: {exc.strerror}") from exc

