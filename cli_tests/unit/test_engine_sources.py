"""Partitioned Parquet input, engine pieces and the engine spec (DESIGN §5)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from dpcausal.commands import by_name
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.engine.base import plan_pieces, tree_add
from dpcausal.engine.local import LocalEngine
from dpcausal.errors import DataError, SpecError
from dpcausal.frames import numeric_column
from dpcausal.io import tables
from dpcausal.spec.base import EngineSpec


def _parts(root: Path, sizes: list[int], row_group: int) -> Path:
    root.mkdir()
    start = 0
    for i, m in enumerate(sizes):
        frame = pd.DataFrame({"i": np.arange(start, start + m), "x": np.ones(m)})
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False),
                       root / f"p{i:02d}.parquet", row_group_size=row_group)
        start += m
    return root


def test_directory_row_count_comes_from_metadata(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    root = _parts(tmp_path / "d", [1200, 300, 2500], row_group=1000)
    (root / "_SUCCESS").write_text("")
    (root / ".hidden.parquet").write_text("not parquet")
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: pytest.fail("read data"))
    info = tables.inspect_table(root)
    assert (info.format, info.columns, info.n_rows) == ("parquet", ("i", "x"), 4000)
    assert [f.name for f in tables.parquet_files(root)] == ["p00.parquet", "p01.parquet",
                                                            "p02.parquet"]


def test_directory_reads_in_file_order_and_refuses_mixed_schemas(tmp_path: Path) -> None:
    root = _parts(tmp_path / "d", [700, 900], row_group=250)
    frame = tables.read_table(root, ["i"])
    assert frame["i"].tolist() == list(range(1600))
    pq.write_table(pa.table({"other": [1.0]}), root / "p99.parquet")
    with pytest.raises(DataError, match="columns differ"):
        tables.inspect_table(root)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"no \.parquet files"):
        tables.inspect_table(empty)


@pytest.mark.parametrize("target", [1, 250, 1000, 10_000])
def test_pieces_cover_every_row_once_with_global_starts(tmp_path: Path, target: int) -> None:
    root = _parts(tmp_path / "d", [1200, 300, 2500], row_group=250)
    pieces = plan_pieces(tables.inspect_table(root), target)
    assert pieces[0].start == 0
    for a, b in itertools.pairwise(pieces):
        assert b.start == a.start + a.n_rows
    assert sum(p.n_rows for p in pieces) == 4000


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_local_engine_streams_bounded_batches_with_global_row_index(tmp_path: Path,
                                                                    fmt: str) -> None:
    if fmt == "parquet":
        path = _parts(tmp_path / "d", [2600, 3100], row_group=1000)
    else:
        path = tmp_path / "t.csv"
        pd.DataFrame({"i": np.arange(5700), "x": np.ones(5700)}).to_csv(path, index=False)
    engine = LocalEngine(tables.inspect_table(path), ["i"], batch_rows=1000)
    engine.load(lambda frame, start: (start, frame["i"].to_numpy()))
    parts = engine.map_list(lambda part, start: part)
    assert all(len(idx) <= 1000 for _, idx in parts) or fmt == "csv"
    for start, idx in parts:
        assert idx[0] == start  # the global row index is the file-order row number
    assert np.array_equal(np.concatenate([idx for _, idx in parts]), np.arange(5700))
    assert engine.map_sum(lambda part, start: float(part[1].sum())) == float(np.arange(5700).sum())
    assert engine.passes == 2


def test_tree_add_sums_nested_statistics() -> None:
    a = (np.ones(2), {"h": np.eye(2)}, 1.0)
    out = tree_add(tree_add(None, a), a)
    assert np.array_equal(out[0], [2.0, 2.0])
    assert np.array_equal(out[1]["h"], 2 * np.eye(2))
    assert out[2] == 2.0


def test_engine_spec_and_overrides() -> None:
    assert EngineSpec().kind == "local"
    with pytest.raises(ValidationError, match=r"only used with engine\.kind: dask"):
        EngineSpec(kind="local", address="tcp://x:1")
    with pytest.raises(ValidationError):
        EngineSpec(kind="spark")  # type: ignore[arg-type]
    spec = OwlSpec.model_validate({"privacy": {"epsilon": 1.0}, "owl": {"gamma": 1.0, "treated": 1, "propensity": 0.5}})
    assert spec.engine is None
    assert spec.with_overrides().engine is None  # default: in memory, unchanged
    assert spec.with_overrides(engine="local").engine == EngineSpec(kind="local")
    dask = spec.with_overrides(engine_address="tcp://h:8786").engine
    assert (dask.kind, dask.address) == ("dask", "tcp://h:8786")
    with pytest.raises(SpecError, match="unknown engine"):
        spec.with_overrides(engine="spark")


def test_commands_without_an_engine_path_are_refused() -> None:
    assert callable(by_name("owl").engine_run()) and callable(by_name("cate").engine_run())
    with pytest.raises(SpecError, match="no engine path"):
        by_name("synth-control").engine_run()


@pytest.mark.parametrize("cache_batches", [0, 2, 100])
def test_local_engine_cache_gives_the_same_passes(tmp_path: Path, cache_batches: int) -> None:
    """Cached, partly cached and streamed batches: every pass sees every row once, in order."""
    path = _parts(tmp_path / "d", [2600, 3100], row_group=1000)
    engine = LocalEngine(tables.inspect_table(path), ["i"], batch_rows=1000)
    engine.cache_bytes = cache_batches * 1000 * 8
    reads: list[int] = []

    def prepare(frame: pd.DataFrame, start: int) -> np.ndarray:
        reads.append(start)
        return frame["i"].to_numpy(dtype=np.int64)

    engine.load(prepare)
    for _ in range(3):
        parts = engine.map_list(lambda part, start: (start, part))
        assert np.array_equal(np.concatenate([p for _, p in parts]), np.arange(5700))
        assert all(p[0] == s for s, p in parts)
    n_batches = len(parts)
    cached = min(cache_batches, n_batches)
    assert len(reads) == n_batches + 2 * (n_batches - cached)


def test_csv_stream_types_do_not_depend_on_block_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every column kind pyarrow infers in memory (int, double, bool text, labels, all-missing),
    with its odd value placed late: the streamed batches convert to exactly the in-memory values
    whatever the block size (tables.csv_column_types)."""
    from dpcausal.commands.common.arms import label_matches
    from dpcausal.engine.base import iter_piece

    n = 4_000
    rng = np.random.default_rng(5)
    cols: dict[str, list[object]] = {
        "int": list(rng.integers(0, 5, n)),
        "late_float": [*rng.integers(0, 2, n - 1), 0.75],
        "bool_text": list(rng.choice(["True", "False"], n)),
        "bool_mixed": [*rng.choice(["1", "0"], n - 1), "true"],
        "labels": [*rng.choice(["1", "0"], n - 1), "1.0"],
        "text": [*rng.choice(["1", "0"], n - 1), "t"],
        "padded": [f" {v} " for v in rng.normal(size=n)],
        "empty": [""] * n,
    }
    path = tmp_path / "t.csv"
    pd.DataFrame(cols).to_csv(path, index=False)
    memory = tables.read_table(path, list(cols))
    info = tables.inspect_table(path)

    def values(frame: pd.DataFrame, column: str) -> np.ndarray:
        if column in ("labels", "text"):
            return label_matches(frame[column], 1)
        try:
            return numeric_column(frame, column, path)
        except DataError:
            return np.array(["refused"])

    for block in (256, 4096, 1 << 20):
        monkeypatch.setattr(tables, "CSV_BLOCK_BYTES", block)
        types, rows = tables.csv_column_types(path, list(cols), block_size=block)
        assert rows == n
        assert types["late_float"] == pa.float64() and types["bool_text"] == pa.bool_()
        assert types["bool_mixed"] == pa.bool_() and types["text"] == pa.string()
        piece = plan_pieces(info, 1000, list(cols))[0]
        piece = type(piece)(piece.path, 0, n, None, piece.identity, tuple(types.items()))
        frames = [f for _, f in iter_piece(piece, list(cols), 1000)]
        assert len(frames) > 1 or block == 1 << 20
        streamed = pd.concat(frames, ignore_index=True)
        for column in cols:
            np.testing.assert_array_equal(values(streamed, column), values(memory, column),
                                          err_msg=column)
