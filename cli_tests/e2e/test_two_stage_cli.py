"""two-stage through the real CLI: success, --dry-run, --json, --apply, the ledger, every exit code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from cli_tests.helpers import invoke, read_json, releases, write_yaml

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("propensities", "balance_table", "residual", "lambda_hat", "smd", "noise_draw")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example spec and the two-stage sample data, in a temporary current directory."""
    (tmp_path / "sample_data").mkdir()
    for name in ("two_stage_obs.csv", "two_stage_new_patients.csv"):
        shutil.copy(REPO / "sample_data" / name, tmp_path / "sample_data" / name)
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    (tmp_path / "out").mkdir()  # as in a clone (out/.gitkeep): ledgers are never made in new dirs
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_spec(path: Path, mutate: Any = None) -> Path:
    doc = yaml.safe_load((REPO / "configs" / "two_stage.yaml").read_text())
    if mutate:
        mutate(doc)
    return write_yaml(path, doc)


def test_example_config_releases(workdir: Path) -> None:
    res = invoke(["two-stage", "--spec", "configs/two_stage.yaml"])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "two_stage"
    rule, receipt = read_json(out / "rule.json"), read_json(out / "receipt.json")
    assert len(rule["theta"]) == 11
    assert sum(abs(v) for v in rule["theta"]) <= 30.0 * (1 + 1e-9)
    assert receipt["command"] == "two-stage"
    assert receipt["guarantee"] == "pure"
    assert receipt["dp_guarantee"] is True
    assert receipt["epsilon"] == 1.0
    assert receipt["neighbouring"]["relation"] == "replace-one"
    ev = receipt["events"][0]
    assert ev["kind"] == "l2_laplace"
    assert ev["params"]["gamma"] >= ev["params"]["gamma_required"]
    recs = pd.read_csv(out / "recommendations.csv")
    assert len(recs) == 200
    assert set(recs["recommended"]) <= {0, 1}
    assert len(releases(workdir / "out" / "ledger.jsonl")) == 1
    # nothing non-private is released (weights, propensities, balance tables, residuals)
    assert set(rule) == {"format_version", "command", "method", "feature_map", "theta",
                         "coefficients_original_units", "arms", "decision", "outcome_direction",
                         "bounds", "outcome_center", "privacy", "intervals"}
    assert sorted(p.name for p in out.iterdir()) == ["receipt.json", "recommendations.csv",
                                                     "rule.json", "rule.png"]
    text = json.dumps(rule).lower() + json.dumps(receipt).lower()
    assert not any(word in text for word in FORBIDDEN)
    assert receipt["assumptions"]["stage1_released"] is False


def test_dry_run_reads_no_rows(workdir: Path) -> None:
    data = workdir / "sample_data" / "two_stage_obs.csv"
    lines = data.read_text().splitlines()
    lines[5] = "oops," + lines[5].split(",", 1)[1]  # a bad value a real run would refuse
    data.write_text("\n".join(lines) + "\n")
    res = invoke(["two-stage", "--spec", "configs/two_stage.yaml", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["dry_run"] is True
    for key in ("gamma_required", "noise_scale", "noise_to_signal"):
        assert plan["details"][key] > 0
    assert not (workdir / "out" / "two_stage").exists()
    assert not (workdir / "out" / "ledger.jsonl").exists()
    res = invoke(["two-stage", "--spec", "configs/two_stage.yaml"])
    assert res.exit_code == 2
    assert "x1" in res.output


def test_json_and_seeded_noise_reproducible(workdir: Path) -> None:
    args = ["two-stage", "--spec", "configs/two_stage.yaml", "--json", "--test-noise-seed", "5"]
    r1 = invoke([*args, "--out", "o1"])
    invoke([*args, "--out", "o2"])
    assert r1.exit_code == 0, r1.output
    j1 = json.loads(r1.stdout)
    assert j1["dp_guarantee"] is False
    assert j1["rng"] == "chacha20/seeded-test"
    assert read_json(workdir / "o1" / "rule.json")["theta"] == read_json(
        workdir / "o2" / "rule.json")["theta"]
    assert j1["outputs"] == read_json(workdir / "o1" / "receipt.json")["outputs"]


def test_paper_mode_needs_allow_and_is_uncertified(workdir: Path) -> None:
    def paper(doc: dict[str, Any]) -> None:
        doc["two_stage"]["calibration"] = "paper"

    res = invoke(["two-stage", "--spec", write_spec(workdir / "p.yaml", paper)])
    assert res.exit_code == 3
    assert "allow_uncertified" in res.output

    def allowed(doc: dict[str, Any]) -> None:
        paper(doc)
        doc["two_stage"]["allow_uncertified"] = True

    res = invoke(["two-stage", "--spec", write_spec(workdir / "q.yaml", allowed), "--json"])
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.stdout)
    assert receipt["dp_guarantee"] is False
    assert receipt["guarantee"] == "none"


def test_gaussian_and_universal(workdir: Path) -> None:
    def gauss(doc: dict[str, Any]) -> None:
        doc["privacy"]["delta"] = 1e-6
        doc["ledger"]["budget"]["delta"] = 1e-5
        doc["two_stage"]["noise"] = "gaussian"
        doc["two_stage"]["weights"] = "ebw"
        doc["two_stage"]["sensitivity"] = "universal"
        doc["two_stage"].pop("ipw_known")
        doc["two_stage"]["ebw"] = {"radius": 1.0, "ridge": 1.0}

    res = invoke(["two-stage", "--spec", write_spec(workdir / "g.yaml", gauss), "--json"])
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.stdout)
    assert receipt["guarantee"] == "approximate"
    assert receipt["delta"] == 1e-6
    assert receipt["events"][0]["params"]["stability"]["W1s"] == 2 * 2000


