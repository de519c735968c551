"""Issue 12: data files a newcomer gets wrong — duplicated column names, compressed or corrupted
files, integer columns in ``audit privacy --data`` — in memory and on the engines."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from cli_tests.helpers import invoke

COMMANDS = ("cate", "owl", "select_policy", "synth_control", "two_stage")
ENGINE_COMMANDS = ("cate", "owl", "select_policy", "two_stage")


def _config(repo_root: Path, name: str) -> dict[str, Any]:
    return yaml.safe_load((repo_root / "configs" / f"{name}.yaml").read_text())


def _with_duplicate(frame: pd.DataFrame, column: str) -> tuple[list[str], list[Any]]:
    """Names and columns of ``frame`` plus a second, different, column named ``column``."""
    names = [*frame.columns, column]
    values = [frame[c].to_numpy() for c in frame.columns] + [frame[column].to_numpy()[::-1]]
    return names, values


def _release(name: str, spec: Path, data: Path, tmp_path: Path, *extra: str) -> Any:
    return invoke([name.replace("_", "-"), "--spec", spec, "--data", data,
                   "--out", tmp_path / "out", "--ledger", tmp_path / "ledger.jsonl", *extra])


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_duplicated_column_name_is_refused(
        repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        fmt: str) -> None:
    # before: CSV readers silently took the first of two columns named like the outcome (a wrong
    # release); Parquet failed with pyarrow's "Multiple matches" or read both
    cfg = _config(repo_root, name)
    column = cfg["data"]["columns"]["outcome"]
    frame = pd.read_csv(repo_root / cfg["data"]["path"])
    names, values = _with_duplicate(frame, column)
    data = tmp_path / f"dup.{fmt}"
    if fmt == "csv":
        pd.DataFrame(dict(enumerate(values))).set_axis(names, axis=1).to_csv(data, index=False)
    else:
        pq.write_table(pa.Table.from_arrays([pa.array(v) for v in values], names=names), data)
    monkeypatch.chdir(repo_root)
    engines: list[list[str]] = [[]]
    if name in ENGINE_COMMANDS:
        engines.append(["--engine", "local"])
        if fmt == "parquet":
            engines.append(["--engine", "dask"])  # refused before any cluster starts
    for engine in engines:
        for mode in ([], ["--dry-run"]):
            res = _release(name, repo_root / "configs" / f"{name}.yaml", data, tmp_path,
                           *engine, *mode)
            assert res.exit_code == 2, (engine, mode, res.output)
            assert f"2 columns named '{column}'" in res.stderr, res.stderr
            assert not (tmp_path / "out").exists()


def test_apply_refuses_a_duplicated_column(repo_root: Path, tmp_path: Path) -> None:
    frame = pd.read_csv(repo_root / "sample_data" / "owl_new_patients.csv")
    names, values = _with_duplicate(frame, "x1")
    data = tmp_path / "new.csv"
    pd.DataFrame(dict(enumerate(values))).set_axis(names, axis=1).to_csv(data, index=False)
    rule = tmp_path / "rule.json"
    rule.write_text('{"command": "owl"}')  # the columns are refused before the rule is read
    res = invoke(["owl", "--apply", rule, "--data", data, "--out", tmp_path / "o"])
    assert res.exit_code == 2 and "2 columns named 'x1'" in res.stderr


@pytest.mark.parametrize("engine", [[], ["--engine", "local"]], ids=["memory", "local"])
def test_compressed_csv(repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        engine: list[str]) -> None:
    monkeypatch.chdir(repo_root)
    spec = repo_root / "configs" / "owl.yaml"
    raw = (repo_root / "sample_data" / "owl_trial.csv").read_bytes()
    gz = tmp_path / "trial.csv.gz"
    gz.write_bytes(gzip.compress(raw))
    # a .csv.gz file is decompressed as it is read, in memory and streamed alike
    res = _release("owl", spec, gz, tmp_path, *engine, "--quiet")
    assert res.exit_code == 0, res.output
    # gzip bytes under a .csv name: named for what they are (was "Expected 1 columns, got 2")
    shutil.copy(gz, tmp_path / "trial.csv")
    for mode in ([], ["--dry-run"]):
        res = _release("owl", spec, tmp_path / "trial.csv", tmp_path / "x", *engine, *mode)
        assert res.exit_code == 2
        assert "gzip-compressed" in res.stderr and "trial.csv.gz" not in res.stderr
        assert "name it .csv.gz" in res.stderr
    # and a .gz name on plain text
    (tmp_path / "plain.csv.gz").write_bytes(raw)
    res = _release("owl", spec, tmp_path / "plain.csv.gz", tmp_path / "y", *engine)
    assert res.exit_code == 2 and "not gzip-compressed" in res.stderr


def _corrupt_parquet(repo_root: Path, path: Path) -> None:
    """The owl sample as Parquet with page checksums, one byte of the outcome's page flipped."""
    frame = pd.read_csv(repo_root / "sample_data" / "owl_trial.csv")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path,
                   write_page_checksum=True, compression="none", use_dictionary=False)
    col = pq.ParquetFile(path).metadata.row_group(0).column(frame.columns.get_loc("B"))
    raw = bytearray(path.read_bytes())
    raw[col.data_page_offset + col.total_compressed_size // 2] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("engine", [[], ["--engine", "local"]], ids=["memory", "local"])
def test_a_corrupted_parquet_page_is_refused(
        repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        engine: list[str]) -> None:
    # before: the flipped byte changed one outcome and the release went out, silently
    data = tmp_path / "trial.parquet"
    _corrupt_parquet(repo_root, data)
    monkeypatch.chdir(repo_root)
    res = _release("owl", repo_root / "configs" / "owl.yaml", data, tmp_path, *engine)
    assert res.exit_code == 2, res.output
    assert "failed its checksum" in res.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "ledger.jsonl").exists()


def test_a_corrupted_parquet_page_is_refused_on_dask(
        repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: Any) -> None:
    data = tmp_path / "trial.parquet"
    _corrupt_parquet(repo_root, data)
    monkeypatch.chdir(repo_root)
    res = _release("owl", repo_root / "configs" / "owl.yaml", data, tmp_path,
                   "--engine-address", cluster.scheduler_address)
    assert res.exit_code == 2, res.output
    assert "failed its checksum" in res.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_audit_privacy_data_with_integer_columns(
        repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # before (pandas 3): TypeError "Invalid value '7.4' for dtype 'int64'" in replace_one, exit 1
    cfg = _config(repo_root, name)
    frame = pd.read_csv(repo_root / cfg["data"]["path"])
    for column in frame.columns:
        if frame[column].dtype == np.float64:
            frame[column] = frame[column].round().astype(np.int64)
    assert (frame.dtypes == np.int64).sum() >= 2
    data = tmp_path / "ints.csv"
    frame.to_csv(data, index=False)
    monkeypatch.chdir(repo_root)
    res = invoke(["audit", "privacy", "--spec", repo_root / "configs" / f"{name}.yaml",
                  "--data", data, "--trials", "0", "--pairs", "4", "--quiet"])
    assert res.exit_code == 0, res.output
