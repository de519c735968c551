"""Issue 21: ``dpc.ledger`` and ``dpc.audit_privacy`` are the ``dpcausal ledger`` and ``dpcausal
audit privacy|repair`` commands (which call them).

The same steps through the command line and through the API, on two ledgers of the same kind (files,
or two PostgreSQL databases) with the ledger's id, key and clock pinned, write the very same lines;
each refusal has the same exit code and message (the ledger's name apart). The audit gives the
same report, and the same violation.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dpcausal as dpc
from cli_tests.conftest import new_database
from cli_tests.helpers import invoke, write_yaml
from dpcausal.accounting.ledger import Ledger
from dpcausal.accounting.ledger_url import is_database_url, redact_url
from dpcausal.accounting.receipt import GENESIS_HASH, finalize

NEW_ROWS = "sample_data/owl_new_patients.csv"
"""Rows without the outcome and treatment columns: not data an owl spec can audit."""


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new ledger gets the same id and key, and every line the same time."""
    monkeypatch.setattr("dpcausal.accounting.chain.new_ledger_id", lambda: "0" * 32)
    monkeypatch.setattr("dpcausal.accounting.chain.new_key", lambda: bytes(range(32)))
    monkeypatch.setattr("dpcausal.accounting.ledger.now_iso", lambda: "2026-01-02T03:04:05+00:00")


@pytest.fixture(params=["file", "postgresql"])
def two_ledgers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two new ledgers of one kind: the command line's and the API's."""
    if request.param == "file":
        yield str(tmp_path / "cli" / "ledger.jsonl"), str(tmp_path / "api" / "ledger.jsonl")
        return
    request.getfixturevalue("pg_key")  # one key file for both databases
    server = request.getfixturevalue("pg_server")
    with new_database(server) as cli, new_database(server) as api:
        yield cli, api


def _location(ledger: str) -> str:
    """How messages name the ledger: a database's URL without credentials."""
    return redact_url(ledger) if is_database_url(ledger) else ledger


def same_outcome(cli_args: list[Any], api_call: Callable[[], Any], cli_name: Any,
                 api_name: Any) -> Any:
    """Run both: the same refusal (exit code, and message with ``cli_name`` read as
    ``api_name``), then None; or success, then the API's result and the ``--json`` output."""
    res = invoke([*cli_args, "--json"])
    if res.exit_code == 0:
        return api_call(), json.loads(res.stdout)
    with pytest.raises(dpc.DPCausalError) as raised:
        api_call()
    assert res.exit_code == raised.value.exit_code, res.output
    message = json.loads(res.stdout)["error"]
    assert message.replace(str(cli_name), str(api_name)) == str(raised.value)
    return None


def test_the_ledger_commands_and_the_api_write_the_same_lines(
        pinned: None, two_ledgers: tuple[str, str]) -> None:
    cli, api = two_ledgers
    steps: list[tuple[list[Any], Callable[[str], Any], int]] = [
        (["init", "--dataset", "trial", "--epsilon", 10, "--delta", 1e-6, "--note", "first"],
         lambda led: dpc.ledger.init(led, dataset="trial", epsilon=10, delta=1e-6, note="first"),
         0),
        (["init"], lambda led: dpc.ledger.init(led), 5),  # a ledger exists there
        (["set-cap", "--dataset", "trial", "--epsilon", 8],
         lambda led: dpc.ledger.set_cap(led, "trial", 8), 0),
        (["set-cap", "--dataset", "trial", "--epsilon", 12],
         lambda led: dpc.ledger.set_cap(led, "trial", 12), 3),  # a raise needs --raise
        (["set-cap", "--dataset", "trial", "--epsilon", 12, "--raise", "--note", "board"],
         lambda led: dpc.ledger.set_cap(led, "trial", 12, allow_raise=True, note="board"), 0),
        (["set-cap", "--dataset", "other", "--epsilon", 2, "--delta", 1e-7],
         lambda led: dpc.ledger.set_cap(led, "other", 2, 1e-7), 0),
        (["set-cap", "--dataset", "other", "--epsilon", 0],
         lambda led: dpc.ledger.set_cap(led, "other", 0), 2),
        (["set-cap", "--dataset", "no spaces", "--epsilon", 1],
         lambda led: dpc.ledger.set_cap(led, "no spaces", 1), 2),
        (["set-accountant", "--accountant", "rdp"],
         lambda led: dpc.ledger.set_accountant(led, "rdp"), 2),
        (["set-accountant", "--accountant", "pld", "--note", "tighter"],
         lambda led: dpc.ledger.set_accountant(led, "pld", note="tighter"), 0),
        (["set-accountant", "--accountant", "basic"],
         lambda led: dpc.ledger.set_accountant(led, "basic"), 3),  # looser: refused
    ]
    for args, call, code in steps:
        outcome = same_outcome(["ledger", *args, "--ledger", cli], lambda c=call: c(api),
                               _location(cli), _location(api))
        assert (outcome is None) == (code != 0), args
        if outcome is None:
            continue
        update, printed = outcome
        assert update.records == printed, args
        assert update.location == _location(api)
    cli_records, api_records = Ledger(cli).snapshot().records, Ledger(api).snapshot().records
    assert [r["kind"] for r in api_records] == ["ledger-init", "cap", "cap", "cap", "cap",
                                                "accountant"]
    assert api_records == cli_records
    if not api.startswith("postgresql"):
        for suffix in ("", ".key", ".head"):
            assert Path(api + suffix).read_bytes() == Path(cli + suffix).read_bytes()
    report = dpc.verify(api)
    assert report.totals["trial"]["cap"] == {"epsilon": 12.0, "delta": 1e-6}
    assert report.accountant["name"] == "pld"


