"""synth-control through the real CLI: outputs, --dry-run, --json, layouts, the ledger, exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.linear_model import Ridge

from cli_tests.helpers import invoke, read_json, releases, write_yaml
from dpcausal.commands.synth_control.method import METHOD
from dpcausal.pipeline import execute
from dpcausal.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]
CONFIG = "configs/synth_control.yaml"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the example spec and sample panels, in a temporary current directory."""
    (tmp_path / "sample_data").mkdir()
    for name in ("synth_control_panel.csv", "synth_control_wide.csv"):
        shutil.copy(REPO / "sample_data" / name, tmp_path / "sample_data" / name)
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    (tmp_path / "out").mkdir()  # as in a clone (out/.gitkeep): ledgers are never made in new dirs
    monkeypatch.chdir(tmp_path)
    return tmp_path


def dpsc_out(d: dict[str, Any]) -> None:
    """The example config turned into the paper's DPSC_out at ε = 20 with λ = T0 (its former
    settings)."""
    for key in ("k", "weights", "band", "releases", "shares"):
        d["synth_control"].pop(key, None)
    d["synth_control"].update({"method": "out", "lambda": "T0"})
    d["privacy"]["epsilon"] = 20.0


def write_spec(path: Path, mutate: Any = None, *, out: bool = False) -> Path:
    doc = yaml.safe_load((REPO / CONFIG).read_text())
    if out:
        dpsc_out(doc)
    if mutate:
        mutate(doc)
    return write_yaml(path, doc)


def test_example_config_releases_a_useful_capped_effect(workdir: Path) -> None:
    """The shipped example (method: capped) is useful: its 95% half-width for the average
    effect is below the true effect of the sample panel (−20 packs) and the estimate is near it."""
    res = invoke(["synth-control", "--spec", CONFIG])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "synth_control"
    effect = read_json(out / "effect.json")
    av = effect["average_post_effect"]
    half = (av["interval"]["hi"] - av["interval"]["lo"]) / 2
    assert half < 10.0 and av["interval"]["kind"] == "noise"
    assert abs(av["estimate"] - (-20.0)) < 3 * half + 3.0
    table = pd.read_csv(out / "counterfactual.csv")
    post = table[table.period == "post"]
    assert post.counterfactual.nunique() <= 3  # 3 block means
    assert {"counterfactual_noise_lo", "counterfactual_noise_hi", "counterfactual_clamped",
            "effect_noise_lo", "effect_noise_hi"} <= set(table.columns)
    receipt = read_json(out / "receipt.json")
    assert [e["stage"] for e in receipt["events"]] == ["synth_control.average_effect",
                                                       "synth_control.path"]
    assert receipt["epsilon"] == pytest.approx(10.0) and receipt["guarantee"] == "pure"
    assert "not released" in effect["chosen_donors"]
    assert invoke(["audit", "verify", "--ledger", "out/ledger.jsonl",
                   "--receipt", str(out / "receipt.json")]).exit_code == 0


