"""The engines read what was inspected, the way memory reads it, and never echo a cell value
(privacy review of the engines: F2 values in logs and block-dependent CSV types, F3 the rows
streamed are the rows counted, F5 Dask over CSV and cluster clean-up, F6 mixed Parquet column
types, F7 what a Dask computation error becomes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_tests.helpers import invoke, read_json, write_parts, write_yaml
from dpcausal.io import tables

distributed = pytest.importorskip("distributed")

N_ROWS = 3_000
SECRET = "Smith-John-1957-03-02"
LOCAL = {"kind": "local", "batch_rows": 1000}


def _frame(n: int = N_ROWS, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, (n, 4))
    a = rng.integers(0, 2, n)
    b = x[:, 0] - x[:, 1] + (2 * a - 1) * (x[:, 2] - 0.5) * 3 + rng.normal(0.0, 1.0, n)
    frame = pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2], "x4": x[:, 3],
                          "A": a, "B": b})
    frame["x4"] = (frame["x4"] > 0.5).astype(int)  # an integer-looking covariate
    return frame


def _spec(tmp: Path, data: Path, *, engine: dict[str, Any] | None = None,
          ledger: bool = False, name: str = "spec.yaml") -> Path:
    doc: dict[str, Any] = {
        "data": {"path": str(data), "columns": {"outcome": "B", "treatment": "A",
                                               "covariates": ["x1", "x2", "x3", "x4"]}},
        "bounds": {"outcome": [-6.0, 6.0], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 5.0},
        "output": {"dir": str(tmp / "out")},
        "owl": {"treated": 1, "propensity": 0.5, "gamma": 20.0},
    }
    if engine is not None:
        doc["engine"] = engine
    if ledger:
        doc["ledger"] = {"path": str(tmp / "ledger.jsonl"), "dataset": "d",
                         "budget": {"epsilon": 100.0}}
    return write_yaml(tmp / name, doc)


def _run(spec: Path) -> tuple[int, str, list[float] | None]:
    res = invoke(["owl", "--spec", spec, "--json", "--test-noise-seed", "11"])
    theta = None
    if res.exit_code == 0:
        out = json.loads(res.stdout)
        theta = read_json(Path(out["output_paths"][0]).parent / "rule.json")["theta"]
    return res.exit_code, res.stderr, theta


def _nothing_released(tmp: Path) -> None:
    assert not (tmp / "out" / "receipt.json").exists()
    assert not (tmp / "out" / "rule.json").exists()
    ledger = tmp / "ledger.jsonl"
    assert not ledger.exists() or ledger.read_text().strip() == ""


# ---------------------------------------------------------------- F2: CSV types, no echoed values

@pytest.mark.parametrize(("column", "value", "code"), [
    ("x4", 0.75, 0),        # a late float in an int-looking covariate
    ("A", "1.0", 0),        # the treated label written as a float, late
    ("B", SECRET, 2),       # a late non-numeric outcome
    ("A", SECRET, 2),       # a late value that is neither arm label
    ("x2", "", 2),          # a late missing covariate
])
def test_csv_engine_accepts_and_refuses_what_memory_does_and_never_echoes_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str, value: Any, code: int
) -> None:
    """pyarrow's streaming reader fixes types from its first block; the engine must not: the same
    exit code and release as in memory, whatever the block boundaries (small blocks forced)."""
    monkeypatch.setattr(tables, "CSV_BLOCK_BYTES", 16_384)  # ~580 rows per engine block
    frame = _frame().astype({column: object})
    frame.loc[N_ROWS - 10, column] = value  # far beyond the first block
    csv = tmp_path / "t.csv"
    frame.to_csv(csv, index=False)
    memory = _run(_spec(tmp_path, csv))
    local = _run(_spec(tmp_path, csv, engine={**LOCAL, "cache_mb": 0}, name="local.yaml"))
    assert memory[0] == local[0] == code, memory[1] + local[1]
    if code == 0:
        assert memory[2] is not None and local[2] is not None
        np.testing.assert_allclose(local[2], memory[2], rtol=1e-9, atol=1e-12)
    else:
        assert f"data row {N_ROWS - 9}" in memory[1] and f"data row {N_ROWS - 9}" in local[1]
    assert SECRET not in memory[1] + local[1]


def test_csv_boolean_and_text_columns_read_as_in_memory(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A True/False covariate (pandas' to_csv of a bool column) and text arm labels."""
    monkeypatch.setattr(tables, "CSV_BLOCK_BYTES", 16_384)
    frame = _frame()
    frame["x4"] = frame["x4"].astype(bool)
    frame["A"] = np.where(frame["A"] == 1, "treated", "control")
    csv = tmp_path / "t.csv"
    frame.to_csv(csv, index=False)
    types, rows = tables.csv_column_types(csv, ["x4", "A", "B"], block_size=4096)
    assert rows == N_ROWS
    assert types == {"x4": pa.bool_(), "A": pa.string(), "B": pa.float64()}
    spec = {"data": {"path": str(csv), "columns": {"outcome": "B", "treatment": "A",
                                                   "covariates": ["x1", "x2", "x3", "x4"]}},
            "bounds": {"outcome": [-6.0, 6.0], "covariates": [0.0, 1.0]},
            "privacy": {"epsilon": 5.0}, "output": {"dir": str(tmp_path / "out")},
            "owl": {"treated": "treated", "control": "control", "propensity": 0.5,
                    "gamma": 20.0}}
    memory = _run(write_yaml(tmp_path / "m.yaml", spec))
    local = _run(write_yaml(tmp_path / "l.yaml", {**spec, "engine": LOCAL}))
    assert memory[0] == local[0] == 0, memory[1] + local[1]
    np.testing.assert_allclose(local[2], memory[2], rtol=1e-9, atol=1e-12)