def test_export_and_import_are_one_copy(pinned: None, two_ledgers: tuple[str, str],
                                        tmp_path: Path) -> None:
    cli, api = two_ledgers
    for led in two_ledgers:
        dpc.ledger.init(led, dataset="trial", epsilon=3)
    copies = {led: str(tmp_path / name / "copy.jsonl") for led, name in
              [(cli, "cli-copy"), (api, "api-copy")]}
    report, printed = same_outcome(["ledger", "export", "--ledger", cli, "--to", copies[cli]],
                                   lambda: dpc.ledger.copy(api, copies[api]), None, None)
    moved = {"source", "dest", "key"}
    assert {k: v for k, v in report.to_dict().items() if k not in moved} == \
        {k: v for k, v in printed.items() if k not in moved}
    assert report.records == 2 and report.spent["trial"].epsilon == 0.0
    assert Path(copies[api]).read_bytes() == Path(copies[cli]).read_bytes()
    # import: the copy of the copy; into an existing ledger: refused, the same way
    again = {led: str(Path(copies[led]).with_name("again.jsonl")) for led in two_ledgers}
    assert same_outcome(["ledger", "import", "--ledger", again[cli], "--from", copies[cli]],
                        lambda: dpc.ledger.copy(copies[api], again[api]), None, None)
    assert Path(again[api]).read_bytes() == Path(copies[api]).read_bytes()
    assert same_outcome(["ledger", "export", "--ledger", copies[cli], "--to", again[cli]],
                        lambda: dpc.ledger.copy(copies[api], again[api]),
                        tmp_path / "cli-copy", tmp_path / "api-copy") is None


def _legacy_line(path: Path) -> None:
    rec = finalize({"command": "test", "epsilon": 1.0, "delta": 0.0,
                    "events": [{"epsilon": 1.0, "delta": 0.0}],
                    "ledger": {"dataset": "d", "spent_before": {"epsilon": 0.0, "delta": 0.0},
                               "spent_after": {"epsilon": 1.0, "delta": 0.0},
                               "cap": {"epsilon": 3.0, "delta": 0.0}}}, GENESIS_HASH)
    path.write_text(json.dumps(rec, sort_keys=True) + "\n")


def test_adopt_is_init_adopt(pinned: None, tmp_path: Path) -> None:
    cli, api = tmp_path / "cli.jsonl", tmp_path / "api.jsonl"
    for path in (cli, api):
        _legacy_line(path)
    for _ in range(2):  # adopted; then refused: already keyed
        outcome = same_outcome(["ledger", "init", "--adopt", "--ledger", cli],
                               lambda: dpc.ledger.adopt(api), cli, api)
    update, printed = same_outcome(["ledger", "init", "--ledger", tmp_path / "new-cli.jsonl"],
                                   lambda: dpc.ledger.init(tmp_path / "new-api.jsonl"), None, None)
    assert outcome is None  # the second adoption
    assert api.read_bytes() == cli.read_bytes()
    assert [r.get("kind") for r in Ledger(api).snapshot().records][1:] == ["ledger-adopt", "cap"]
    assert update.records == printed


