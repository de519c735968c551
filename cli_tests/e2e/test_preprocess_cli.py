"""Declared preprocessing end to end (issue #20): the shipped mixed-type example, refusals before
any noise (in memory and on both engines), the same release whatever the engine, the plan and
the receipt listing the rules, --apply on raw rows, and text treatment labels for cate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from cli_tests.helpers import invoke, read_json, write_parts, write_yaml
from dpcausal.io import tables
from dpcausal.mechanisms.guard import NoiseGuard

ROOT = Path(__file__).resolve().parents[2]
SECRET = "Smith-John-1957"


@pytest.fixture
def mixed(tmp_path: Path) -> dict[str, Any]:
    """The shipped example spec, pointed into ``tmp_path``, and its data as text."""
    doc = yaml.safe_load((ROOT / "configs" / "owl_mixed.yaml").read_text())
    doc["data"]["path"] = str(ROOT / "sample_data" / "mixed_trial.csv")
    doc["owl"]["apply_to"] = str(ROOT / "sample_data" / "mixed_new_patients.csv")
    doc["ledger"]["path"] = str(tmp_path / "ledger.jsonl")
    doc["output"]["dir"] = str(tmp_path / "out")
    frame = pd.read_csv(ROOT / "sample_data" / "mixed_trial.csv", dtype=str,
                        keep_default_na=False)
    return {"doc": doc, "frame": frame, "tmp": tmp_path}


def _spec(m: dict[str, Any], name: str = "s.yaml", **data: Any) -> Path:
    doc = json.loads(json.dumps(m["doc"]))
    doc["data"].update(data)
    return write_yaml(m["tmp"] / name, doc)


def _theta(res: Any) -> list[float]:
    assert res.exit_code == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    return read_json(Path(out["output_paths"][0]).parent / "rule.json")["theta"]


def test_the_shipped_example_lists_its_preprocessing_and_applies_it_to_raw_rows(
        mixed: dict[str, Any]) -> None:
    spec = _spec(mixed)
    dry = invoke(["owl", "--spec", spec, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.stderr
    cols = {m["name"]: m["bounds"] for m in
            json.loads(dry.stdout)["assumptions"]["preprocessing"]["model_columns"]}
    assert cols["region=north"] == cols["region=(other)"] == cols["smoker=yes"] == [0.0, 1.0]
    assert cols["log1p(income)"] == [0.0, pytest.approx(np.log1p(250000.0))]
    assert cols["age*smoker=yes"] == [0.0, 90.0] and "smoker=no" not in cols
    human = invoke(["owl", "--spec", spec, "--dry-run"])
    assert "region=(other) in [0, 1]: 1 if region is none of its 4 declared levels" in human.stdout
    res = invoke(["owl", "--spec", spec, "--json"])
    assert res.exit_code == 0, res.stderr
    receipt = json.loads(res.stdout)
    assert receipt["assumptions"]["preprocessing"]["model_columns"] == \
        json.loads(dry.stdout)["assumptions"]["preprocessing"]["model_columns"]
    out = mixed["tmp"] / "out"
    rule = read_json(out / "rule.json")
    assert rule["feature_map"]["covariates"] == list(cols)
    assert rule["preprocessing"] == receipt["assumptions"]["preprocessing"]
    applied = invoke(["owl", "--apply", out / "rule.json", "--data",
                      ROOT / "sample_data" / "mixed_new_patients.csv", "--out",
                      mixed["tmp"] / "applied"])
    assert applied.exit_code == 0, applied.stderr
    a = pd.read_csv(mixed["tmp"] / "applied" / "recommendations.csv")
    b = pd.read_csv(out / "recommendations.csv")
    assert a["recommended"].tolist() == b["recommended"].tolist()
    assert set(a["recommended"]) <= {"treated", "control"}


def _refusing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    drawn: list[str] = []

    def no_noise(self: Any, mechanism: Any, *args: Any) -> Any:
        drawn.append(mechanism.event().stage)
        raise AssertionError("noise drawn on data that must be refused")

    monkeypatch.setattr(NoiseGuard, "_admit", no_noise)
    return drawn


@pytest.mark.parametrize("engine", ["memory", "local", "dask"])
def test_an_undeclared_level_fails_before_any_noise_with_every_problem(
        mixed: dict[str, Any], monkeypatch: pytest.MonkeyPatch, engine: str,
        cluster: Any) -> None:
    """A level the spec does not declare (with unseen: error) late in the file, a missing age
    early and a bad arm label: one error naming all three, exit 2, no noise drawn, nothing
    written or charged, no value quoted; the same message in memory and over batches."""
    frame = mixed["frame"].copy()
    frame.loc[9_000, "smoker"] = SECRET  # beyond the first batch
    frame.loc[3, "age"] = ""
    frame.loc[[5, 9_500], "arm"] = SECRET
    if engine == "dask":
        data = write_parts(frame.replace("", None), mixed["tmp"] / "parts", n_files=3,
                           row_group=1_000)
        extra = ["--engine-address", cluster.scheduler_address]
    else:
        data = mixed["tmp"] / "bad.csv"
        frame.to_csv(data, index=False)
        extra = ["--engine", "local"] if engine == "local" else []
        monkeypatch.setattr(tables, "CSV_BLOCK_BYTES", 16_384)
    doc = json.loads(json.dumps(mixed["doc"]))
    doc["engine"] = {"batch_rows": 1_000}
    drawn = _refusing(monkeypatch)
    spec = _spec({**mixed, "doc": doc if engine != "memory" else mixed["doc"]}, path=str(data))
    res = invoke(["owl", "--spec", spec, *extra] if engine != "memory" else
                 ["owl", "--spec", spec])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert drawn == []
    err = res.stderr
    assert SECRET not in err
    assert "column 'age' has 1 missing, NaN or infinite value(s) (first at data row 4)" in err
    assert "column 'smoker' has 1 value(s) that are none of its declared levels (first at " \
           "data row 9001)" in err
    assert "column 'arm' has 2 value(s) that are neither the treated value 'treated' nor the " \
           "control value 'control' (first at data row 6)" in err
    assert not (mixed["tmp"] / "out").exists()
    assert not (mixed["tmp"] / "ledger.jsonl").exists()


def test_engines_release_what_memory_releases(mixed: dict[str, Any], cluster: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches are transformed as the whole table is: the same θ in memory, streamed from a CSV
    in 1,000-row batches and on Dask partitions of Parquet files."""
    monkeypatch.setattr(tables, "CSV_BLOCK_BYTES", 16_384)
    args = ["--json", "--test-noise-seed", "5"]
    memory = _theta(invoke(["owl", "--spec", _spec(mixed), *args]))
    doc = json.loads(json.dumps(mixed["doc"]))
    doc["engine"] = {"kind": "local", "batch_rows": 1_000, "cache_mb": 0}
    local = _theta(invoke(["owl", "--spec", _spec({**mixed, "doc": doc}, "l.yaml"), *args]))
    frame = pd.read_csv(ROOT / "sample_data" / "mixed_trial.csv")
    parts = write_parts(frame, mixed["tmp"] / "parts", n_files=3, row_group=1_000)
    dask = _theta(invoke(["owl", "--spec", _spec({**mixed, "doc": doc}, "d.yaml",
                                                 path=str(parts)),
                          "--engine-address", cluster.scheduler_address, *args]))
    np.testing.assert_allclose(local, memory, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dask, memory, rtol=1e-9, atol=1e-12)