def test_dpsc_out_releases_counterfactual_effect_plot_and_receipt(workdir: Path) -> None:
    res = invoke(["synth-control", "--spec", write_spec(workdir / "out.yaml", out=True)])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "synth_control"
    table = pd.read_csv(out / "counterfactual.csv")
    assert list(table.columns) == [
        "time", "period", "observed", "counterfactual", "counterfactual_noise_lo",
        "counterfactual_noise_hi", "counterfactual_clamped", "effect", "effect_noise_lo",
        "effect_noise_hi"]
    assert len(table) == 31 and (table.period == "post").sum() == 12
    assert table.loc[table.period == "pre", "counterfactual"].isna().all()
    post = table[table.period == "post"]
    np.testing.assert_allclose(post.effect, post.observed - post.counterfactual, atol=1e-9)
    assert post.counterfactual.between(0.0, 300.0).all()  # clamped to the bounds
    effect = read_json(out / "effect.json")
    av = effect["average_post_effect"]
    # DPSC_out at ε = 20 is mostly noise: its interval spans the whole range the effect can take
    assert av["interval"]["bound"] is True
    assert av["interval"]["hi"] - av["interval"]["lo"] == pytest.approx(300.0)
    assert effect["n_donors"] == 38 and effect["pre_periods"] == 19
    assert (out / "synth_control.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "weights.csv").exists()
    receipt = read_json(out / "receipt.json")
    assert receipt["command"] == "synth-control" and receipt["dp_guarantee"] is True
    assert receipt["guarantee"] == "pure" and receipt["epsilon"] == pytest.approx(20.0)
    assert receipt["neighbouring"]["relation"] == "replace-one donor"
    coef, post_ev = receipt["events"]
    assert coef["sensitivity"] == pytest.approx(2**0.5) and coef["noise_scale"] == pytest.approx(
        2**0.5 / 10)
    assert post_ev["kind"] == "laplace" and post_ev["noise_scale"] == pytest.approx(2 * 12 / 10)
    assert {o["path"] for o in receipt["outputs"]} == {
        "counterfactual.csv", "effect.json", "synth_control.png"}
    assert "average_post_effect" in res.stdout
    assert releases(workdir / "out" / "ledger.jsonl") == [receipt]


def test_json_output_and_cli_equals_library(workdir: Path) -> None:
    res = invoke(["synth-control", "--spec", CONFIG, "--json", "--out", "o1",
                  "--test-noise-seed", "3"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    receipt = read_json(workdir / "o1" / "receipt.json")
    assert {k: v for k, v in obj.items() if k not in ("output_paths", "summary")} == receipt
    assert receipt["dp_guarantee"] is False and receipt["rng"] == "chacha20/seeded-test"
    spec, sha = load_spec(Path(CONFIG), METHOD.spec_model)
    spec = spec.with_overrides(out=Path("o2"), ledger=Path("l2.jsonl"))
    lib = execute(METHOD, spec, sha, test_noise_seed=3)
    assert lib.summary == obj["summary"]
    assert (workdir / "o1" / "counterfactual.csv").read_bytes() == (
        workdir / "o2" / "counterfactual.csv").read_bytes()


def test_dry_run_reads_no_outcome_value_and_spends_nothing(workdir: Path) -> None:
    frame = pd.read_csv("sample_data/synth_control_panel.csv")
    frame["sales"] = "secret"
    frame.to_csv("sample_data/synth_control_panel.csv", index=False)
    res = invoke(["synth-control", "--spec", CONFIG, "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["dry_run"] is True and plan["n_rows"] == 39 * 31
    assert plan["details"]["n_donors"] == 38 and plan["details"]["pre_periods_T0"] == 19
    assert plan["details"]["donor_choice"] == "nearest" and plan["details"]["k"] == 6
    head = [a for a in plan["accuracy"] if a["headline"]]
    assert head[0]["quantity"] == "average_post_effect" and 0 < head[0]["halfwidth"] < 10
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger
    human = invoke(["synth-control", "--spec", CONFIG, "--dry-run"])
    assert human.exit_code == 0 and "dry run" in human.stdout
    res = invoke(["synth-control", "--spec", CONFIG])
    assert res.exit_code == 2 and "non-numeric" in res.stderr and "unit 'CA' at time 1970" in res.stderr
    assert not (workdir / "out" / "ledger.jsonl").exists()


def test_wide_layout_gives_the_same_release(workdir: Path) -> None:
    def wide(d: dict[str, Any]) -> None:
        d["data"] = {"path": "sample_data/synth_control_wide.csv", "columns": {"time": "year"}}
        d["synth_control"]["layout"] = "wide"

    spec = write_spec(workdir / "w.yaml", wide)
    a = invoke(["synth-control", "--spec", spec, "--out", "ow", "--test-noise-seed", "9", "-q"])
    b = invoke(["synth-control", "--spec", CONFIG, "--out", "ol", "--test-noise-seed", "9", "-q"])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert (workdir / "ow" / "counterfactual.csv").read_bytes() == (
        workdir / "ol" / "counterfactual.csv").read_bytes()


def test_huge_epsilon_matches_nonprivate_ridge_through_the_cli(workdir: Path) -> None:
    def huge(d: dict[str, Any]) -> None:
        d["privacy"]["epsilon"] = 1e13
        d["synth_control"]["release_weights"] = True
        d.pop("ledger")

    res = invoke(["synth-control", "--spec", write_spec(workdir / "h.yaml", huge, out=True),
                  "--out", "oh"])
    assert res.exit_code == 0, res.output
    wide = pd.read_csv("sample_data/synth_control_wide.csv")
    x = wide.drop(columns=["year", "CA"]).to_numpy().T.clip(0, 300) / 300
    y = wide["CA"].to_numpy().clip(0, 300) / 300
    f = Ridge(alpha=19 / 2, fit_intercept=False, solver="cholesky").fit(x[:, :19].T, y[:19]).coef_
    expected = x[:, 19:].T @ f * 300
    table = pd.read_csv(workdir / "oh" / "counterfactual.csv")
    np.testing.assert_allclose(table.loc[table.period == "post", "counterfactual"], expected,
                               atol=1e-8)
    weights = pd.read_csv(workdir / "oh" / "weights.csv")
    assert list(weights.unit) == list(wide.columns[2:])
    np.testing.assert_allclose(weights.weight, f, atol=1e-10)


def test_budget_is_enforced_across_runs(workdir: Path) -> None:
    spec = write_spec(workdir / "b.yaml", lambda d: d["ledger"]["budget"].update(epsilon=25.0))
    assert invoke(["synth-control", "--spec", spec, "-q"]).exit_code == 0
    assert invoke(["synth-control", "--spec", spec, "-q"]).exit_code == 0
    res = invoke(["synth-control", "--spec", spec])
    assert res.exit_code == 3 and "exceeded" in res.stderr
    assert len(releases(workdir / "out" / "ledger.jsonl")) == 2


def test_uncertified_objective_perturbation(workdir: Path) -> None:
    spec = write_spec(workdir / "o.yaml", lambda d: d["synth_control"].update(method="obj"),
                      out=True)
    res = invoke(["synth-control", "--spec", spec])
    assert res.exit_code == 3 and "allow_uncertified" in res.stderr
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger
    spec = write_spec(workdir / "o2.yaml", lambda d: d["synth_control"].update(
        method="obj", allow_uncertified=True), out=True)
    res = invoke(["synth-control", "--spec", spec, "--json"])
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.stdout)
    assert receipt["dp_guarantee"] is False and receipt["guarantee"] == "none"
    assert receipt["events"][0]["params"]["certified"] is False
    effect = read_json(workdir / "out" / "synth_control" / "effect.json")
    assert effect["privacy"]["dp_guarantee"] is False and "UNCERTIFIED" in effect["method"]


def bad_cell(path: str, unit: str, year: int, value: Any) -> None:
    frame = pd.read_csv(path)
    frame["sales"] = frame["sales"].astype(object)
    frame.loc[(frame.unit == unit) & (frame.year == year), "sales"] = value
    frame.to_csv(path, index=False)


@pytest.mark.parametrize(
    ("mutate", "code", "message"),
    [
        (lambda d: d["synth_control"].update(lambda_=3), 2, "synth_control.lambda_: unknown field"),
        (lambda d: d["synth_control"].update({"lambda": 0}), 2, "synth_control.lambda"),
        (lambda d: d["synth_control"].update(target="XX"), 2, "unit 'XX' is not in column 'unit'"),
        (lambda d: d["synth_control"].update(treatment_time=2050), 2, "treatment_time"),
        (lambda d: d["synth_control"].update(step2="l2"), 2, "synth_control.step2"),
        (lambda d: d["data"]["columns"].update(outcome="nope"), 2, "'nope'"),
        (lambda d: d["data"].update(path="missing.csv"), 2, "missing.csv: data file not found"),
        (lambda d: d["bounds"].pop("outcome"), 3, "bounds.outcome is missing"),
        (lambda d: d["bounds"].update(outcome=[5, -5]), 2, "lower bound must be < upper bound"),
        (lambda d: d["synth_control"].update(path_noise="gaussian"), 2,
         "path_noise: gaussian needs privacy.delta"),
        (lambda d: d["synth_control"].update(k=60), 2, "60 donors cannot be averaged"),
        (lambda d: d["synth_control"].update(sensitivity="paper"), 2,
         "synth_control.sensitivity is only used with method: out"),
        (lambda d: d["privacy"].update(epsilon=-1), 2, "privacy.epsilon"),
        (lambda d: d["privacy"].update(epsilon="lots"), 2, "privacy.epsilon"),
        (lambda d: d["synth_control"].update(treatment_time="1989"), 2, "holds numbers"),
        (lambda d: d["synth_control"].pop("target"), 2, "synth_control.target: required field"),
        (lambda d: d["data"]["columns"].pop("unit"), 2, "the long layout needs"),
        (lambda d: d["synth_control"].update(layout="wide"), 2, "the wide layout takes only"),
    ],
)
def test_bad_spec_exit_codes(workdir: Path, mutate: Any, code: int, message: str) -> None:
    res = invoke(["synth-control", "--spec", write_spec(workdir / "bad.yaml", mutate)])
    assert res.exit_code == code, res.output
    assert message in res.stderr
    assert not (workdir / "out" / "ledger.jsonl").exists()
    assert not (workdir / "out" / "synth_control").exists()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda p: bad_cell(p, "S07", 1995, None), "missing, NaN or infinite value(s): unit 'S07' at time 1995"),
    (lambda p: bad_cell(p, "S07", 1995, "abc"), "non-numeric value(s): unit 'S07' at time 1995"),
    (lambda p: pd.read_csv(p).query("not (unit == 'S12' and year == 1980)").to_csv(p, index=False),
     "missing panel cell(s): unit 'S12' at time 1980"),
])
def test_bad_data_exit_2_names_unit_and_time(workdir: Path, edit: Any, message: str) -> None:
    edit("sample_data/synth_control_panel.csv")
    res = invoke(["synth-control", "--spec", CONFIG])
    assert res.exit_code == 2, res.output
    assert message in res.stderr
    assert not (workdir / "out" / "ledger.jsonl").exists()


def test_empty_and_headerless_files_exit_2(workdir: Path) -> None:
    Path("sample_data/synth_control_panel.csv").write_text("unit,year,sales\n")
    res = invoke(["synth-control", "--spec", CONFIG])
    assert res.exit_code == 2 and "no rows" in res.stderr
    Path("sample_data/synth_control_panel.csv").write_text("")
    assert invoke(["synth-control", "--spec", CONFIG]).exit_code == 2


def test_unwritable_output_exits_5(workdir: Path) -> None:
    Path("blocker").write_text("a file, not a directory")
    res = invoke(["synth-control", "--spec", CONFIG, "--out", "blocker/sub"])
    assert res.exit_code == 5, res.output


def test_schema_command() -> None:
    res = invoke(["schema", "synth-control"])
    assert res.exit_code == 0
    schema = json.loads(res.stdout)
    assert "synth_control" in schema["properties"]


def test_receipt_holds_no_data_derived_numbers(workdir: Path) -> None:
    """T11: changing a donor's values changes only timestamps and output hashes in the receipt."""
    def strip(r: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in r.items() if k not in ("created_at", "outputs", "hash", "prev_hash")}

    spec = write_spec(workdir / "r.yaml", lambda d: d.pop("ledger"))
    assert invoke(["synth-control", "--spec", spec, "--out", "r1", "-q"]).exit_code == 0
    frame = pd.read_csv("sample_data/synth_control_panel.csv")
    frame.loc[frame.unit == "S03", "sales"] = 299.0
    frame.to_csv("sample_data/synth_control_panel.csv", index=False)
    assert invoke(["synth-control", "--spec", spec, "--out", "r2", "-q"]).exit_code == 0
    a, b = read_json(workdir / "r1" / "receipt.json"), read_json(workdir / "r2" / "receipt.json")
    assert strip(a) == strip(b)


def test_parquet_input_writes_parquet_table(workdir: Path) -> None:
    pd.read_csv("sample_data/synth_control_panel.csv").to_parquet("panel.parquet", index=False)
    spec = write_spec(workdir / "p.yaml", lambda d: d["data"].update(path="panel.parquet"))
    res = invoke(["synth-control", "--spec", spec, "--out", "op", "--test-noise-seed", "1", "-q"])
    assert res.exit_code == 0, res.output
    csv = pd.read_csv(workdir / "op" / "counterfactual.csv")
    pq = pd.read_parquet(workdir / "op" / "counterfactual.parquet")
    np.testing.assert_allclose(csv.counterfactual, pq.counterfactual, equal_nan=True)


def test_individual_unit_through_the_cli_says_what_it_protects(workdir: Path) -> None:
    def individual(d: dict[str, Any]) -> None:
        d["synth_control"].update(privacy_unit="individual", weights="private",
                                  individual={"contribution": 3650.0, "population": 400000})
        d["privacy"]["epsilon"] = 1.0

    res = invoke(["synth-control", "--spec", write_spec(workdir / "ind.yaml", individual)])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "synth_control"
    receipt = read_json(out / "receipt.json")
    assert "one person in a donor unit" in receipt["neighbouring"]["unit"]
    assert "not a whole donor" in receipt["neighbouring"]["weaker_than"]
    assert receipt["events"][0]["kind"] == "subset_exponential"
    effect = read_json(out / "effect.json")
    assert effect["privacy"]["privacy_unit"] == "individual"
    assert "weaker_than" in effect["privacy"] and len(effect["chosen_donors"]) == 6
    av = effect["average_post_effect"]
    assert av["interval"]["hi"] - av["interval"]["lo"] < 0.5  # packs, at ε = 1
    weights = pd.read_csv(out / "weights.csv")
    assert weights.weight.sum() == pytest.approx(1.0) and (weights.weight > 0).sum() == 6


def test_accuracy_guard_refuses_before_reading_any_value(workdir: Path) -> None:
    """Issue 16: a predicted half-width above accuracy.max_halfwidth refuses (exit 3) on the plan
    alone: the outcome column cannot even be parsed, and nothing is spent."""
    frame = pd.read_csv("sample_data/synth_control_panel.csv")
    frame["sales"] = "secret"
    frame.to_csv("sample_data/synth_control_panel.csv", index=False)
    spec = write_spec(workdir / "g.yaml", lambda d: d.update(accuracy={"max_halfwidth": 1.0}))
    res = invoke(["synth-control", "--spec", spec])
    assert res.exit_code == 3, res.output
    assert "epsilon" in res.stderr.lower() or "ε" in res.stderr
    assert not (workdir / "out" / "ledger.jsonl").exists()


def test_planner_names_the_epsilon_for_a_target_halfwidth(workdir: Path) -> None:
    res = invoke(["synth-control", "--spec", CONFIG, "--dry-run", "--json",
                  "--target-halfwidth", "2"])
    assert res.exit_code == 0, res.output
    target = json.loads(res.stdout)["target"]
    assert target["quantity"] == "average_post_effect"
    # the half-width falls like 1/ε: 4.79 at ε = 10, so ≈ 24 for 2 packs
    assert 23.0 < target["smallest_epsilon"] < 25.0