def test_repair_is_audit_repair(tmp_path: Path) -> None:
    made = tmp_path / "made" / "ledger.jsonl"
    dpc.ledger.init(made, dataset="trial", epsilon=3)
    with made.open("ab") as fh:
        fh.write(b'{"torn": tr')  # a run killed while appending: never committed
    ledgers = []
    for side in ("cli", "api"):
        shutil.copytree(made.parent, tmp_path / side)
        ledgers.append(tmp_path / side / "ledger.jsonl")
    cli, api = ledgers
    res = invoke(["audit", "repair", "--ledger", cli])
    done = dpc.ledger.repair(api)
    assert res.exit_code == 0, res.output
    assert done.moved_to is not None and done.moved_to.read_bytes() == b'{"torn": tr'
    assert f"{cli}: moved the incomplete last line (never committed) to" in res.stdout
    assert api.read_bytes() == cli.read_bytes() == made.read_bytes()[:-len(b'{"torn": tr')]
    assert dpc.ledger.repair(api).moved_to is None
    # a committed line cut short cannot be repaired: exit code 4, the same evidence
    for path in ledgers:
        path.write_bytes(path.read_bytes()[:-30])
    for missing in (False, True):
        if missing:  # no ledger there: exit code 5
            cli, api = cli.with_name("none.jsonl"), api.with_name("none.jsonl")
        res = invoke(["audit", "repair", "--ledger", cli])
        with pytest.raises(dpc.DPCausalError) as raised:
            dpc.ledger.repair(api)
        assert res.exit_code == raised.value.exit_code == (5 if missing else 4)
        assert res.stderr.replace(str(cli), str(api)) == f"error: {raised.value}\n"


def _report_json(report: Any) -> str:
    return json.dumps(report.to_dict(), indent=2, allow_nan=True) + "\n"


def test_audit_privacy_is_the_cli_audit(small_owl_spec: Path) -> None:
    options = {"rows": 30, "pairs": 5, "trials": 20, "seed": 3}
    args = [a for k, v in options.items() for a in (f"--{k}", str(v))]
    res = invoke(["audit", "privacy", "--spec", small_owl_spec, *args, "--json"])
    assert res.exit_code == 0, res.output
    report = dpc.audit_privacy(small_owl_spec, **options)
    assert _report_json(report) == res.stdout and not report.violation
    assert _report_json(dpc.audit_privacy(dpc.load_spec(small_owl_spec), **options)) == res.stdout
    # on the user's data: a DataFrame is audited as its file is
    data = "sample_data/owl_trial.csv"
    res = invoke(["audit", "privacy", "--spec", small_owl_spec, "--data", data, "--pairs", "3",
                  "--trials", "0", "--json"])
    assert res.exit_code == 0, res.output
    frame = pd.read_csv(data)
    assert _report_json(dpc.audit_privacy(small_owl_spec, frame, pairs=3, trials=0)) == res.stdout


def test_audit_privacy_finds_the_cli_violation(small_owl_spec: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from dpcausal.commands.owl.setup import OwlSetup

    real = OwlSetup.sensitivity
    monkeypatch.setattr(OwlSetup, "sensitivity", lambda self, g, n: real(self, g, n) / 8)
    res = invoke(["audit", "privacy", "--spec", small_owl_spec, "--rows", "10", "--pairs", "4",
                  "--trials", "0", "--json"])
    printed = json.loads(res.stdout)
    with pytest.raises(dpc.AuditViolation) as raised:
        dpc.audit_privacy(small_owl_spec, rows=10, pairs=4, trials=0)
    assert res.exit_code == raised.value.exit_code == 4
    assert printed["error"] == str(raised.value) and "exceeds the claimed ε" in printed["error"]
    report = dpc.audit_privacy(small_owl_spec, rows=10, pairs=4, trials=0, check=False)
    assert report.violation and report.to_dict() == {
        k: v for k, v in printed.items() if k not in ("error", "exit_code", "file")}
    # a spec object: the same violation, named after its command
    with pytest.raises(dpc.AuditViolation, match=r"^<owl spec>: .*exceeds the claimed ε"):
        dpc.audit_privacy(dpc.load_spec(small_owl_spec), rows=10, pairs=4, trials=0)


def test_audit_privacy_refuses_what_the_cli_refuses(small_owl_spec: Path, tmp_path: Path) -> None:
    no_command = write_yaml(tmp_path / "s.yaml", {"privacy": {"epsilon": 1}})
    cases: list[tuple[list[Any], Callable[[], Any]]] = [
        (["--spec", no_command], lambda: dpc.audit_privacy(no_command)),
        (["--spec", small_owl_spec, "--data", "missing.csv"],
         lambda: dpc.audit_privacy(small_owl_spec, "missing.csv")),
        (["--spec", small_owl_spec, "--data", NEW_ROWS],
         lambda: dpc.audit_privacy(small_owl_spec, pd.read_csv(NEW_ROWS))),
    ]
    for args, call in cases:
        res = invoke(["audit", "privacy", *args, "--json"])
        with pytest.raises(dpc.DPCausalError) as raised:
            call()
        assert res.exit_code == raised.value.exit_code == 2, res.output
        message = json.loads(res.stdout)["error"]
        assert message.replace(NEW_ROWS, "<DataFrame>") == \
            str(raised.value)