def test_a_read_error_never_quotes_the_cell(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the whole-file types (a first-block guess), the late value fails the stream: the
    DataError says where, not what."""
    from dpcausal.engine.base import iter_piece, plan_pieces
    from dpcausal.errors import DataError

    monkeypatch.setattr(tables, "CSV_BLOCK_BYTES", 16_384)
    frame = pd.DataFrame({"y": np.arange(50_000, dtype=float)}).astype(object)
    frame.loc[49_990, "y"] = SECRET
    csv = tmp_path / "t.csv"
    frame.to_csv(csv, index=False)
    (piece,) = plan_pieces(tables.inspect_table(csv), 1000)  # no columns: no fixed types
    with pytest.raises(DataError) as err:
        list(iter_piece(piece, ["y"], 1000))
    assert SECRET not in str(err.value)
    assert "content not shown" in str(err.value) and str(csv) in str(err.value)
    for text in (f"In CSV column #0: CSV conversion error to double: invalid value '{SECRET}'",
                 f"CSV parse error: Expected 2 columns, got 3: {SECRET},1,2",
                 f"Invalid value '{SECRET}' somewhere", f'Bad "{SECRET}"'):
        assert SECRET not in tables.safe_reason(pa.ArrowInvalid(text))


# ---------------------------------------------------------------- F3: the rows streamed are n

def _append_rows(path: Path, k: int = 50) -> None:
    with path.open("a") as fh:
        fh.write("".join("0.5,0.5,0.5,1,1,0.1\n" for _ in range(k)))


@pytest.mark.parametrize("cache_mb", [0, 2048])
def test_csv_growing_mid_run_is_refused_and_nothing_spent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_mb: int
) -> None:
    import dpcausal.commands.owl.engine as eowl

    csv = tmp_path / "t.csv"
    _frame().to_csv(csv, index=False)
    real = eowl.prepare_batch
    done: list[int] = []

    def appending(spec: Any, setup: Any, frame: pd.DataFrame, start: int) -> Any:
        if not done:  # an ETL job appends right after the first batch was read
            done.append(start)
            _append_rows(csv)
        return real(spec, setup, frame, start)

    monkeypatch.setattr(eowl, "prepare_batch", appending)
    res = invoke(["owl", "--spec", _spec(tmp_path, csv, ledger=True,
                                         engine={**LOCAL, "cache_mb": cache_mb})])
    assert done and res.exit_code == 2, res.stdout + res.stderr
    assert "the file changed while running; nothing was released or spent; rerun" in res.stderr
    _nothing_released(tmp_path)


def test_csv_rewritten_in_place_with_its_mtime_restored_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same size, same mtime (``touch -r`` / ``cp -p``): ctime and the inode still tell (N2)."""
    import dpcausal.commands.owl.engine as eowl

    csv = tmp_path / "t.csv"
    _frame().to_csv(csv, index=False)
    real = eowl.prepare_batch
    done: list[int] = []

    def rewriting(spec: Any, setup: Any, frame: pd.DataFrame, start: int) -> Any:
        if not done:
            done.append(start)
            st = os.stat(csv)
            text = csv.read_text()
            flipped = text.replace(",1,", ",0,", 5)  # flip a few arms: same size, other rows
            assert flipped != text
            csv.write_text(flipped)
            os.utime(csv, ns=(st.st_atime_ns, st.st_mtime_ns))
            assert os.stat(csv).st_size == st.st_size
        return real(spec, setup, frame, start)

    monkeypatch.setattr(eowl, "prepare_batch", rewriting)
    res = invoke(["owl", "--spec", _spec(tmp_path, csv, ledger=True,
                                         engine={**LOCAL, "cache_mb": 0})])
    assert done and res.exit_code == 2, res.stdout + res.stderr
    assert "the file changed while running" in res.stderr
    _nothing_released(tmp_path)


def test_csv_symlink_repointed_after_inspection_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """data/current.csv re-pointed to another file of the same n between inspection and the
    engine's start: not the file inspected, so refused (N1)."""
    first, second, link = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "current.csv"
    _frame(seed=0).to_csv(first, index=False)
    _frame(seed=1).to_csv(second, index=False)
    link.symlink_to(first)

    def repoint(info: Any) -> None:
        tmp = tmp_path / "next.csv"
        tmp.symlink_to(second)
        os.replace(tmp, link)

    _grow_after_inspection(monkeypatch, repoint)
    res = invoke(["owl", "--spec", _spec(tmp_path, link, ledger=True, engine=LOCAL)])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "the file changed while running" in res.stderr
    _nothing_released(tmp_path)


@pytest.mark.parametrize("change", ["rewrite", "append"])
def test_parquet_file_changed_mid_run_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 change: str) -> None:
    import dpcausal.commands.owl.engine as eowl

    frame = _frame()
    root = write_parts(frame, tmp_path / "p", n_files=3, row_group=500)
    victim = root / "part-002.parquet"
    real = eowl.prepare_batch
    done: list[int] = []

    def changing(spec: Any, setup: Any, batch: pd.DataFrame, start: int) -> Any:
        if not done:
            done.append(start)
            part = pq.read_table(victim).to_pandas()
            if change == "append":
                part = pd.concat([part, part.iloc[:7]], ignore_index=True)
            else:  # the same number of rows, other values
                part["B"] = part["B"][::-1].to_numpy()
            pq.write_table(pa.Table.from_pandas(part, preserve_index=False), victim,
                           row_group_size=500)
            st = os.stat(victim)
            os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        return real(spec, setup, batch, start)

    monkeypatch.setattr(eowl, "prepare_batch", changing)
    res = invoke(["owl", "--spec", _spec(tmp_path, root, ledger=True,
                                         engine={**LOCAL, "cache_mb": 0})])
    assert done and res.exit_code == 2, res.stdout + res.stderr
    assert f"{victim.resolve()}: the file changed while running" in res.stderr
    _nothing_released(tmp_path)


