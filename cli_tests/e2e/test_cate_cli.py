"""cate through the real CLI: success, PNG, --dry-run, --json, the ledger, and every exit code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from cli_tests.helpers import invoke, read_json, releases, write_yaml
from dpcausal.commands.cate import plan as cate_plan
from dpcausal.commands.cate.estimate import run
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.mechanisms import NoiseGuard

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example spec and sample data in a temporary current directory (plus a small subset)."""
    (tmp_path / "sample_data").mkdir()
    for name in ("cate_obs.csv", "cate_queries.csv"):
        shutil.copy(REPO / "sample_data" / name, tmp_path / "sample_data" / name)
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    (tmp_path / "out").mkdir()  # as in a clone (out/.gitkeep): ledgers are never made in new dirs
    pd.read_csv(REPO / "sample_data" / "cate_obs.csv").head(400).to_csv(tmp_path / "small.csv",
                                                                         index=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def spec_doc() -> dict[str, Any]:
    return yaml.safe_load((REPO / "configs" / "cate.yaml").read_text())


def write_spec(path: Path, mutate: Any = None, *, small: bool = True) -> Path:
    doc = spec_doc()
    if small:
        doc["data"]["path"] = "small.csv"
    if mutate:
        mutate(doc)
    return write_yaml(path, doc)


def test_example_config_releases_table_png_receipt_and_ledger(workdir: Path) -> None:
    res = invoke(["cate", "--spec", "configs/cate.yaml"])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "cate"
    table = pd.read_csv(out / "cate.csv")
    assert list(table.columns) == ["x0", "x1", "cate", "cate_noise_lo", "cate_noise_hi",
                                   "cate_clamped"] and len(table) == 101
    assert np.allclose(table["x1"], 0.5) and np.all(np.isfinite(table["cate"]))
    assert (out / "cate.png").read_bytes()[:4] == b"\x89PNG"
    receipt = read_json(out / "receipt.json")
    assert receipt["command"] == "cate" and receipt["guarantee"] == "approximate"
    assert receipt["dp_guarantee"] is True and receipt["rng"] == "chacha20/os-entropy"
    assert receipt["epsilon"] == 5.0 and receipt["delta"] == pytest.approx(1e-5)
    assert [e["kind"] for e in receipt["events"]] == ["gaussian", "gaussian", "gaussian_process"]
    assert receipt["neighbouring"]["relation"] == "replace-one"
    assert receipt["neighbouring"]["n_public"] is True
    assert {o["path"] for o in receipt["outputs"]} == {"cate.csv", "cate.png"}
    text = json.dumps(receipt)
    for leak in ("alpha", "gamma(T,D)\":", "residual"):
        assert leak not in text
    assert releases(workdir / "out" / "ledger.jsonl") == [receipt]
    assert receipt["ledger"]["spent_after"]["epsilon"] == 5.0  # parallel over the two halves
    verify = invoke(["audit", "verify", "--ledger", "out/ledger.jsonl", "--receipt",
                     str(out / "receipt.json")])
    assert verify.exit_code == 0, verify.output


def test_json_output_and_cli_equals_library(workdir: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d.pop("ledger")
        d["cate"]["split"] = {"kind": "seeded", "seed": 0}  # reproducible: compared across runs

    spec_path = write_spec(workdir / "s.yaml", mutate)
    res = invoke(["cate", "--spec", spec_path, "--json", "--out", "o2", "--test-noise-seed", "4"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    receipt = read_json(workdir / "o2" / "receipt.json")
    assert {k: v for k, v in obj.items() if k not in ("output_paths", "summary")} == receipt
    assert receipt["dp_guarantee"] is False and receipt["rng"] == "chacha20/seeded-test"
    spec = CateSpec.model_validate(yaml.safe_load(spec_path.read_text()))
    frame = pd.read_csv("small.csv")
    plan = cate_plan.plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    release = run(spec, frame, plan, {}, rng=np.random.default_rng(0),
                       noise=NoiseGuard(plan, test_seed=4))
    np.testing.assert_allclose(pd.read_csv("o2/cate.csv")["cate"], release.tables["cate"]["cate"],
                               rtol=1e-12)


def test_query_file_and_queries_mode(workdir: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["cate"].pop("grid")
        d["cate"]["queries"] = "sample_data/cate_queries.csv"
        d["cate"].update(mode="queries", loss="squared", search_points=256)
        d["privacy"]["epsilon"] = 1.0
        d.pop("ledger")

    res = invoke(["cate", "--spec", write_spec(workdir / "q.yaml", mutate), "--out", "oq"])
    assert res.exit_code == 0, res.output
    table = pd.read_csv("oq/cate.csv")
    # γ(T, D) is data-dependent under gamma_method: search, so no noise interval is printed
    assert list(table.columns) == ["id", "x0", "x1", "cate", "cate_clamped"] and len(table) == 50
    receipt = read_json(workdir / "oq" / "receipt.json")
    assert receipt["guarantee"] == "asymptotic" and not (workdir / "oq" / "cate.png").exists()


def test_dry_run_reads_no_rows_and_spends_nothing(workdir: Path) -> None:
    frame = pd.read_csv("small.csv")
    frame["Y"] = "secret"
    frame.to_csv("small.csv", index=False)
    res = invoke(["cate", "--spec", write_spec(workdir / "s.yaml"), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["dry_run"] is True and plan["n_rows"] == 400
    assert plan["details"]["noise_sd_per_point"] == plan["events"][2]["noise_scale"]
    assert plan["ledger"]["spent_after"]["epsilon"] == 5.0
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger
    human = invoke(["cate", "--spec", write_spec(workdir / "s.yaml"), "--dry-run"])
    assert human.exit_code == 0 and "privacy plan" in human.stdout
    res = invoke(["cate", "--spec", write_spec(workdir / "s.yaml")])
    assert res.exit_code == 2 and "column 'Y'" in res.stderr
    assert not (workdir / "out" / "ledger.jsonl").exists()


def test_budget_is_enforced_across_runs(workdir: Path) -> None:
    spec_path = write_spec(workdir / "s.yaml",
                           lambda d: d["ledger"]["budget"].update(epsilon=12.0))
    assert invoke(["cate", "--spec", spec_path, "--quiet"]).exit_code == 0
    assert invoke(["cate", "--spec", spec_path, "--quiet"]).exit_code == 0
    res = invoke(["cate", "--spec", spec_path])
    assert res.exit_code == 3 and "exceeded" in res.stderr
    assert len(releases(workdir / "out" / "ledger.jsonl")) == 2


@pytest.mark.parametrize(
    ("mutate", "code", "message"),
    [
        (lambda d: d["privacy"].update(delta=0.0), 2, "privacy.delta"),
        (lambda d: d["privacy"].update(delta=0.01), 2, "privacy.delta"),
        (lambda d: d["cate"].update(modee="x"), 2, "cate.modee: unknown field"),
        (lambda d: d["cate"].update(bandwidth=-1), 2, "cate.bandwidth"),
        (lambda d: d["data"]["columns"].update(outcome="nope"), 2, "'nope'"),
        (lambda d: d["bounds"].pop("outcome"), 3, "bounds.outcome is missing"),
        (lambda d: d["bounds"].update(covariates={"x0": [0, 1]}), 3, "x1"),
        (lambda d: d["cate"].update(bandwidth=5.0, sensitivity_formula="paper"), 3,
         "sensitivity_formula"),
        (lambda d: d["cate"].update(queries="small.csv"), 2, "exactly one of cate.queries"),
        (lambda d: (d["cate"].pop("grid"), d["cate"].update(queries="small.csv")), 2,
         "sensitive data file"),
        (lambda d: d["cate"]["grid"].update(vary=["x9"]), 2, "x9"),
    ],
)
def test_bad_input_matrix(workdir: Path, mutate: Any, code: int, message: str) -> None:
    res = invoke(["cate", "--spec", write_spec(workdir / "bad.yaml", mutate)])
    assert res.exit_code == code, res.output
    assert message in res.stderr
    assert "Traceback" not in res.output
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("x0,x1,A,Y\n", "no rows"),
        ("x0,x1,A,Y\n" + "0.1,0.2,1,\n" * 100, "missing, NaN or infinite"),
        ("x0,x1,A,Y\n" + "0.1,0.2,3,1.0\n" * 100, "neither the treated value 1 nor the control value 0"),
        ("x0,x1,A,Y\n" + "0.1,zz,1,1.0\n" * 100, "column 'x1' has 100 non-numeric"),
        ("x0,x1,A,Y\n" + "0.1,0.2,1,1.0\n" * 30, "needs >= 20 rows"),
    ],
)
def test_bad_data_matrix(workdir: Path, content: str, message: str) -> None:
    Path("bad.csv").write_text(content)
    spec_path = write_spec(workdir / "s.yaml", lambda d: d["privacy"].update(delta=1e-9))
    res = invoke(["cate", "--spec", spec_path, "--data", "bad.csv"])
    assert res.exit_code == 2, res.output
    assert "bad.csv" in res.stderr and message in res.stderr
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger


def test_parquet_input_and_schema(workdir: Path) -> None:
    pd.read_csv("small.csv").to_parquet("small.parquet")
    res = invoke(["cate", "--spec", write_spec(workdir / "s.yaml"), "--data", "small.parquet",
                  "--out", "op"])
    assert res.exit_code == 0, res.output
    assert (workdir / "op" / "cate.parquet").exists()
    schema = invoke(["schema", "cate"])
    assert schema.exit_code == 0 and "sensitivity_formula" in schema.stdout


def test_random_fourier_feature_variant_releases_the_function(workdir: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["cate"].update(features="rff", rff_dim=64)
        d.pop("ledger")

    res = invoke(["cate", "--spec", write_spec(workdir / "r.yaml", mutate), "--out", "or"])
    assert res.exit_code == 0, res.output
    doc = read_json(workdir / "or" / "cate_function.json")
    assert doc["m"] == 64 and len(doc["weights"]) == 128
    receipt = read_json(workdir / "or" / "receipt.json")
    assert {o["path"] for o in receipt["outputs"]} == {"cate.csv", "cate.png", "cate_function.json"}
