"""Issue 21: the Python API and the command line are one program (STYLE rule 6).

Every command released through :func:`dpcausal.release` with a DataFrame gives the receipt the
CLI gives on the file, byte for byte (same spec, seeded test noise, the clock pinned); the dry run
gives the same plan; and the API refuses exactly what the CLI refuses, with the same exit code
and message (the data's name apart: a file's path, or ``<DataFrame>``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.csv as pacsv
import pytest
import yaml

import dpcausal as dpc
from cli_tests.helpers import invoke, read_json, write_yaml
from dpcausal.io.writers import json_bytes

REPO = Path(__file__).resolve().parents[2]
CLOCK = "2026-01-02T03:04:05+00:00"
COMMANDS = ["owl", "select-policy", "synth-control", "cate", "two-stage"]
SEEDED_SPLIT = {"select-policy": "select_policy", "cate": "cate"}
"""Commands whose default row split is a secret random permutation: seeded here, so that two runs
can be compared."""


def reproducible_spec(command: str, tmp: Path) -> Path:
    """The example spec of ``command`` without its ledger (a ledger's key and id are per
    ledger), with a seeded split where the default is secret; written into ``tmp``."""
    section = command.replace("-", "_")
    doc = yaml.safe_load((REPO / "configs" / f"{section}.yaml").read_text())
    doc.pop("ledger", None)
    if command in SEEDED_SPLIT:
        doc[section]["split"] = {"kind": "seeded", "seed": 11}
    return write_yaml(tmp / f"{section}.yaml", doc)


def frame_of(spec: Any) -> pd.DataFrame:
    """The spec's data file as a DataFrame, read the way any user would."""
    return pacsv.read_csv(spec.data.path).to_pandas()


