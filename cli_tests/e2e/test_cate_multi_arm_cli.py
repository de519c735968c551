"""cate with K = 3 arms through the real CLI (issue #20): the shipped example on the mixed-type
3-arm sample, the dry run's per-contrast plan, the receipt, and refusals before any noise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from cli_tests.helpers import invoke, read_json, write_yaml
from dpcausal.mechanisms import NoiseGuard

CONFIG = "configs/cate_3arm.yaml"


def doc_of(path: str) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text())


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stages of every privacy draw the run makes (recorded, then drawn as usual)."""
    seen: list[str] = []
    original = NoiseGuard._draw

    def spy(self: NoiseGuard, draw: Any) -> Any:
        seen.append(draw.stage)
        return original(self, draw)

    monkeypatch.setattr(NoiseGuard, "_draw", spy)
    return seen


def test_example_releases_each_contrast_with_one_joint_draw(workdir: Path,
                                                            draws: list[str]) -> None:
    res = invoke(["cate", "--spec", CONFIG, "--json"])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "cate_3arm"
    table = pd.read_csv(out / "cate.csv")
    assert list(table.columns[:2]) == ["arm", "control"]
    assert list(table["arm"].unique()) == ["low_dose", "high_dose"]
    assert set(table["control"]) == {"placebo"} and len(table) == 2 * 41
    assert (out / "cate_1.png").exists() and (out / "cate_2.png").exists()
    doc = read_json(out / "cate_function.json")
    assert [c["arm"] for c in doc["contrasts"]] == ["low_dose", "high_dose"]
    receipt = read_json(out / "receipt.json")
    fn = next(e for e in receipt["events"] if e["stage"] == "cate.second_stage.function")
    assert fn["params"]["paths"] == 2 and fn["epsilon"] == 5.0
    assert [c["arm"] for c in fn["params"]["contrasts"]] == ["low_dose", "high_dose"]
    assert fn["params"]["sigma_if_split_per_contrast"] > fn["noise_scale"]
    assert receipt["assumptions"]["treatment_values"] == {
        "arms": ["placebo", "low_dose", "high_dose"], "control": "placebo"}
    assert "placebo" in receipt["assumptions"]["estimand"]
    # one draw per planned stage: the two contrasts share ONE (joint) second-stage draw
    assert sorted(draws) == sorted(e["stage"] for e in receipt["events"])


def test_dry_run_lists_each_contrast_and_the_rejected_split(workdir: Path) -> None:
    res = invoke(["cate", "--spec", CONFIG, "--dry-run"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "contrast 1: arm 'low_dose' vs control 'placebo'" in text
    assert "contrast 2: arm 'high_dose' vs control 'placebo'" in text
    assert "2 independent paths at sensitivity sqrt(2)·Δ_H" in text
    plan = json.loads(invoke(["cate", "--spec", CONFIG, "--dry-run", "--json"]).output)
    fn = next(e for e in plan["events"] if e["stage"] == "cate.second_stage.function")
    assert fn["params"]["paths"] == 2
    assert not (workdir / "out" / "cate_3arm").exists()


@pytest.mark.parametrize(("column", "value", "words"), [
    ("arm", "medium_dose", "column 'arm' has 1 value(s) that are not one of the arms"),
    ("region", "atlantis", "region"),
])
def test_an_undeclared_level_fails_before_any_noise(workdir: Path, draws: list[str], column: str,
                                                     value: str, words: str) -> None:
    """A treatment value outside cate.arms (or a covariate level outside its declared levels when
    unseen levels are errors) refuses the run (exit 2) before any privacy draw, naming the column
    but never the value; nothing is written or charged."""
    doc = doc_of(CONFIG)
    doc["preprocess"]["covariates"]["region"]["unseen"] = "error"
    del doc["cate"]["grid"]["fixed"]["region=(other)"]  # no such column without unseen: other
    data = workdir / "sample_data" / "mixed_trial_3arm.csv"
    frame = pd.read_csv(data)
    frame.loc[7, column] = value
    frame.to_csv(data, index=False)
    res = invoke(["cate", "--spec", str(write_yaml(workdir / "s.yaml", doc))])
    assert res.exit_code == 2, res.output
    assert words in res.output and value not in res.output
    assert draws == []
    assert not (workdir / "out" / "cate_3arm").exists()
    assert not (workdir / "out" / "ledger.jsonl").exists()


@pytest.mark.parametrize(("change", "words"), [
    ({"control": None}, "cate.control: with cate.arms, name the control arm"),
    ({"control": "low"}, "cate.control must be one of cate.arms"),
    ({"estimand": "ate"}, "estimand ate with K ≥ 3 arms is not implemented yet"),
    ({"arms": ["placebo", "high_dose"]}, "cate.arms must list at least three arms"),
])
def test_spec_mistakes_are_refused_before_reading(workdir: Path, change: dict[str, Any],
                                                  words: str) -> None:
    doc = doc_of(CONFIG)
    for key, value in change.items():
        if value is None:
            doc["cate"].pop(key)
        else:
            doc["cate"][key] = value
    if change.get("estimand") == "ate":
        for key in ("grid", "features", "huber_c", "bandwidth", "ridge"):
            doc["cate"].pop(key)
    res = invoke(["cate", "--spec", str(write_yaml(workdir / "s.yaml", doc)), "--dry-run"])
    assert res.exit_code == 2
    assert words in res.output


def test_a_two_arm_spec_on_the_three_arm_file_points_to_cate_arms(workdir: Path) -> None:
    """The binary cate on the 3-arm file: the third arm's rows are refused (exit 2, no value
    echoed) with the fix — recode, or declare every arm in cate.arms."""
    doc = doc_of(CONFIG)
    for key in ("arms", "control"):
        doc["cate"].pop(key)
    doc["cate"].update({"treated": "high_dose", "control": "placebo"})
    res = invoke(["cate", "--spec", str(write_yaml(workdir / "s.yaml", doc))])
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "neither the treated value 'high_dose' nor the control value 'placebo'" in text
    assert "or list every arm the file uses in cate.arms" in text and "low_dose" not in text