def _grow_after_inspection(monkeypatch: pytest.MonkeyPatch, grow: Any) -> None:
    """The file changes between the inspection (n, the plan) and the engine's start."""
    import dpcausal.engine as engine_mod

    real = engine_mod.open_engine

    @contextlib.contextmanager
    def racing(spec: Any, info: Any, columns: Any, *rest: Any) -> Any:
        grow(info)
        with real(spec, info, columns, *rest) as engine:
            yield engine

    monkeypatch.setattr(engine_mod, "open_engine", racing)


@pytest.mark.parametrize("kind", ["local", "dask"])
def test_change_between_inspection_and_engine_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: Any, kind: str
) -> None:
    """toctou: select-policy scored n + 500 rows under the Δ for n (review F3)."""
    frame = _frame()
    if kind == "local":
        data = tmp_path / "t.csv"
        frame.to_csv(data, index=False)
        engine = LOCAL
        _grow_after_inspection(monkeypatch, lambda info: _append_rows(data, 500))
    else:
        data = write_parts(frame, tmp_path / "p", n_files=2, row_group=500)
        engine = {"kind": "dask", "address": cluster.scheduler_address, "batch_rows": 1000}

        def grow(info: Any) -> None:
            extra = frame.iloc[:500]
            pq.write_table(pa.Table.from_pandas(extra, preserve_index=False),
                           data / "part-002.parquet")

        _grow_after_inspection(monkeypatch, grow)
    res = invoke(["owl", "--spec", _spec(tmp_path, data, ledger=True, engine=engine)])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "the file changed while running; nothing was released or spent" in res.stderr
    _nothing_released(tmp_path)