@pytest.fixture
def pinned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run starts at the same second (a receipt's created_at)."""
    monkeypatch.setattr("dpcausal.pipeline.now_iso", lambda: CLOCK)


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the example specs' relative paths


@pytest.mark.usefixtures("pinned_clock", "in_repo")
@pytest.mark.parametrize("command", COMMANDS)
def test_api_with_a_dataframe_gives_the_cli_receipt_byte_for_byte(command: str,
                                                                  tmp_path: Path) -> None:
    spec_path = reproducible_spec(command, tmp_path)
    res = invoke([command, "--spec", spec_path, "--out", tmp_path / "cli", "--seed", "3",
                  "--test-noise-seed", "7", "--json"])
    assert res.exit_code == 0, res.stderr
    cli_receipt = (tmp_path / "cli" / "receipt.json").read_bytes()

    spec = dpc.load_spec(spec_path)
    release = dpc.release(spec, frame_of(spec), seed=3, test_noise_seed=7)
    assert json_bytes(release.receipt) == cli_receipt
    assert not release.dp_guarantee  # seeded noise: the receipt says so
    assert release.paths == ()  # in memory until saved
    # the --json object is the receipt, the paths and the summary
    assert release.to_dict()["summary"] == json.loads(res.stdout)["summary"]
    # saved, it is the CLI's release file for file
    written = release.save(tmp_path / "api")
    assert written[-1].name == "receipt.json"
    for path in (tmp_path / "cli").iterdir():
        assert (tmp_path / "api" / path.name).read_bytes() == path.read_bytes(), path.name
    # the outputs are there as Python objects, equal to the files
    for stem, table in release.tables.items():
        assert table.to_csv(index=False) is not None
        assert f"{stem}.csv" in release.files
    for name, doc in release.documents.items():
        assert read_json(tmp_path / "cli" / name) == json.loads(json.dumps(doc))


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize("command", COMMANDS)
def test_api_dry_run_with_a_dataframe_is_the_cli_plan(command: str, tmp_path: Path) -> None:
    spec_path = reproducible_spec(command, tmp_path)
    res = invoke([command, "--spec", spec_path, "--dry-run", "--json", "--seed", "3"])
    assert res.exit_code == 0, res.stderr
    spec = dpc.load_spec(spec_path)
    plan = dpc.plan(spec, frame_of(spec), seed=3)
    assert plan.to_dict() == json.loads(res.stdout)
    assert plan.ok and plan.events.shape[0] == len(plan.privacy.events)


@pytest.mark.usefixtures("pinned_clock", "in_repo")
def test_api_with_a_path_and_a_ledger_is_the_cli_run(tmp_path: Path) -> None:
    """Through the same ledger file, the CLI's and the API's releases are two lines of one chain;
    their receipts differ only where the chain does (seq, spend, prev_hash, hash, mac)."""
    ledger = tmp_path / "ledger.jsonl"
    res = invoke(["owl", "--spec", "configs/owl.yaml", "--out", tmp_path / "cli", "--ledger",
                  ledger, "--test-noise-seed", "7", "--quiet"])
    assert res.exit_code == 0, res.stderr
    release = dpc.release(dpc.load_spec("configs/owl.yaml"), "sample_data/owl_trial.csv",
                          ledger=ledger, out=tmp_path / "api", test_noise_seed=7)
    cli = read_json(tmp_path / "cli" / "receipt.json")
    api = release.receipt
    assert api == read_json(tmp_path / "api" / "receipt.json")
    chain = {"seq", "prev_hash", "hash", "mac", "ledger"}
    assert {k: v for k, v in cli.items() if k not in chain} == \
        {k: v for k, v in api.items() if k not in chain}
    assert api["seq"] == cli["seq"] + 1 and api["prev_hash"] == cli["hash"]
    assert api["ledger"]["spent_before"] == cli["ledger"]["spent_after"]
    assert invoke(["audit", "verify", "--ledger", ledger, "--receipt",
                   tmp_path / "api" / "receipt.json"]).exit_code == 0


@pytest.mark.usefixtures("pinned_clock", "in_repo")
def test_declared_preprocessing_on_a_raw_dataframe_is_the_cli_run(tmp_path: Path) -> None:
    """Mixed-type raw rows (text levels, missing cells) read by pandas as any user would: the
    same receipt as the CLI's on the file, and the rule applied to raw new rows in a DataFrame
    recommends what the CLI's --apply does."""
    doc = yaml.safe_load((REPO / "configs" / "owl_mixed.yaml").read_text())
    doc.pop("ledger")
    spec_path = write_yaml(tmp_path / "owl_mixed.yaml", doc)
    res = invoke(["owl", "--spec", spec_path, "--out", tmp_path / "cli", "--test-noise-seed", "5",
                  "--quiet"])
    assert res.exit_code == 0, res.stderr
    release = dpc.release(dpc.load_spec(spec_path), pd.read_csv("sample_data/mixed_trial.csv"),
                          test_noise_seed=5)
    assert json_bytes(release.receipt) == (tmp_path / "cli" / "receipt.json").read_bytes()
    assert release.documents["rule.json"]["preprocessing"] == \
        release.receipt["assumptions"]["preprocessing"]
    new_rows = "sample_data/mixed_new_patients.csv"
    scored = dpc.apply_rule(release, pd.read_csv(new_rows))
    applied = invoke(["owl", "--apply", tmp_path / "cli" / "rule.json", "--data", new_rows,
                      "--out", tmp_path / "applied", "--quiet"])
    assert applied.exit_code == 0, applied.stderr
    cli = pd.read_csv(tmp_path / "applied" / "recommendations.csv")
    assert scored["recommended"].tolist() == cli["recommended"].tolist()
    assert set(scored["recommended"]) == {"treated", "control"}


def _cli_error(args: list[Any]) -> tuple[int, str]:
    res = invoke([*args, "--json"])
    obj = json.loads(res.stdout)
    assert obj["exit_code"] == res.exit_code
    return res.exit_code, obj["error"]


def _api_error(call: Any) -> tuple[int, str]:
    with pytest.raises(dpc.DPCausalError) as info:
        call()
    return info.value.exit_code, str(info.value)


def _owl_doc(**changes: Any) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "configs" / "owl.yaml").read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return doc


def _bad_frame(kind: str) -> pd.DataFrame:
    frame = pacsv.read_csv(REPO / "sample_data" / "owl_trial.csv").to_pandas()
    if kind == "nan":
        frame.loc[5, "x2"] = np.nan
    elif kind == "text":
        frame["x3"] = frame["x3"].astype(str)
        frame.loc[7, "x3"] = "seven"
    elif kind == "label":
        frame.loc[3, "A"] = 2
    elif kind == "missing":
        frame = frame.drop(columns=["x4"])
    elif kind == "empty":
        frame = frame.iloc[:0]
    return frame


