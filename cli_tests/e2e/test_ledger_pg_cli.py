"""A PostgreSQL ledger through the real CLI (issue 15): concurrent runs from separate processes,
the server down or stopped mid-run, export and import, and the credential rules.

``configs/owl.yaml`` costs ε = 5 per release; ``ledger init --url ... --epsilon 15`` gives the
dataset a cap for exactly three releases (the ledger's cap wins over the spec's larger budget).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli_tests.helpers import invoke, read_json, write_yaml
from dpcausal.accounting.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
OWL = ["owl", "--spec", "configs/owl.yaml", "--quiet"]
DATASET = "owl-sample-trial"


@pytest.fixture(autouse=True)
def _key(pg_key: Path) -> Path:
    """Every test here has a database ledger key file path (created by ledger init)."""
    return pg_key


def _init(url: str, cap: float = 15.0) -> None:
    res = invoke(["ledger", "init", "--url", url, "--dataset", DATASET, "--epsilon", cap])
    assert res.exit_code == 0, res.output
    assert "key in DPCAUSAL_LEDGER_KEY_FILE=" in res.stdout


def _released(url: str) -> list[dict[str, Any]]:
    snap = Ledger(url).snapshot()
    assert not snap.problems, snap.problems
    return [r for r in snap.records if "kind" not in r]


def test_eight_concurrent_runs_against_a_cap_for_three_release_three(
        workdir: Path, pg_url: str) -> None:
    _init(pg_url)
    procs = [subprocess.Popen([sys.executable, "-m", "dpcausal", *OWL, "--ledger", pg_url,
                               "--out", f"out/owl{i}"], cwd=workdir, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for i in range(8)]
    results = []
    for p in procs:
        _, err = p.communicate(timeout=300)
        results.append((p.returncode, err))
    codes = sorted(code for code, _ in results)
    assert codes == [0, 0, 0, 3, 3, 3, 3, 3], results
    assert all("exceeded" in err for code, err in results if code == 3)
    released = _released(pg_url)
    assert len(released) == 3
    assert sorted(r["ledger"]["spent_after"]["epsilon"] for r in released) == [5.0, 10.0, 15.0]
    receipts = sorted(workdir.glob("out/owl*/receipt.json"))
    assert len(receipts) == 3
    args = ["audit", "verify", "--ledger", pg_url]
    for r in receipts:
        args += ["--receipt", r]
    res = invoke(args)
    assert res.exit_code == 0 and "3 release(s), spent ε=15 δ=0 of cap ε=15" in res.stdout, res.output
    receipt = read_json(receipts[0])
    assert receipt["ledger"]["store"]["kind"] == "postgresql"
    assert "dpcausal@" not in json.dumps(receipt)  # the user is not in the receipt


def test_an_unreachable_database_exits_5_before_reading_a_row(
        workdir: Path, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import dpcausal.io.tables as tables

    url = pg_cluster.url()
    _init(url)
    pg_cluster.stop()

    real_read = tables.read_table

    def no_rows(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).name == "owl_trial.csv":  # the sensitive file (public side files may be read)
            raise AssertionError("a data row was read")
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(tables, "read_table", no_rows)
    for extra in ([], ["--dry-run"]):
        res = invoke([*OWL, "--ledger", url, *extra])
        assert res.exit_code == 5, res.output
        assert "cannot connect to the ledger database" in res.stderr
        assert "nothing was read or spent" in res.stderr
    assert not (workdir / "out" / "owl").exists()
    res = invoke(["audit", "verify", "--ledger", url])
    assert res.exit_code == 5 and "cannot connect" in res.stderr


def test_the_server_stopped_mid_run(workdir: Path, pg_cluster: Any,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped after the plan check, inside the charge's transaction, and after its commit."""
    from dpcausal.accounting.ledger_pg import PostgresStore

    url = pg_cluster.url()
    _init(url)
    real_charge, real_commit = Ledger.charge, PostgresStore.commit

    def stop_then(real: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            pg_cluster.stop("immediate")  # like a crash: no clean goodbye to the clients
            return real(*args, **kwargs)
        return wrapped

    for where in ("before the charge", "inside the charge"):
        with monkeypatch.context() as patch:
            if where == "before the charge":
                patch.setattr(Ledger, "charge", stop_then(real_charge))
            else:
                patch.setattr(PostgresStore, "commit", stop_then(real_commit))
            res = invoke([*OWL, "--ledger", url])
        assert res.exit_code == 5, (where, res.output)
        assert "nothing was" in res.stderr and "spent" in res.stderr, res.stderr
        assert not (workdir / "out" / "owl").exists()
        pg_cluster.start()
        assert _released(url) == []  # nothing was spent

    def charge_then_stop(*args: Any, **kwargs: Any) -> Any:
        out = real_charge(*args, **kwargs)
        pg_cluster.stop("immediate")
        return out

    with monkeypatch.context() as patch:
        patch.setattr(Ledger, "charge", charge_then_stop)
        res = invoke([*OWL, "--ledger", url])
    assert res.exit_code == 0, res.output  # charged: publishing needs no database
    pg_cluster.start()
    assert len(_released(url)) == 1
    res = invoke(["audit", "verify", "--ledger", url, "--receipt", "out/owl/receipt.json"])
    assert res.exit_code == 0, res.output


def test_export_and_import_through_the_cli(workdir: Path, pg_url: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(2):
        assert invoke(OWL).exit_code == 0  # a file ledger: out/ledger.jsonl
    monkeypatch.setenv("DPCAUSAL_LEDGER_KEY_FILE", str(workdir / "out" / "ledger.jsonl.key"))
    res = invoke(["ledger", "import", "--url", pg_url, "--from", "out/ledger.jsonl"])
    assert res.exit_code == 0, res.output
    assert "copied 4 record(s)" in res.stdout and "the copy verifies" in res.stdout
    res = invoke(["audit", "verify", "--ledger", pg_url, "--receipt", "out/owl/receipt.json"])
    assert res.exit_code == 0 and "2 release(s), spent ε=10" in res.stdout, res.output
    assert invoke([*OWL, "--ledger", pg_url]).exit_code == 0  # the shared ledger goes on
    res = invoke(["ledger", "export", "--ledger", pg_url, "--to", "back/ledger.jsonl", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["records"] == 5
    assert (workdir / "back" / "ledger.jsonl").read_text().startswith(
        (workdir / "out" / "ledger.jsonl").read_text())
    res = invoke(["audit", "verify", "--ledger", "back/ledger.jsonl", "--receipt",
                  "out/owl/receipt.json"])
    assert res.exit_code == 0 and "3 release(s), spent ε=15" in res.stdout, res.output
    res = invoke(["ledger", "import", "--url", pg_url, "--from", "back/ledger.jsonl"])
    assert res.exit_code == 5 and "copied only into a new one" in res.stderr


def test_a_deleted_row_fails_audit_verify_with_exit_4(workdir: Path, pg_url: str) -> None:
    import psycopg

    _init(pg_url)
    for _ in range(2):
        assert invoke([*OWL, "--ledger", pg_url]).exit_code == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("DELETE FROM dpcausal.records WHERE seq = 3")
    res = invoke(["audit", "verify", "--ledger", pg_url])
    assert res.exit_code == 4 and "missing" in res.stderr, res.output
    res = invoke([*OWL, "--ledger", pg_url])
    assert res.exit_code == 5 and "nothing was spent" in res.stderr


def test_a_url_with_a_password_is_refused_without_quoting_it(workdir: Path) -> None:
    secret = "s3cr3t-pw"
    spec = read_json_yaml(workdir / "configs" / "owl.yaml")
    spec["ledger"] = {"url": f"postgresql://job:{secret}@db.example/ledger",
                      "dataset": DATASET, "budget": {"epsilon": 20.0}}
    write_yaml(workdir / "pw.yaml", spec)
    for args in (["owl", "--spec", "pw.yaml"],
                 [*OWL, "--ledger", f"postgresql://job:{secret}@db.example/ledger"],
                 [*OWL, "--ledger", f"postgresql://db.example/ledger?password={secret}"],
                 ["audit", "verify", "--ledger", f"postgresql://job:{secret}@db.example/x"],
                 ["ledger", "init", "--url", f"postgresql://job:{secret}@db.example/x"]):
        res = invoke(args)
        assert res.exit_code == 2, (args, res.output)
        assert "never carries credentials" in res.stderr and "PGPASSWORD" in res.stderr
        assert secret not in res.output
    spec["ledger"]["path"] = "out/ledger.jsonl"
    write_yaml(workdir / "both.yaml", spec)
    res = invoke(["owl", "--spec", "both.yaml"])
    assert res.exit_code == 2 and "exactly one of ledger.path" in res.stderr
    assert secret not in res.output


def read_json_yaml(path: Path) -> dict[str, Any]:
    """A YAML spec as a dict."""
    import yaml

    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict)
    return doc


_LIGHT = """
import sys
from typer.testing import CliRunner
from dpcausal.cli import app
res = CliRunner().invoke(app, ["owl", "--spec", "configs/owl.yaml", "--quiet"])
assert res.exit_code == 0, res.output
assert not [m for m in sys.modules if m.startswith("psycopg")], "psycopg was imported"
sys.modules["psycopg"] = None  # as if the extra were not installed
res = CliRunner().invoke(app, ["owl", "--spec", "configs/owl.yaml", "--ledger",
                               "postgresql://db.example/ledger"])
assert res.exit_code == 2, res.output
assert "pip install 'dpcausal[postgres]'" in res.stderr, res.stderr
print("ok")
"""


def test_the_default_install_stays_light(workdir: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _LIGHT], cwd=workdir, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