def test_dask_partition_of_a_changed_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: Any
) -> None:
    """A worker opening a partition (first read or recompute) checks the file against the
    inspection; here every file 'changes' once the engine has planned its partitions."""
    import dpcausal.engine as engine_mod
    import dpcausal.engine.base as base

    root = write_parts(_frame(), tmp_path / "p", n_files=3, row_group=500)
    real_open = engine_mod.open_engine
    real_identity = base.file_identity

    @contextlib.contextmanager
    def opened(spec: Any, info: Any, columns: Any, *rest: Any) -> Any:
        with real_open(spec, info, columns, *rest) as engine:
            monkeypatch.setattr(base, "file_identity",
                                lambda p: (real_identity(p)[0] + 1, real_identity(p)[1]))
            yield engine

    monkeypatch.setattr(engine_mod, "open_engine", opened)
    spec = _spec(tmp_path, root, ledger=True, engine={
        "kind": "dask", "address": cluster.scheduler_address, "batch_rows": 1000})
    res = invoke(["owl", "--spec", spec])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "the file changed while running; nothing was released or spent; rerun" in res.stderr
    _nothing_released(tmp_path)


def test_pieces_count_their_rows_and_footers_must_add_up(tmp_path: Path) -> None:
    """A piece yields exactly its n_rows (Dask's read_piece, a recompute, included), and the
    footers read when planning must add up to the inspected n."""
    import dataclasses

    from dpcausal.engine.base import iter_piece, plan_pieces, read_piece
    from dpcausal.errors import DataError

    root = write_parts(_frame(), tmp_path / "p", n_files=2, row_group=500)
    info = tables.inspect_table(root)
    pieces = plan_pieces(info, 1000, ["B"])
    assert sum(len(read_piece(p, ["B"])) for p in pieces) == N_ROWS
    for wrong in (pieces[0].n_rows - 1, pieces[0].n_rows + 1):
        bad = dataclasses.replace(pieces[0], n_rows=wrong)
        with pytest.raises(DataError, match="the file changed while running"):
            list(iter_piece(bad, ["B"], 1000))
    with pytest.raises(DataError, match="the file changed while running"):
        plan_pieces(dataclasses.replace(info, n_rows=N_ROWS + 1), 1000)
    # a recompute after the file was rewritten
    victim = pieces[-1].path
    pq.write_table(pq.read_table(victim), victim)
    st = os.stat(victim)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(DataError, match="the file changed while running"):
        read_piece(pieces[-1], ["B"])


# ---------------------------------------------------------------- F5: Dask over CSV, clean-up

def test_dask_over_csv_is_a_spec_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Any] = []
    monkeypatch.setattr(distributed, "LocalCluster", lambda *a, **k: started.append(k))
    csv = tmp_path / "t.csv"
    _frame().to_csv(csv, index=False)
    res = invoke(["owl", "--spec", _spec(tmp_path, csv, engine={"kind": "dask",
                                                              "batch_rows": 1000})])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "convert to Parquet (a CSV file is one partition)" in res.stderr
    assert not started  # refused before any cluster is started
    _nothing_released(tmp_path)