@pytest.mark.parametrize(
    ("mutate", "code", "needle"),
    [
        (lambda d: d["two_stage"].update(bogus=1), 2, "unknown field"),
        (lambda d: d["data"]["columns"].update(outcome="nope"), 2, "nope"),
        (lambda d: d["bounds"].pop("outcome"), 3, "bounds.outcome"),
        (lambda d: d["two_stage"].update(l1_radius=5.0, l1_scale=0.5), 2, "at most one"),
        (lambda d: d["two_stage"].update(weights="mmd", mmd={"bandwidth": 1.0},
                                         ipw_known=None), 3, "universal"),
        (lambda d: d["two_stage"].update(gamma=1e-6), 3, "γ_required"),
        (lambda d: d["privacy"].update(epsilon=50.0), 3, "budget"),
        (lambda d: d["privacy"].update(delta=1e-5), 2, "delta"),
        (lambda d: d["two_stage"].update(treated=7), 2, "neither"),
    ],
)
def test_exit_codes(workdir: Path, mutate: Any, code: int, needle: str) -> None:
    res = invoke(["two-stage", "--spec", write_spec(workdir / "s.yaml", mutate)])
    assert res.exit_code == code, res.output
    assert needle in res.output
    assert not (workdir / "out" / "two_stage" / "rule.json").exists()
    assert not (workdir / "out" / "ledger.jsonl").exists()


def test_apply_roundtrip_and_schema(workdir: Path) -> None:
    res = invoke(["two-stage", "--spec", "configs/two_stage.yaml", "--out", "o"])
    assert res.exit_code == 0, res.output
    res = invoke(["two-stage", "--apply", "o/rule.json", "--data",
                  "sample_data/two_stage_new_patients.csv", "--out", "o2"])
    assert res.exit_code == 0, res.output
    a = pd.read_csv(workdir / "o" / "recommendations.csv")
    b = pd.read_csv(workdir / "o2" / "recommendations.csv")
    pd.testing.assert_frame_equal(a, b)
    res = invoke(["two-stage", "--apply", "missing.json", "--data",
                  "sample_data/two_stage_new_patients.csv", "--out", "o3"])
    assert res.exit_code == 2
    res = invoke(["schema", "two-stage"])
    assert res.exit_code == 0
    assert "two_stage" in json.loads(res.stdout)["properties"]


def test_parquet_input_and_weak_delta_warning(workdir: Path) -> None:
    frame = pd.read_csv(workdir / "sample_data" / "two_stage_obs.csv")
    frame.to_parquet(workdir / "obs.parquet", index=False)

    def gauss(doc: dict[str, Any]) -> None:
        doc["privacy"]["delta"] = 1e-3  # ≥ 1/n = 5e-4: weak, warned
        doc["ledger"]["budget"]["delta"] = 1e-2
        doc["two_stage"]["noise"] = "gaussian"

    res = invoke(["two-stage", "--spec", write_spec(workdir / "g.yaml", gauss), "--data",
                  "obs.parquet", "--out", "pq"])
    assert res.exit_code == 0, res.output
    assert "weak" in res.output
    assert (workdir / "pq" / "recommendations.parquet").exists()
    assert len(read_json(workdir / "pq" / "rule.json")["theta"]) == 11
