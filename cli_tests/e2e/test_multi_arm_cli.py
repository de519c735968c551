"""K ≥ 3 treatment arms through the real CLI (issue #20): select-policy's experimental K-arm
release on the 3-arm sample, and the precise refusals of the binary-only commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from cli_tests.helpers import invoke, read_json, write_yaml

SP_3ARM = "configs/select_policy_3arm.yaml"


def doc_of(path: str) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text())


def test_select_policy_3arm_example_releases_and_receipts_the_flag(workdir: Path) -> None:
    res = invoke(["select-policy", "--spec", SP_3ARM, "--json"])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "select_policy_3arm"
    sel, receipt = read_json(out / "selection.json"), read_json(out / "receipt.json")
    names = {p["name"]: p for p in doc_of("configs/policies_3arm.yaml")["policies"]}
    assert sel["selected"]["name"] in names
    assert sel["actions"]["arms"] == ["placebo", "low_dose", "high_dose"]
    assert sel["actions"]["experimental_multi_arm"] is True
    actions = receipt["assumptions"]["actions"]
    assert actions["experimental_multi_arm"] is True and actions["K"] == 3
    assert "not yet independently reviewed" in actions["status"]
    ev = receipt["events"][0]
    assert ev["params"]["K"] == 3
    assert receipt["guarantee"] == "pure"
    learners = sel["privacy"]["learners"]
    assert "multinomial" in learners["propensity"]["name"]
    text = (out / "selection.json").read_text().lower()
    for word in ("utilit", "probab", "theta\"", "rmse"):
        assert word not in text


def test_select_policy_3arm_dry_run_reads_no_row(workdir: Path) -> None:
    data = workdir / "sample_data" / "mixed_trial_3arm.csv"
    frame = pd.read_csv(data)
    frame.loc[3, "arm"] = "medium_dose"  # a value outside the declared arms: a dry run never sees it
    frame.to_csv(data, index=False)
    res = invoke(["select-policy", "--spec", SP_3ARM, "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    assert plan["assumptions"]["actions"]["arms"] == ["placebo", "low_dose", "high_dose"]
    # the run refuses the file with the data checks' message (every bad cell, no value echoed)
    res = invoke(["select-policy", "--spec", SP_3ARM])
    assert res.exit_code == 2
    assert "column 'arm' has 1 value(s) that are not one of the arms" in res.output
    assert "select_policy.arms" in res.output and "medium_dose" not in res.output
    assert not (workdir / "out" / "select_policy_3arm").exists()


def test_select_policy_3arm_needs_the_experimental_flag(workdir: Path) -> None:
    doc = doc_of(SP_3ARM)
    del doc["select_policy"]["experimental_multi_arm"]
    res = invoke(["select-policy", "--spec", str(write_yaml(workdir / "s.yaml", doc))])
    assert res.exit_code == 2
    assert "experimental_multi_arm: true" in res.output


@pytest.mark.parametrize(("command", "config", "section"), [
    ("owl", "configs/owl_mixed.yaml", "owl"),
    ("two-stage", "configs/two_stage.yaml", "two_stage"),
])
def test_binary_commands_refuse_declared_arms_before_reading(workdir: Path, command: str,
                                                             config: str, section: str) -> None:
    """owl and two-stage have no multi-arm method: ``arms`` in the spec is refused (exit 2) with
    the reason and the fix, before any row is read (cate's K-arm route:
    test_cate_multi_arm_cli.py)."""
    doc = doc_of(config)
    doc[section].pop("treated", None)
    doc[section].pop("control", None)
    doc[section]["arms"] = ["placebo", "low_dose", "high_dose"]
    res = invoke([command, "--spec", str(write_yaml(workdir / "s.yaml", doc)), "--dry-run"])
    assert res.exit_code == 2
    assert f"{section}.arms: {command} has no method for more than two treatment arms" in res.output
    assert f"{section}.treated and {section}.control" in res.output


def test_owl_on_a_three_arm_file_is_refused_by_the_data_checks(workdir: Path) -> None:
    """The binary owl run on the 3-arm file: the rows of the third arm are refused (exit 2) by the
    invalid-input pattern of every data check (column, count, first row; no value), with the fix
    of a binary command."""
    doc = doc_of("configs/owl_mixed.yaml")
    doc["data"]["path"] = "sample_data/mixed_trial_3arm.csv"
    doc["owl"].update({"treated": "high_dose", "control": "placebo"})
    doc["owl"].pop("apply_to", None)
    res = invoke(["owl", "--spec", str(write_yaml(workdir / "s.yaml", doc))])
    assert res.exit_code == 2
    assert ("column 'arm' has 2088 value(s) that are neither the treated value 'high_dose' nor "
            "the control value 'placebo'") in res.output
    assert "owl takes two arms only" in res.output and "low_dose" not in res.output


@pytest.mark.parametrize(("command", "config", "section", "table"), [
    ("select-policy", "configs/select_policy.yaml", "select_policy", "select_policy_obs.csv"),
    ("cate", "configs/cate.yaml", "cate", "cate_obs.csv"),
    ("owl", "configs/owl.yaml", "owl", "owl_trial.csv"),
    ("two-stage", "configs/two_stage.yaml", "two_stage", "two_stage_obs.csv"),
])
def test_text_treatment_labels_are_accepted_by_every_command(
        workdir: Path, command: str, config: str, section: str, table: str) -> None:
    """The same file with its arms written as text ('drug' / 'placebo'), declared in the spec:
    every command releases, and names the declared labels in its released document or its
    receipt."""
    data = workdir / "sample_data" / table
    frame = pd.read_csv(data)
    frame["A"] = frame["A"].map({1: "drug", 0: "placebo"})
    assert frame["A"].notna().all()
    frame.to_csv(workdir / "sample_data" / "text_arms.csv", index=False)
    doc = doc_of(config)
    doc["data"]["path"] = "sample_data/text_arms.csv"
    doc[section].update({"treated": "drug", "control": "placebo"})
    doc[section].pop("apply_to", None)
    res = invoke([command, "--spec", str(write_yaml(workdir / "s.yaml", doc)), "--out",
                  "out/text", "--quiet"])
    assert res.exit_code == 0, res.output
    released = "".join(p.read_text() for p in (workdir / "out" / "text").glob("*.json"))
    assert '"drug"' in released and '"placebo"' in released
