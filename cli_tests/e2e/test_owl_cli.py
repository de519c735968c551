"""owl through the real CLI: success, --dry-run, --json, --apply, the ledger, and every exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from cli_tests.helpers import invoke, read_json, releases, write_yaml
from dpcausal import __version__
from dpcausal.commands.owl import plan as owl_plan
from dpcausal.commands.owl.estimate import fit_nonprivate, run
from dpcausal.commands.owl.setup import build_setup, prepare
from dpcausal.commands.owl.spec import OwlSpec

REPO = Path(__file__).resolve().parents[2]


def spec_doc() -> dict[str, Any]:
    return yaml.safe_load((REPO / "configs" / "owl.yaml").read_text())


def write_spec(path: Path, mutate: Any = None) -> Path:
    doc = spec_doc()
    if mutate:
        mutate(doc)
    return write_yaml(path, doc)


def test_example_config_releases_rule_receipt_and_ledger(workdir: Path) -> None:
    res = invoke(["owl", "--spec", "configs/owl.yaml"])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "owl"
    rule, receipt = read_json(out / "rule.json"), read_json(out / "receipt.json")
    assert len(rule["theta"]) == 5 and rule["arms"] == {"treated": 1, "control": 0}
    assert receipt["command"] == "owl" and receipt["guarantee"] == "pure"
    assert receipt["dp_guarantee"] is True and receipt["rng"] == "chacha20/os-entropy"
    assert receipt["epsilon"] == 5.0 and receipt["delta"] == 0.0
    assert receipt["numerics"] == "float64"
    ev = receipt["events"][0]
    assert ev["kind"] == "l2_laplace" and ev["sensitivity"] == pytest.approx(2 * 15.001 / 0.5 / 75,
                                                                           rel=1e-5)
    recs = pd.read_csv(out / "recommendations.csv")
    assert list(recs.columns) == ["patient_id", "x1", "x2", "x3", "x4", "recommended", "margin",
                                  "margin_noise_lo", "margin_noise_hi", "noise_could_flip"]
    assert {o["path"] for o in receipt["outputs"]} == {"rule.json", "recommendations.csv",
                                                      "rule.png"}
    assert releases(workdir / "out" / "ledger.jsonl") == [receipt]
    assert invoke(["audit", "verify", "--ledger", "out/ledger.jsonl",
                   "--receipt", str(out / "receipt.json")]).exit_code == 0


def test_json_output_is_the_receipt(workdir: Path) -> None:
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--json", "--out", "o2"])
    assert res.exit_code == 0
    obj = json.loads(res.stdout)
    receipt = read_json(workdir / "o2" / "receipt.json")
    assert {k: v for k, v in obj.items() if k not in ("output_paths", "summary")} == receipt
    assert str(Path("o2") / "rule.json") in obj["output_paths"]


def test_cli_equals_library_with_test_seed(workdir: Path) -> None:
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--test-noise-seed", "5", "--out", "o3"])
    assert res.exit_code == 0
    receipt = read_json(workdir / "o3" / "receipt.json")
    assert receipt["dp_guarantee"] is False and receipt["rng"] == "chacha20/seeded-test"
    assert receipt["guarantee"] == "none"
    assert read_json(workdir / "o3" / "rule.json")["privacy"]["dp_guarantee"] is False
    spec = OwlSpec.model_validate(spec_doc())
    frame = pd.read_csv("sample_data/owl_trial.csv")
    from dpcausal.mechanisms import NoiseGuard

    plan = replace(owl_plan.plan(spec, len(frame), {}, rng=np.random.default_rng(0)), dp_guarantee=False)
    release = run(spec, frame, plan, {"apply_to": pd.read_csv(spec.owl.apply_to)},
                      rng=np.random.default_rng(0), noise=NoiseGuard(plan, test_seed=5))
    assert read_json(workdir / "o3" / "rule.json") == json.loads(json.dumps(
        release.documents["rule.json"]))


def test_huge_epsilon_equals_nonprivate_solve(workdir: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["privacy"]["epsilon"] = 1e9
        d.pop("ledger")

    spec_path = write_spec(workdir / "s.yaml", mutate)
    res = invoke(["owl", "--spec", spec_path, "--out", "o4", "--test-noise-seed", "1"])
    assert res.exit_code == 0, res.output
    spec = OwlSpec.model_validate(yaml.safe_load(spec_path.read_text()))
    setup = build_setup(spec)
    data = prepare(spec, setup, pd.read_csv("sample_data/owl_trial.csv"), None)
    np.testing.assert_allclose(read_json(workdir / "o4" / "rule.json")["theta"],
                               fit_nonprivate(setup, data, 75.0), atol=1e-6)


def test_dry_run_reads_no_rows_and_spends_nothing(workdir: Path) -> None:
    # Corrupt every value: a dry run must still succeed, since it only reads the schema and row count.
    frame = pd.read_csv("sample_data/owl_trial.csv")
    frame["B"] = "secret"
    frame.to_csv("sample_data/owl_trial.csv", index=False)
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["dry_run"] is True and plan["n_rows"] == 1000
    assert plan["events"][0]["noise_scale"] == pytest.approx(plan["events"][0]["sensitivity"] / 5)
    assert plan["ledger"]["spent_after"]["epsilon"] == 5.0
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger
    human = invoke(["owl", "--spec", "configs/owl.yaml", "--dry-run"])
    assert human.exit_code == 0 and "privacy plan" in human.stdout and "dry run" in human.stdout
    # The real run then refuses the non-numeric outcome, naming the column.
    res = invoke(["owl", "--spec", "configs/owl.yaml"])
    assert res.exit_code == 2 and "column 'B'" in res.stderr
    assert not (workdir / "out" / "ledger.jsonl").exists()


def test_budget_is_enforced_across_runs(workdir: Path) -> None:
    spec_path = write_spec(workdir / "s.yaml", lambda d: d["ledger"]["budget"].update(epsilon=12.0))
    assert invoke(["owl", "--spec", spec_path, "--quiet"]).exit_code == 0
    assert invoke(["owl", "--spec", spec_path, "--quiet"]).exit_code == 0
    res = invoke(["owl", "--spec", spec_path])
    assert res.exit_code == 3
    assert ("requested ε=5, δ=0 / spent ε=10, δ=0 / after this run ε=15, δ=0 (basic composition) "
            "/ cap ε=12, δ=0") in res.stderr
    assert len(releases(workdir / "out" / "ledger.jsonl")) == 2
    dry = invoke(["owl", "--spec", spec_path, "--dry-run"])
    assert dry.exit_code == 3


@pytest.mark.parametrize(
    ("mutate", "code", "message"),
    [
        (lambda d: d["owl"].update(gamma=-1), 2, "owl.gamma"),
        (lambda d: d["owl"].update(kernal="rff"), 2, "owl.kernal: unknown field"),
        (lambda d: d["data"]["columns"].update(outcome="nope"), 2, "'nope'"),
        (lambda d: d["data"].update(path="missing.csv"), 2, "missing.csv: data file not found"),
        (lambda d: d["bounds"].pop("outcome"), 3, "bounds.outcome is missing"),
        (lambda d: d["bounds"].update(covariates={"x1": [0, 1]}), 3, "x2, x3, x4"),
        (lambda d: d["bounds"].update(outcome=[5, -5]), 2, "lower bound must be < upper bound"),
        (lambda d: d["privacy"].update(delta=1e-6), 2, "pure"),
        (lambda d: d["owl"].update(apply_to="sample_data/owl_trial.csv"), 2, "training data"),
    ],
)
def test_bad_input_matrix(workdir: Path, mutate: Any, code: int, message: str) -> None:
    spec_path = write_spec(workdir / "bad.yaml", mutate)
    res = invoke(["owl", "--spec", spec_path])
    assert res.exit_code == code, res.output
    assert message in res.stderr
    assert "Traceback" not in res.output
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("x1,x2,x3,x4,A,B\n", "no rows"),
        ("x1,x2,x3,x4,A,B\n0.1,0.2,0.3,0.4,1,\n", "missing, NaN or infinite"),
        ("x1,x2,x3,x4,A,B\n0.1,0.2,0.3,0.4,3,1.0\n", "neither the treated value"),
        ("x1,x2,x3,x4,A,B\n0.1,zz,0.3,0.4,1,1.0\n", "column 'x2' has 1 non-numeric"),
    ],
)
def test_bad_data_matrix(workdir: Path, content: str, message: str) -> None:
    Path("bad.csv").write_text(content)
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--data", "bad.csv"])
    assert res.exit_code == 2, res.output
    assert "bad.csv" in res.stderr and message in res.stderr
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger


def test_parquet_input_gives_parquet_output(workdir: Path) -> None:
    pd.read_csv("sample_data/owl_trial.csv").to_parquet("trial.parquet")
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--data", "trial.parquet", "--out", "op"])
    assert res.exit_code == 0, res.output
    assert (workdir / "op" / "recommendations.parquet").exists()


def test_apply_saved_rule_costs_nothing(workdir: Path) -> None:
    assert invoke(["owl", "--spec", "configs/owl.yaml", "--quiet"]).exit_code == 0
    before = (workdir / "out" / "ledger.jsonl").read_text()
    res = invoke(["owl", "--apply", "out/owl/rule.json", "--data",
                  "sample_data/owl_new_patients.csv", "--out", "applied"])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv("applied/recommendations.csv"),
                                  pd.read_csv("out/owl/recommendations.csv"))
    assert (workdir / "out" / "ledger.jsonl").read_text() == before
    assert invoke(["owl", "--apply", "nope.json", "--data", "sample_data/owl_new_patients.csv",
                   "--out", "x"]).exit_code == 2
    Path("bad.json").write_text("{")
    assert invoke(["owl", "--apply", "bad.json", "--data", "sample_data/owl_new_patients.csv",
                   "--out", "x"]).exit_code == 2


def test_tuning_on_public_file_is_recorded(workdir: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["owl"].pop("gamma")
        d["owl"]["tune"] = {"public_data": "sample_data/owl_public.csv", "grid": [10, 75, 300],
                            "repeats": 3, "seed": 1}

    res = invoke(["owl", "--spec", write_spec(workdir / "t.yaml", mutate), "--json", "--dry-run"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["details"]["gamma"] in (10, 75, 300)
    assert plan["details"]["gamma_source"]["public_data"] == "sample_data/owl_public.csv"


def test_unwritable_output_exits_5(workdir: Path) -> None:
    Path("blocker").write_text("a file, not a directory")
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--out", "blocker/sub"])
    assert res.exit_code == 5, res.output
    assert not (workdir / "out" / "ledger.jsonl").exists()


def test_ledger_lock_timeout_exits_5(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import filelock

    from dpcausal.accounting import ledger_file

    monkeypatch.setattr(ledger_file, "LOCK_TIMEOUT_SECONDS", 0.2)
    with filelock.FileLock(str(workdir / "out" / "ledger.jsonl.lock")):
        res = invoke(["owl", "--spec", "configs/owl.yaml"])
    assert res.exit_code == 5 and "could not lock the ledger" in res.stderr
    assert not (workdir / "out" / "owl").exists()


def test_tampered_output_fails_verify(workdir: Path) -> None:
    assert invoke(["owl", "--spec", "configs/owl.yaml", "--quiet"]).exit_code == 0
    rule = workdir / "out" / "owl" / "rule.json"
    rule.write_text(rule.read_text().replace('"theta": [', '"theta": [0.0, '))
    res = invoke(["audit", "verify", "--ledger", "out/ledger.jsonl", "--receipt",
                  "out/owl/receipt.json"])
    assert res.exit_code == 4 and "rule.json" in res.stderr


def test_version_schema_and_usage() -> None:
    assert invoke(["--version"]).stdout.strip() == f"dpcausal {__version__}"
    schema = json.loads(invoke(["schema", "owl"]).stdout)
    assert "owl" in schema["properties"]
    assert invoke(["schema", "nope"]).exit_code == 2
    assert invoke(["owl"]).exit_code == 2
    assert invoke(["owl", "--bogus"]).exit_code == 2
    assert invoke(["audit", "verify"]).exit_code == 2


def test_installed_console_script_subprocess(workdir: Path) -> None:
    env = {**os.environ, "CI": "true"}
    exe = shutil.which("dpcausal") or f"{sys.executable} -m dpcausal"
    proc = subprocess.run(f"{exe} owl --spec configs/owl.yaml --json", shell=True, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["command"] == "owl"
    proc = subprocess.run(f"{exe} owl --spec configs/missing.yaml", shell=True, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "spec file not found" in proc.stderr and proc.stdout == ""
