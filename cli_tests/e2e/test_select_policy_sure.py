"""Issue 16 for select-policy through the CLI: the dry run predicts the value gap (and the value's
half-width), the release prints what the dry run predicted, the guard refuses before reading any
row, and --target-halfwidth names an ε that meets the target."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from cli_tests.helpers import invoke, read_json, write_yaml


def spec(workdir: Path, mutate: Any) -> Path:
    doc = yaml.safe_load((workdir / "configs" / "select_policy.yaml").read_text())
    mutate(doc)
    return write_yaml(workdir / "sp_test.yaml", doc)


def test_dry_run_predicts_what_the_release_prints(workdir: Path) -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["select_policy"]["value_release"] = {"epsilon": 0.5}

    path = spec(workdir, mutate)
    dry = invoke(["select-policy", "--spec", path, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)
    gap, value = plan["accuracy"]
    assert (gap["quantity"], gap["headline"], gap["bound"]) == ("value_gap", True, True)
    assert (value["quantity"], value["headline"], value["bound"]) == ("value", False, False)
    text = invoke(["select-policy", "--spec", path, "--dry-run"]).stdout
    assert "predicted accuracy" in text and "value_gap *" in text
    res = invoke(["select-policy", "--spec", path, "--json"])
    assert res.exit_code == 0, res.output
    sel = read_json(workdir / "out" / "select_policy" / "selection.json")
    assert sel["accuracy"]["value_gap"] == gap["halfwidth"]
    iv = sel["value_release"]["interval"]
    raw = sel["value_release"].get("clamped", {}).get("unclamped", sel["value_release"]["estimate"])
    assert iv["hi"] == min(1.0, raw + value["halfwidth"])  # Y in [0, 1]: clamped to it
    summary = json.loads(res.stdout)["summary"]
    assert summary["value_gap"] == gap["halfwidth"]
    assert summary["released_value"]["interval"] == iv


def test_guard_refuses_before_reading_rows_and_the_planner_names_an_epsilon(workdir: Path
                                                                            ) -> None:
    dry = invoke(["select-policy", "--spec", "configs/select_policy.yaml", "--dry-run", "--json"])
    gap = json.loads(dry.stdout)["accuracy"][0]["halfwidth"]
    data = workdir / "sample_data" / "select_policy_obs.csv"
    lines = data.read_text().splitlines()
    lines[3] = ",".join(["oops", *lines[3].split(",")[1:]])
    data.write_text("\n".join(lines) + "\n")
    assert invoke(["select-policy", "--spec", "configs/select_policy.yaml"]).exit_code == 2

    def mutate(doc: dict[str, Any]) -> None:
        doc["accuracy"] = {"max_halfwidth": gap / 2}

    path = spec(workdir, mutate)
    for extra in ([], ["--dry-run"], ["--json"]):
        res = invoke(["select-policy", "--spec", path, *extra])
        assert res.exit_code == 3, res.output
        assert "accuracy.max_halfwidth" in res.stderr and "No row was read" in res.stderr
    assert not (workdir / "out" / "select_policy").exists()
    target = invoke(["select-policy", "--spec", "configs/select_policy.yaml", "--dry-run",
                     "--json", "--target-halfwidth", str(gap / 2)])
    assert target.exit_code == 0, target.output
    eps = json.loads(target.stdout)["target"]["smallest_epsilon"]
    assert eps is not None and eps > 1.0
    ok = invoke(["select-policy", "--spec", "configs/select_policy.yaml", "--dry-run", "--json",
                 "--epsilon", str(eps)])
    assert json.loads(ok.stdout)["accuracy"][0]["halfwidth"] <= gap / 2


def test_selection_png_is_written_listed_in_the_receipt_and_optional(workdir: Path) -> None:
    """Issue 16: selection.png is a staged output like every other (listed with its hash in the
    receipt); ``plot: false`` writes none."""
    def with_value(doc: dict[str, Any]) -> None:
        doc["select_policy"]["value_release"] = {"epsilon": 0.5}

    out = workdir / "out" / "select_policy"
    res = invoke(["select-policy", "--spec", spec(workdir, with_value), "--test-noise-seed", "3"])
    assert res.exit_code == 0, res.output
    png = (out / "selection.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    outputs = {o["path"]: o["sha256"] for o in read_json(out / "receipt.json")["outputs"]}
    assert outputs["selection.png"] == hashlib.sha256(png).hexdigest()

    def no_plot(doc: dict[str, Any]) -> None:
        doc["select_policy"]["plot"] = False
        doc["output"]["dir"] = "out/select_policy_noplot"

    res = invoke(["select-policy", "--spec", spec(workdir, no_plot), "--test-noise-seed", "3"])
    assert res.exit_code == 0, res.output
    quiet = workdir / "out" / "select_policy_noplot"
    assert sorted(p.name for p in quiet.iterdir()) == ["receipt.json", "selection.json"]
    assert "selection.png" not in json.dumps(read_json(quiet / "receipt.json")["outputs"])