def test_audit_privacy_runs_on_the_model_columns(mixed: dict[str, Any]) -> None:
    res = invoke(["audit", "privacy", "--spec", _spec(mixed), "--pairs", "8", "--trials", "0",
                  "--rows", "300", "--json"])
    assert res.exit_code == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["verdict"] == "pass"


def _cate_spec(tmp: Path, data: Path, name: str, **section: Any) -> Path:
    doc = yaml.safe_load((ROOT / "configs" / "cate.yaml").read_text())
    doc["data"]["path"] = str(data)
    doc.pop("ledger")
    doc["output"]["dir"] = str(tmp / name)
    doc["cate"].update(split={"kind": "seeded", "seed": 3}, plot=False, **section)
    return write_yaml(tmp / f"{name}.yaml", doc)


def test_cate_accepts_text_treatment_labels(tmp_path: Path) -> None:
    """cate.treated/control: text labels give the release 0/1 labels give (same noise seed)."""
    frame = pd.read_csv(ROOT / "sample_data" / "cate_obs.csv")
    text = frame.assign(A=np.where(frame["A"] == 1, "treated", "control"))
    text.to_csv(tmp_path / "text.csv", index=False)
    args = ["--test-noise-seed", "2", "--quiet"]
    numeric = invoke(["cate", "--spec", _cate_spec(tmp_path, ROOT / "sample_data" /
                                                   "cate_obs.csv", "num"), *args])
    labels = invoke(["cate", "--spec", _cate_spec(tmp_path, tmp_path / "text.csv", "txt",
                                                  treated="treated", control="control"), *args])
    assert numeric.exit_code == labels.exit_code == 0, numeric.stderr + labels.stderr
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "num" / "cate.csv"),
                                  pd.read_csv(tmp_path / "txt" / "cate.csv"))
    refused = invoke(["cate", "--spec", _cate_spec(tmp_path, tmp_path / "text.csv", "bad")])
    assert refused.exit_code == 2
    assert "neither the treated value 1 nor the control value 0" in refused.stderr
