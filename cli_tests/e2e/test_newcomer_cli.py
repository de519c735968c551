"""Issue 12: what the command line shows a newcomer — ``--json`` on failure, a dry run over budget,
a rule applied with the wrong command, numbers written the way people write them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_tests.helpers import invoke, write_yaml
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.errors import SpecError
from dpcausal.spec.load import load_spec


def _owl_spec(repo_root: Path, tmp_path: Path, **changes: Any) -> Path:
    doc = yaml.safe_load((repo_root / "configs" / "owl.yaml").read_text())
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        node = doc
        for part in parents:
            node = node[part]
        node[key] = value
    return write_yaml(tmp_path / "owl.yaml", doc)


def _one_json_object(stdout: str) -> dict[str, Any]:
    obj = json.loads(stdout)  # fails on empty or on two objects
    assert isinstance(obj, dict)
    return obj


@pytest.fixture
def in_repo(repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(repo_root)
    return repo_root


def test_json_failure_of_a_spec_names_file_and_field(in_repo: Path, tmp_path: Path) -> None:
    spec = _owl_spec(in_repo, tmp_path, owl__gama=3.0)
    res = invoke(["owl", "--spec", spec, "--json"])
    assert res.exit_code == 2
    obj = _one_json_object(res.stdout)  # was: nothing on stdout
    assert obj["exit_code"] == 2 and obj["file"] == str(spec) and obj["field"] == "owl.gama"
    assert "unknown field" in obj["error"] and obj["error"] in res.stderr


def test_json_failure_of_data_names_file_and_column(in_repo: Path, tmp_path: Path) -> None:
    spec = _owl_spec(in_repo, tmp_path, data__columns__outcome="b")
    res = invoke(["owl", "--spec", spec, "--json", "--out", tmp_path / "o"])
    assert res.exit_code == 2
    obj = _one_json_object(res.stdout)
    assert obj["file"] == "sample_data/owl_trial.csv" and obj["column"] == "b"
    # the nearest names come first in the message (B for b), not the file's first 20 columns
    assert "'b' (nearest: 'B')" in obj["error"] and "nearest first: B," in obj["error"]


def test_json_failure_of_a_missing_file_and_of_usage(in_repo: Path, tmp_path: Path) -> None:
    res = invoke(["owl", "--spec", tmp_path / "nope.yaml", "--json"])
    assert res.exit_code == 2
    assert _one_json_object(res.stdout)["file"] == str(tmp_path / "nope.yaml")
    res = invoke(["owl", "--json"])
    assert res.exit_code == 2 and _one_json_object(res.stdout)["exit_code"] == 2


@pytest.mark.parametrize(("args", "field"), [
    (["owl", "--spec", "configs/owl.yaml", "--seed", "abc"], "--seed"),
    (["audit", "privacy", "--spec", "configs/owl.yaml", "--trials", "-3"], "--trials"),
    (["cate", "--spec", "configs/cate.yaml", "--no-such-option"], None),
])
def test_json_failure_of_a_usage_error(in_repo: Path, args: list[str], field: str | None) -> None:
    res = invoke([*args, "--json"])
    assert res.exit_code == 2
    obj = _one_json_object(res.stdout)
    assert obj["exit_code"] == 2 and obj["error"] and obj.get("field") == field
    assert "Usage:" in res.stderr  # the usual message stays on stderr


def test_json_failure_of_a_budget_refusal(in_repo: Path, tmp_path: Path) -> None:
    spec = _owl_spec(in_repo, tmp_path, privacy__epsilon=30.0)  # cap 20
    res = invoke(["owl", "--spec", spec, "--json", "--ledger", tmp_path / "l.jsonl",
                  "--out", tmp_path / "o"])
    assert res.exit_code == 3
    obj = _one_json_object(res.stdout)
    assert obj["exit_code"] == 3 and "exceeded" in obj["error"]
    assert "events" not in obj  # a release shows no plan; only a dry run does


def test_json_failure_of_audit_verify(tmp_path: Path) -> None:
    ledger = tmp_path / "l.jsonl"
    ledger.write_text('{"not": "a ledger line"}\n')
    res = invoke(["audit", "verify", "--ledger", ledger, "--json"])
    assert res.exit_code in (4, 5)
    obj = _one_json_object(res.stdout)
    assert obj["exit_code"] == res.exit_code and obj["error"]


def test_a_dry_run_over_budget_prints_the_plan_then_refuses(in_repo: Path,
                                                           tmp_path: Path) -> None:
    spec = _owl_spec(in_repo, tmp_path, privacy__epsilon=30.0)  # cap 20
    ledger = tmp_path / "l.jsonl"
    res = invoke(["owl", "--spec", spec, "--dry-run", "--ledger", ledger])
    assert res.exit_code == 3
    assert "privacy plan" in res.stdout and "owl.theta" in res.stdout  # was: no plan at all
    assert "after this run ε=30" in res.stdout and "exceeded" in res.stderr
    assert "dry run: no data row was read" not in res.stdout and not ledger.exists()
    res = invoke(["owl", "--spec", spec, "--dry-run", "--json", "--ledger", ledger])
    assert res.exit_code == 3
    obj = _one_json_object(res.stdout)
    assert obj["dry_run"] is True and obj["events"][0]["stage"] == "owl.theta"
    assert obj["exit_code"] == 3 and "exceeded" in obj["error"]
    assert obj["ledger"]["spent_after"]["epsilon"] == 30.0
    res = invoke(["owl", "--spec", spec, "--dry-run", "--quiet", "--ledger", ledger])
    assert res.exit_code == 3 and res.stdout == ""


def test_owl_apply_blames_a_two_stage_rule_file(in_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "ts"
    res = invoke(["two-stage", "--spec", in_repo / "configs" / "two_stage.yaml", "--out", out,
                  "--ledger", tmp_path / "l.jsonl", "--quiet"])
    assert res.exit_code == 0, res.output
    data = in_repo / "sample_data" / "owl_new_patients.csv"
    res = invoke(["owl", "--apply", out / "rule.json", "--data", data, "--out", tmp_path / "o"])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {out / 'rule.json'}: not a dpcausal owl rule")
    assert "dpcausal two-stage --apply" in res.stderr and str(data) not in res.stderr


@pytest.mark.parametrize(("text", "value"), [
    ("1e9", 1e9), ("1.0e9", 1e9), ("5e-7", 5e-7), ("2E+3", 2e3), ("+3e1", 30.0),
    ("1.0e-7", 1e-7), ("3", 3.0), ("0.5", 0.5), (".5e1", 5.0),
])
def test_yaml_scientific_numbers_are_numbers(tmp_path: Path, text: str, value: float) -> None:
    # YAML 1.1 reads 1e9, 1.0e9 and 5e-7 as text: they were refused as "not a valid number"
    spec = tmp_path / "s.yaml"
    spec.write_text(f"privacy: {{epsilon: 1.0, delta: 0.0}}\nowl: {{treated: 1, "
                    f"propensity: 0.5, gamma: {text}}}\n")
    loaded, _ = load_spec(spec, OwlSpec)
    assert loaded.owl.gamma == value


def test_negative_scientific_numbers_in_bounds(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("bounds: {outcome: [-3e1, 5e-7]}\nprivacy: {epsilon: 1e-1}\n"
                    "owl: {treated: 1, propensity: 0.5, gamma: 1}\n")
    loaded, _ = load_spec(spec, OwlSpec)
    assert loaded.bounds.outcome == (-30.0, 5e-7) and loaded.privacy.epsilon == 0.1


@pytest.mark.parametrize("text", ['"1e9"', "'5e-7'", "1e9x", "e9", "1e", "abc", "1_0e3"])
def test_strings_that_look_like_numbers_are_still_refused(tmp_path: Path, text: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(f"privacy: {{epsilon: 1.0}}\nowl: {{treated: 1, propensity: 0.5, "
                    f"gamma: {text}}}\n")
    with pytest.raises(SpecError, match=r"owl\.gamma"):
        load_spec(spec, OwlSpec)


def test_scientific_numbers_do_not_touch_other_yaml_users(tmp_path: Path) -> None:
    # the wider float rule lives in the spec loader only, not in yaml.SafeLoader
    assert yaml.safe_load("a: 1e9") == {"a": "1e9"}
