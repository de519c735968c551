"""cate with estimand: ate through the real CLI, on the shipped example (configs/cate_ate.yaml): the
dry run predicts the half-width, the guard refuses before reading any row, the release writes
ate.json / ate.csv in the interval convention, and the --json summary carries the same record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from cli_tests.helpers import invoke, read_json, write_yaml

SPEC = "configs/cate_ate.yaml"


def test_dry_run_release_and_json(workdir: Path) -> None:
    res = invoke(["cate", "--spec", SPEC, "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    head = [a for a in plan["accuracy"] if a["headline"]]
    assert len(head) == 1 and head[0]["quantity"] == "ate" and head[0]["bound"] is True
    assert {a["quantity"] for a in plan["accuracy"]} == {"ate", "ate_total", "ate_sampling_only"}
    text = invoke(["cate", "--spec", SPEC, "--dry-run"]).stdout
    assert "predicted accuracy" in text and "ate *" in text
    res = invoke(["cate", "--spec", SPEC, "--json"])
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.stdout)
    doc = read_json(workdir / "out" / "cate_ate" / "ate.json")
    summary = receipt["summary"]
    assert summary["ate"]["estimate"] == doc["estimate"]
    assert summary["alpha"] == doc["alpha"] == 0.05 and summary["n"] == doc["n"] == 1566
    for key in ("interval", "total_interval"):
        rec = doc[key]
        assert rec["lo"] <= doc["estimate"] <= rec["hi"] and rec["level"] == 0.95
    assert doc["interval"]["kind"] == "noise" and doc["total_interval"]["kind"] == "total"
    assert (doc["interval"]["hi"] - doc["interval"]["lo"]) / 2 <= head[0]["halfwidth"]
    assert [e["stage"] for e in doc["events"]] == [e["stage"] for e in receipt["events"]]
    table = pd.read_csv(workdir / "out" / "cate_ate" / "ate.csv")
    assert list(table["group"]) == ["all", "age_under_45", "age_45_plus"]
    assert {"ate_noise_lo", "ate_noise_hi", "ate_total_lo", "ate_total_hi",
            "ate_clamped"} <= set(table.columns)


def test_guard_refuses_before_reading_rows(workdir: Path) -> None:
    head = json.loads(invoke(["cate", "--spec", SPEC, "--dry-run", "--json"]).stdout)["accuracy"][0]
    data = workdir / "sample_data" / "ate_obs.csv"
    lines = data.read_text().splitlines()
    lines[3] = ",".join(["oops", *lines[3].split(",")[1:]])
    data.write_text("\n".join(lines) + "\n")
    broken = invoke(["cate", "--spec", SPEC])
    assert broken.exit_code == 2  # reading its rows fails

    doc: dict[str, Any] = yaml.safe_load((workdir / SPEC).read_text())
    doc["accuracy"] = {"max_halfwidth": head["halfwidth"] / 2}
    path = write_yaml(workdir / "limited.yaml", doc)
    for extra in ([], ["--dry-run"]):
        res = invoke(["cate", "--spec", path, *extra])
        assert res.exit_code == 3, res.output
        assert "accuracy.max_halfwidth" in res.stderr and "No row was read" in res.stderr
    assert not (workdir / "out" / "cate_ate").exists()
    eps = float(invoke(["cate", "--spec", path]).stderr.split("ε = ")[1].split(" would")[0])
    ok = invoke(["cate", "--spec", path, "--dry-run", "--json", "--epsilon", str(eps)])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["accuracy"][0]["halfwidth"] <= head["halfwidth"] / 2


def test_the_observational_example_releases_with_its_pooled_centre(workdir: Path) -> None:
    """configs/cate_ate_observational.yaml — the settings measured to cover on NHEFS-shaped data
    (benchmarks/RESULTS.md): the plan names the pooled centre's one Laplace event and the clip's
    caveat; the release says which models it used, and its receipt the same events."""
    spec = "configs/cate_ate_observational.yaml"
    plan = json.loads(invoke(["cate", "--spec", spec, "--dry-run", "--json"]).stdout)
    stages = [e["stage"] for e in plan["events"]]
    assert stages == ["cate.ate.nuisance.propensity", "cate.ate.nuisance.propensity.output",
                      "cate.ate.nuisance.outcome.sum", "cate.ate.estimate", "cate.ate.variance"]
    assert "pooled DP mean" in plan["details"]["note_residual_clip"]
    res = invoke(["cate", "--spec", spec, "--json"])
    assert res.exit_code == 0, res.output
    doc = read_json(workdir / "out" / "cate_ate_observational" / "ate.json")
    assert doc["residual_clip"] == 24.0
    assert doc["nuisance_models"]["outcome_model"] == "pooled"
    assert doc["nuisance_models"]["propensity_learner"] == "objective"
    theta = doc["nuisance_models"]["fits"][0]["outcome_theta"]
    assert theta[0] == theta[1]  # one centre for both arms
    assert doc["total_interval"]["lo"] <= doc["estimate"] <= doc["total_interval"]["hi"]
    assert [e["stage"] for e in json.loads(res.stdout)["events"]] == stages