def test_dask_over_csv_is_refused_by_the_dry_run_too(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    _frame().to_csv(csv, index=False)
    res = invoke(["owl", "--spec", _spec(tmp_path, csv, engine={"kind": "dask"}), "--dry-run"])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "convert to Parquet" in res.stderr


def test_in_memory_a_file_that_changed_after_inspection_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-memory path reads the rows once; they must be the n rows the plan was made for."""
    from dpcausal import pipeline

    data = tmp_path / "t.csv"
    _frame().to_csv(data, index=False)
    real = pipeline.tables.read_table

    def grown(path: Any, columns: Any, *args: Any) -> Any:
        _append_rows(data, 50)
        return real(path, columns, *args)

    monkeypatch.setattr(pipeline.tables, "read_table", grown)
    res = invoke(["owl", "--spec", _spec(tmp_path, data, ledger=True)])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "the file changed while running; nothing was released or spent" in res.stderr
    _nothing_released(tmp_path)


def test_dask_engine_closes_its_cluster_when_a_later_step_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dask.dataframe as dd

    from dpcausal.engine.dask import DaskEngine

    clusters: list[Any] = []
    real = distributed.LocalCluster

    def recording(*args: Any, **kwargs: Any) -> Any:
        assert kwargs["dashboard_address"] is None  # no dashboard server
        clusters.append(real(*args, **kwargs))
        return clusters[-1]

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("from_map failed")

    monkeypatch.setattr(distributed, "LocalCluster", recording)
    monkeypatch.setattr(dd, "from_map", broken)
    root = write_parts(_frame(), tmp_path / "p", n_files=2, row_group=500)
    with pytest.raises(RuntimeError, match="from_map failed"):
        DaskEngine(tables.inspect_table(root), ["B"], 1000, None)
    assert len(clusters) == 1
    assert clusters[0].status.name == "closed"


# ---------------------------------------------------------------- F6: mixed Parquet types

@pytest.mark.parametrize("engine", [None, "local", "dask"])
def test_parquet_files_with_different_column_types_are_refused(
    tmp_path: Path, cluster: Any, engine: str | None
) -> None:
    frame = _frame(2_000, 7)
    root = tmp_path / "parts"
    root.mkdir()
    first, second = frame.iloc[:1000].copy(), frame.iloc[1000:].copy()
    second["x2"] = second["x2"].astype("float32")
    for i, part in enumerate((first, second)):
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), root / f"p{i}.parquet")
    eng = None if engine is None else {"kind": engine, "batch_rows": 1000, **(
        {"address": cluster.scheduler_address} if engine == "dask" else {})}
    res = invoke(["owl", "--spec", _spec(tmp_path, root, engine=eng)])
    assert res.exit_code == 2, res.stdout + res.stderr
    message = " ".join(res.stderr.split())
    assert "p1.parquet: column 'x2' has type float but p0.parquet has double" in message
    assert "rewrite the files with the same schema" in message
    _nothing_released(tmp_path)


def test_a_type_difference_in_an_unread_column_is_not_refused(tmp_path: Path) -> None:
    root = tmp_path / "parts"
    root.mkdir()
    pq.write_table(pa.table({"y": [1.0, 2.0], "z": [1, 2]}), root / "p0.parquet")
    pq.write_table(pa.table({"y": [3.0], "z": ["a"]}), root / "p1.parquet")
    info = tables.inspect_table(root)
    assert tables.read_table(root, ["y"])["y"].tolist() == [1.0, 2.0, 3.0]
    from dpcausal.errors import DataError

    with pytest.raises(DataError, match=r"column 'z' has type string but p0\.parquet has int64"):
        tables.check_columns(info, ["y", "z"])


# ---------------------------------------------------------------- F7: Dask computation errors

def test_dask_cluster_failures_exit_5_and_computation_errors_propagate_without_text() -> None:
    from dpcausal.engine.dask import DaskEngine
    from dpcausal.errors import EngineError

    def fail(exc: BaseException) -> Any:
        def fn() -> Any:
            raise exc
        return fn

    for exc in (distributed.comm.core.CommClosedError(SECRET), TimeoutError(SECRET),
                OSError(SECRET), distributed.client.FutureCancelledError(SECRET, "r"),
                asyncio.CancelledError(SECRET),
                distributed.scheduler.KilledWorker(SECRET, SimpleNamespace(address="w"), 3)):
        with pytest.raises(EngineError) as err:
            DaskEngine._call(None, fail(exc))  # type: ignore[arg-type]
        assert SECRET not in str(err.value) and "failed mid-run" in str(err.value)
    with pytest.raises(ValueError, match=SECRET):  # as on the local engine: an internal error
        DaskEngine._call(None, fail(ValueError(SECRET)))  # type: ignore[arg-type]


def test_dask_computation_error_is_an_internal_error_not_exit_5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: Any
) -> None:
    import dpcausal.commands.owl.engine as eowl

    def broken(*args: Any, **kwargs: Any) -> Any:  # runs on a worker
        raise ZeroDivisionError("a bug in a per-batch computation")

    monkeypatch.setattr(eowl, "prepare_batch", broken)
    root = write_parts(_frame(), tmp_path / "p", n_files=2, row_group=500)
    res = invoke(["owl", "--spec", _spec(tmp_path, root, ledger=True, engine={
        "kind": "dask", "address": cluster.scheduler_address, "batch_rows": 1000})])
    assert res.exit_code == 1, res.stdout + res.stderr
    assert "internal error" in res.stderr and "Dask engine failed" not in res.stderr
    assert "ZeroDivisionError" in res.stderr and "a bug in a per-batch" not in res.stderr
    _nothing_released(tmp_path)