BAD = {
    # name: (spec changes, bad data, extra CLI args / API keywords)
    "a NaN covariate": ({}, "nan", {}),
    "a non-numeric covariate": ({}, "text", {}),
    "a treatment label the spec does not name": ({}, "label", {}),
    "a missing column": ({}, "missing", {}),
    "no rows": ({}, "empty", {}),
    "a missing bound": ({"bounds__outcome": None}, None, {}),
    "an unknown spec key": ({"owl__gama": 3.0}, None, {}),
    "ε ≤ 0 in the spec": ({"privacy__epsilon": -1.0}, None, {}),
    "ε ≤ 0 as an option": ({}, None, {"epsilon": 0.0}),
    "over the ledger's cap": ({"ledger__budget": {"epsilon": 4.0}}, None, {}),
    "too noisy for accuracy.max_halfwidth": ({"accuracy": {"max_halfwidth": 0.01}}, None, {}),
}


@pytest.mark.parametrize("case", list(BAD))
def test_the_api_refuses_what_the_cli_refuses(case: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    changes, bad, options = BAD[case]
    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "sample_data", "sample_data")
    Path("out").mkdir()
    doc = _owl_doc(**changes)
    spec_path = write_yaml(tmp_path / "owl.yaml", doc)
    data = Path("sample_data/owl_trial.csv")
    if bad is not None:
        data = tmp_path / "bad.csv"
        _bad_frame(bad).to_csv(data, index=False)
    args: list[Any] = ["owl", "--spec", spec_path, "--data", data, "--out", "o_cli"]
    for key, value in options.items():
        args += [f"--{key}", value]
    code, message = _cli_error(args)
    assert code in (2, 3)
    assert not Path("o_cli").exists()
    ledger = Path("out/ledger.jsonl")
    before = ledger.read_bytes() if ledger.exists() else b""

    if "owl__gama" in changes or "privacy__epsilon" in changes:
        # the spec itself is invalid: dpc.spec refuses it as load_spec does (the file's name apart)
        api_code, api_message = _api_error(lambda: dpc.build_spec("owl", doc))
        assert api_code == code
        assert api_message.replace("<owl spec>", str(spec_path)) == message
        return
    spec = dpc.load_spec(spec_path)
    frame = _bad_frame(bad) if bad is not None else pacsv.read_csv(data).to_pandas()
    api_code, api_message = _api_error(lambda: dpc.release(spec, frame, **options))
    assert api_code == code
    assert api_message.replace("<DataFrame>", str(data)) == message
    # the path refuses the same way, with the very message
    assert _api_error(lambda: dpc.release(spec, data, **options)) == (code, message)
    assert (ledger.read_bytes() if ledger.exists() else b"") == before  # nothing spent


@pytest.mark.usefixtures("in_repo")
def test_verify_is_audit_verify(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    release = dpc.release(dpc.load_spec("configs/owl.yaml"), owl_frame_of_repo(),
                          ledger=ledger, out=tmp_path / "owl")
    receipt = release.paths[-1]
    report = dpc.verify(ledger, [receipt])
    res = invoke(["audit", "verify", "--ledger", ledger, "--receipt", receipt, "--json"])
    assert res.exit_code == 0, res.stderr
    assert report.ok and report.to_dict() == json.loads(res.stdout)
    assert report.totals["owl-sample-trial"]["epsilon"] == release.plan.epsilon
    # a receipt whose output was changed: the same problem, raised as exit code 4
    (tmp_path / "owl" / "rule.json").write_text("{}")
    code, message = _cli_error(["audit", "verify", "--ledger", ledger, "--receipt", receipt])
    with pytest.raises(dpc.AuditViolation) as raised:
        dpc.verify(ledger, [receipt])
    assert (code, message) == (raised.value.exit_code, str(raised.value)) and code == 4
    assert not dpc.verify(ledger, [receipt], check=False).ok
    with pytest.raises(dpc.SpecError):
        dpc.verify()


def owl_frame_of_repo() -> pd.DataFrame:
    return pacsv.read_csv("sample_data/owl_trial.csv").to_pandas()
