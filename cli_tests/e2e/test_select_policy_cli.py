"""select-policy through the real CLI: regimes, --dry-run, --json, the ledger, every exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from cli_tests.helpers import invoke, read_json, releases, write_yaml
from dpcausal.commands.select_policy import plan as sp_plan
from dpcausal.commands.select_policy.estimate import compute_utilities, run
from dpcausal.commands.select_policy.method import METHOD
from dpcausal.commands.select_policy.setup import build_setup
from dpcausal.commands.select_policy.spec import SelectPolicySpec
from dpcausal.mechanisms import NoiseGuard
from dpcausal.pipeline import execute

REPO = Path(__file__).resolve().parents[2]
CMD = "select-policy"
DATA = "sample_data/select_policy_obs.csv"


def spec_doc() -> dict[str, Any]:
    return yaml.safe_load((REPO / "configs" / "select_policy.yaml").read_text())


def write_spec(path: Path, mutate: Any = None) -> Path:
    doc = spec_doc()
    if mutate:
        mutate(doc)
    return write_yaml(path, doc)


def test_example_config_releases_selection_and_receipt(workdir: Path) -> None:
    res = invoke([CMD, "--spec", "configs/select_policy.yaml"])
    assert res.exit_code == 0, res.output
    out = workdir / "out" / "select_policy"
    sel, receipt = read_json(out / "selection.json"), read_json(out / "receipt.json")
    assert {o["path"] for o in receipt["outputs"]} == {"selection.json", "selection.png"}
    assert sel["selected"]["name"] in {p["name"] for p in yaml.safe_load(
        Path("configs/policies_example.yaml").read_text())["policies"]}
    assert sel["regime"] == "learned"
    assert len(sel["library"]["sha256"]) == 64
    cert = sel["privacy"]["certificate"]
    assert sel["privacy"]["sensitivity"] == cert["delta_cert"] == receipt["events"][0][
        "sensitivity"]
    assert cert["delta_cert"] == max(cert["floor_2Bpsi"], cert["n_rho_star"])
    # how sure the choice is (issue 16): the plan's headline, in outcome units
    acc = sel["accuracy"]
    assert acc["bound"] is True and acc["level"] == 0.95
    assert acc["value_gap"] == pytest.approx(
        2 * cert["delta_cert"] / 1.0 * np.log(9 * 0.95 / 0.05) / 1500, rel=1e-9)
    # never utilities, probabilities or nuisance fits
    text = (out / "selection.json").read_text().lower()
    for word in ("utilit", "probab", "theta\"", "rmse", "score\""):
        assert word not in text
    assert receipt["command"] == CMD
    assert receipt["guarantee"] == "pure"
    assert receipt["dp_guarantee"] is True
    ev = receipt["events"][0]
    assert ev["kind"] == "exponential"
    assert ev["params"]["regime"] == "learned"
    assert ev["params"]["library_sha256"] == sel["library"]["sha256"]
    assert receipt["neighbouring"]["relation"] == "replace-one"
    assert "D_tr" in receipt["neighbouring"]["protected"]
    assert releases(workdir / "out" / "ledger.jsonl") == [receipt]
    assert invoke(["audit", "verify", "--ledger", "out/ledger.jsonl",
                   "--receipt", str(out / "receipt.json")]).exit_code == 0


def test_json_output_is_the_receipt_and_equals_library(workdir: Path) -> None:
    # the default split is secret, but a --test-noise-seed run draws it from the seed too
    res = invoke([CMD, "--spec", "configs/select_policy.yaml", "--json", "--out", "o2",
                  "--test-noise-seed", "3"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    receipt = read_json(workdir / "o2" / "receipt.json")
    assert {k: v for k, v in obj.items() if k not in ("output_paths", "summary")} == receipt
    assert receipt["dp_guarantee"] is False
    assert receipt["rng"] == "chacha20/seeded-test"
    spec = SelectPolicySpec.model_validate(spec_doc()).with_overrides(out=Path("o3"))
    spec = spec.model_copy(update={"ledger": None})
    lib = execute(METHOD, spec, "x", test_noise_seed=3)
    assert read_json(workdir / "o3" / "selection.json") == read_json(
        workdir / "o2" / "selection.json")
    assert obj["summary"]["selected_policy"] == lib.summary["selected_policy"]


def test_huge_epsilon_selects_the_argmax_utility(workdir: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["privacy"]["epsilon"] = 1e9
        d.pop("ledger")
        d["select_policy"]["split"] = {"kind": "index"}  # the same blocks in every run

    spec_path = write_spec(workdir / "s.yaml", mutate)
    spec = SelectPolicySpec.model_validate(yaml.safe_load(spec_path.read_text()))
    frame = pd.read_csv(DATA)
    plan = sp_plan.plan(spec, len(frame), {"library": yaml.safe_load(
        Path("configs/policies_example.yaml").read_text())}, rng=np.random.default_rng(0))
    setup = build_setup(spec, len(frame), {"library": yaml.safe_load(
        Path("configs/policies_example.yaml").read_text())})
    u = compute_utilities(spec, setup, frame, {})
    for seed in (1, 2, 3):
        res = invoke([CMD, "--spec", spec_path, "--out", f"o{seed}", "--test-noise-seed",
                      str(seed)])
        assert res.exit_code == 0, res.output
        assert read_json(workdir / f"o{seed}" / "selection.json")["selected"]["index"] == int(
            np.argmax(u))
    assert plan.details["M"] == 10


def test_dry_run_reads_no_rows_and_prints_delta(workdir: Path) -> None:
    frame = pd.read_csv(DATA)
    frame["Y"] = "secret"
    frame.to_csv(DATA, index=False)
    res = invoke([CMD, "--spec", "configs/select_policy.yaml", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["dry_run"] is True
    assert plan["n_rows"] == 3000
    det = plan["details"]
    assert det["delta_cert"] == max(det["floor_2Bpsi"], det["n_rho_star"])
    assert det["penalty_rule"]["lambda_mu"] == det["nuisance_penalties"]["lambda_mu"]
    (gap,) = plan["accuracy"]
    assert gap["quantity"] == "value_gap" and gap["headline"] and gap["bound"]
    assert det["regret_privacy_term"] == pytest.approx(
        2 * det["delta_cert"] * (np.log(10) + np.log(20)) / 1500, rel=1e-9)
    assert len(det["library_sha256"]) == 64
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger
    human = invoke([CMD, "--spec", "configs/select_policy.yaml", "--dry-run"])
    assert human.exit_code == 0
    assert "delta_cert" in human.stdout
    assert "regret_privacy_term" in human.stdout
    res = invoke([CMD, "--spec", "configs/select_policy.yaml"])
    assert res.exit_code == 2
    assert "column 'Y'" in res.stderr
    assert not (workdir / "out" / "ledger.jsonl").exists()


def test_frozen_regime_protects_scoring_rows_only(workdir: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["select_policy"].update(regime="frozen",
                                  frozen_model="sample_data/select_policy_nuisance.json")

    res = invoke([CMD, "--spec", write_spec(workdir / "f.yaml", mutate), "--json"])
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.stdout)
    assert "NOT protected" in receipt["neighbouring"]["protected"]
    assert receipt["events"][0]["sensitivity"] == 22.0
    assert receipt["assumptions"]["frozen_model"] == "sample_data/select_policy_nuisance.json"
    sel = read_json(workdir / "out" / "select_policy" / "selection.json")
    assert sel["regime"] == "frozen"
    assert sel["privacy"]["n"] == 3000


def test_fixed_regime_and_value_release_and_paper160(workdir: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["select_policy"].update(
            regime="fixed", library={"generator": "paper160", "seed": 7},
            fixed_scores={"treated": "dr_treated", "control": "dr_control", "bound": 11.0},
            value_release={"epsilon": 0.5})

    res = invoke([CMD, "--spec", write_spec(workdir / "x.yaml", mutate), "--json"])
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.stdout)
    assert [e["kind"] for e in receipt["events"]] == ["exponential", "laplace"]
    assert receipt["epsilon"] == pytest.approx(1.5)
    assert receipt["events"][0]["sensitivity"] == 22.0
    assert receipt["events"][1]["sensitivity"] == pytest.approx(22.0 / 3000)
    assert receipt["ledger"]["spent_after"]["epsilon"] == pytest.approx(1.5)
    sel = read_json(workdir / "out" / "select_policy" / "selection.json")
    assert sel["library"]["size"] == 160
    assert sel["library"]["generator"] == "paper160"
    value = sel["value_release"]
    assert np.isfinite(value["estimate"])
    # its (1 − α) noise interval (issue 16): exact Laplace (scores have no bounds to clamp to)
    half = value["laplace_scale"] * np.log(20)
    assert value["interval"]["kind"] == "noise" and value["interval"]["bound"] is False
    assert value["interval"]["lo"] == pytest.approx(value["estimate"] - half, rel=1e-9)
    assert value["interval"]["hi"] == pytest.approx(value["estimate"] + half, rel=1e-9)
    assert "user-asserted" in receipt["neighbouring"]["protected"]


def test_seeded_split_and_trivial_certificate(workdir: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["select_policy"].update(split={"kind": "seeded", "seed": 11}, certificate="trivial",
                                  lambda_mu=50.0, lambda_e=50.0, effective_bounds=False)

    res = invoke([CMD, "--spec", write_spec(workdir / "p.yaml", mutate), "--json"])
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.stdout)
    assert receipt["events"][0]["sensitivity"] == pytest.approx(1500 * 22.0)  # n·2B_ψ
    assert receipt["assumptions"]["split"]["seed"] == 11
    # a positional split states what it assumes about the row order, in the receipt
    assert "independent of the data" in receipt["assumptions"]["split"]["assumption"]
    assert "assumed independent" in receipt["neighbouring"]["row_order"]
    default = invoke([CMD, "--spec", write_spec(workdir / "r.yaml"), "--json", "--dry-run"])
    plan = json.loads(default.stdout)
    assert plan["assumptions"]["split"]["kind"] == "random"
    assert "multisets" in plan["neighbouring"]["row_order"]


def test_output_minimality_between_neighbours(workdir: Path) -> None:
    """Spec §9.16: with a fixed test RNG, outputs for D and D′ differ only in the selection."""
    frame = pd.read_csv(DATA)
    frame.loc[5, ["Y", "A"]] = [1.0, 1 - frame.loc[5, "A"]]
    frame.to_csv("neighbour.csv", index=False)
    docs = []
    for data, out in ((DATA, "oa"), ("neighbour.csv", "ob")):
        res = invoke([CMD, "--spec", "configs/select_policy.yaml", "--data", data, "--out", out,
                      "--test-noise-seed", "9", "--ledger", f"{out}.jsonl"])
        assert res.exit_code == 0, res.output
        docs.append(read_json(workdir / out / "selection.json"))
    docs[0].pop("selected")
    docs[1].pop("selected")
    assert docs[0] == docs[1]


def test_budget_is_enforced(workdir: Path) -> None:
    spec_path = write_spec(workdir / "s.yaml", lambda d: d["ledger"]["budget"].update(epsilon=2.0))
    assert invoke([CMD, "--spec", spec_path, "--quiet"]).exit_code == 0
    assert invoke([CMD, "--spec", spec_path, "--quiet"]).exit_code == 0
    res = invoke([CMD, "--spec", spec_path])
    assert res.exit_code == 3
    assert "budget" in res.stderr
    assert invoke([CMD, "--spec", spec_path, "--dry-run"]).exit_code == 3


@pytest.mark.parametrize(
    ("mutate", "code", "message"),
    [
        (lambda d: d["select_policy"].update(zeta=0.7), 2, "select_policy.zeta"),
        (lambda d: d["select_policy"].update(lamda_mu=3), 2, "lamda_mu: unknown field"),
        (lambda d: d["data"]["columns"].update(outcome="nope"), 2, "'nope'"),
        (lambda d: d["select_policy"].update(library={"path": "none.yaml"}), 2,
         "none.yaml: policy library file not found"),
        (lambda d: d["select_policy"].update(regime="frozen"), 2, "frozen_model is required"),
        (lambda d: d["bounds"].pop("outcome"), 3, "bounds.outcome is missing"),
        (lambda d: d["bounds"].update(covariates={"x1": [-3, 3]}), 3, "x2, x3"),
        (lambda d: d["privacy"].update(delta=1e-6), 2, "pure"),
        (lambda d: d["select_policy"].update(train_fraction=1.5), 2, "train_fraction"),
    ],
)
def test_bad_input_matrix(workdir: Path, mutate: Any, code: int, message: str) -> None:
    res = invoke([CMD, "--spec", write_spec(workdir / "bad.yaml", mutate)])
    assert res.exit_code == code, res.output
    assert message in res.stderr
    assert "Traceback" not in res.output
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger


def test_bad_library_and_model_files(workdir: Path) -> None:
    Path("lib.yaml").write_text("policies:\n  - {name: a, type: threshold, covariate: age, "
                                "op: '>=', threshold: 1}\n")
    res = invoke([CMD, "--spec", write_spec(workdir / "b.yaml", lambda d: d["select_policy"].update(
        library={"path": "lib.yaml"}))])
    assert res.exit_code == 2
    assert "lib.yaml" in res.stderr
    assert "'age'" in res.stderr
    Path("lib2.yaml").write_text("policies: [\n")
    res = invoke([CMD, "--spec", write_spec(workdir / "c.yaml", lambda d: d["select_policy"].update(
        library={"path": "lib2.yaml"}))])
    assert res.exit_code == 2
    assert "not valid YAML" in res.stderr
    Path("m.json").write_text(json.dumps({"format": "dpcausal.nuisance/v1", "covariates": ["x1"]}))
    res = invoke([CMD, "--spec", write_spec(workdir / "d.yaml", lambda d: d["select_policy"].update(
        regime="frozen", frozen_model="m.json"))])
    assert res.exit_code == 2
    assert "m.json: not a valid nuisance model file" in res.stderr
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0.1,0.2,0.3,1,", "missing, NaN or infinite"),
        ("0.1,,0.3,0,0.5", "missing, NaN or infinite"),
        ("0.1,0.2,0.3,7,0.5", "neither the treated value"),
        ("0.1,zz,0.3,1,0.5", "column 'x2' has 1 non-numeric"),
    ],
)
def test_bad_data_matrix(workdir: Path, row: str, message: str) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["data"]["columns"]["covariates"] = ["x1", "x2", "x3"]
        d["select_policy"]["library"] = {"generator": "paper160", "seed": 1}

    header = "x1,x2,x3,A,Y\n"
    good = "0.1,0.2,0.3,1,0.5\n0.2,0.1,0.0,0,0.4\n"
    Path("bad.csv").write_text(header + good + row + "\n")
    res = invoke([CMD, "--spec", write_spec(workdir / "s.yaml", mutate), "--data", "bad.csv"])
    assert res.exit_code == 2, res.output
    assert "bad.csv" in res.stderr
    assert message in res.stderr
    assert not any((workdir / "out").iterdir())  # nothing written, no ledger


def test_out_of_range_values_are_clipped_not_refused(workdir: Path) -> None:
    frame = pd.read_csv(DATA)
    frame.loc[0, "Y"] = 50.0
    frame.loc[1, "x3"] = -1e6
    frame.to_parquet("wild.parquet")
    res = invoke([CMD, "--spec", "configs/select_policy.yaml", "--data", "wild.parquet",
                  "--out", "ow"])
    assert res.exit_code == 0, res.output
    assert (workdir / "ow" / "selection.json").exists()


def test_schema_and_usage() -> None:
    schema = json.loads(invoke(["schema", CMD]).stdout)
    assert "select_policy" in schema["properties"]
    assert invoke([CMD]).exit_code == 2
    assert invoke([CMD, "--bogus"]).exit_code == 2


def test_library_call_matches_noise_generator_contract() -> None:
    # the run draws from the mechanisms' generator only: same test seed, same choice
    spec = SelectPolicySpec.model_validate({**spec_doc(), "ledger": None})
    frame = pd.read_csv(REPO / DATA)
    side = {"library": yaml.safe_load((REPO / "configs" / "policies_example.yaml").read_text())}
    plan = sp_plan.plan(spec, len(frame), side, rng=np.random.default_rng(0))
    picks = [run(spec, frame, plan, side, rng=np.random.default_rng(0),
                    noise=NoiseGuard(plan, test_seed=4)).documents["selection.json"]["selected"]["index"]
             for _ in range(2)]
    assert picks[0] == picks[1]


def test_unwritable_output_exits_5_and_spends_nothing(workdir: Path) -> None:
    Path("blocker").write_text("a file, not a directory")
    res = invoke([CMD, "--spec", "configs/select_policy.yaml", "--out", "blocker/sub",
                  "--seed", "3"])
    assert res.exit_code == 5, res.output
    assert not (workdir / "out" / "ledger.jsonl").exists()
