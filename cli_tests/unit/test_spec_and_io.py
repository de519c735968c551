"""Spec loading and table reading: every bad input gives one actionable error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_tests.helpers import write_yaml
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.errors import DataError, SpecError
from dpcausal.frames import numeric_column
from dpcausal.io.tables import inspect_table, read_table
from dpcausal.spec.load import load_spec

BASE = {
    "data": {"path": "d.csv", "columns": {"outcome": "B", "treatment": "A", "covariates": ["x1"]}},
    "bounds": {"outcome": [0, 1], "covariates": [0, 1]},
    "privacy": {"epsilon": 1.0},
    "owl": {"treated": 1, "propensity": 0.5, "gamma": 10.0},
}


def _with(path: Path, **changes: object) -> Path:
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for dotted, value in changes.items():
        keys = dotted.split("__")
        node = doc
        for k in keys[:-1]:
            node[k] = dict(node[k])
            node = node[k]
        node[keys[-1]] = value
    return write_yaml(path / "spec.yaml", doc)


def test_valid_spec_loads_with_hash(tmp_path: Path) -> None:
    spec, sha = load_spec(_with(tmp_path), OwlSpec)
    assert spec.owl.gamma == 10.0 and len(sha) == 64


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"owl__gamm": 3}, r"owl\.gamm: unknown field"),
        ({"privacy__epsilon": -1}, r"privacy\.epsilon: must be a finite number > 0"),
        ({"privacy__epsilon": "lots"}, r"privacy\.epsilon"),
        ({"bounds__outcome": [1, 0]}, r"bounds\.outcome: lower bound must be < upper bound"),
        ({"owl__propensity": 1.5}, r"owl\.propensity"),
        ({"owl__treated": "yes"}, r"owl\.control is required"),
        ({"privacy__delta": 2}, r"privacy\.delta"),
        ({"ledger": {"path": "l.jsonl", "dataset": "d"}}, r"ledger\.budget: required field"),
    ],
)
def test_bad_specs_name_file_and_field(tmp_path: Path, changes: dict, expected: str) -> None:
    path = _with(tmp_path, **changes)
    with pytest.raises(SpecError, match=expected) as info:
        load_spec(path, OwlSpec)
    assert str(path) in str(info.value)


def test_missing_required_section(tmp_path: Path) -> None:
    doc = {k: v for k, v in BASE.items() if k != "privacy"}
    with pytest.raises(SpecError, match=r"privacy: required field is missing"):
        load_spec(write_yaml(tmp_path / "s.yaml", doc), OwlSpec)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("a: [1, 2", "invalid YAML at line"), ("- 1\n- 2\n", "must be a YAML mapping"), ("", "mapping")],
)
def test_unparseable_specs(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=expected):
        load_spec(path, OwlSpec)


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="spec file not found"):
        load_spec(tmp_path / "nope.yaml", OwlSpec)


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame({"x": [0.1, 0.2, 0.3], "a": ["t", "c", "t"], "y": [1.0, 2.0, 3.0]})


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_read_only_declared_columns(tmp_path: Path, frame: pd.DataFrame, fmt: str) -> None:
    path = tmp_path / f"d.{fmt}"
    frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path)
    info = inspect_table(path)
    assert info.n_rows == 3 and info.format == fmt and info.columns == ("x", "a", "y")
    got = read_table(path, ["y", "x"])
    assert list(got.columns) == ["y", "x"]
    np.testing.assert_array_equal(numeric_column(got, "y", path), [1.0, 2.0, 3.0])


def test_table_errors(tmp_path: Path, frame: pd.DataFrame) -> None:
    with pytest.raises(DataError, match="not found"):
        inspect_table(tmp_path / "missing.csv")
    with pytest.raises(DataError, match="no data file given"):
        inspect_table(None)
    (tmp_path / "d.xlsx").write_text("x")
    with pytest.raises(DataError, match="unknown file type"):
        inspect_table(tmp_path / "d.xlsx")
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"column\(s\) 'z' not found; the file's 3 column\(s\), nearest first: x, a, y"):
        read_table(path, ["x", "z"])
    empty = tmp_path / "e.csv"
    empty.write_text("x,y\n")
    with pytest.raises(DataError, match="no rows"):
        inspect_table(empty)


def test_numeric_column_refuses_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("x,y\n1,a\n2,3\n,4\ninf,5\n")
    got = read_table(path, ["x", "y"])
    with pytest.raises(DataError, match=r"column 'y' has 1 non-numeric value\(s\) \(first at data row 1\); the column"):
        numeric_column(got, "y", path)
    with pytest.raises(DataError, match=r"column 'x' has 2 missing, NaN or infinite value\(s\)"):
        numeric_column(got, "x", path)
