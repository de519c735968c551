"""The PostgreSQL ledger (issue 15): the file ledger's semantics against a real server.

Each test gets a new database on the test server (``pg_url``) and a key file path
(``pg_key``); tests that stop the server use a cluster of their own (``pg_cluster``).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli_tests.conftest import REPO
from cli_tests.helpers import charge, ledger_lines
from dpcausal.accounting import chain
from dpcausal.accounting.budget import Budget
from dpcausal.accounting.ledger import Ledger
from dpcausal.accounting.ledger_copy import copy_ledger
from dpcausal.accounting.receipt import GENESIS_HASH, receipt_hash
from dpcausal.audit.verify import verify
from dpcausal.errors import (
    BudgetExceededError,
    LedgerIntegrityError,
    LedgerLockError,
    OutputError,
    SpecError,
)

psycopg = pytest.importorskip("psycopg")


def sql(url: str, stmt: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run ``stmt`` as the test superuser, bypassing the append-only triggers (a tamperer)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # triggers off for this session
        cur = conn.execute(stmt, params)
        return cur.fetchall() if cur.description else []


def rows(url: str) -> list[dict[str, Any]]:
    """The ledger's records, from the database."""
    return [json.loads(r[0]) for r in sql(url, "SELECT record FROM dpcausal.records ORDER BY seq")]


def releases_in(url: str) -> list[dict[str, Any]]:
    """The release records (receipts) of a database ledger."""
    return [r for r in rows(url) if "kind" not in r]


def test_init_creates_a_versioned_append_only_schema(pg_url: str, pg_key: Path) -> None:
    recs = Ledger(pg_url).init(dataset="d", cap=Budget(3.0))
    assert [r["kind"] for r in recs] == ["ledger-init", "cap"]
    assert sql(pg_url, "SELECT version FROM dpcausal.schema_version") == [(1,)]
    assert stat.S_IMODE(os.stat(pg_key).st_mode) == 0o600  # the key is outside the database
    stored = " ".join(r[0] for r in sql(pg_url, "SELECT record FROM dpcausal.records"))
    assert pg_key.read_text().strip() not in stored
    with pytest.raises(OutputError, match="already exists"):
        Ledger(pg_url).init()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # even the owner, triggers on
        for stmt in ("UPDATE dpcausal.records SET record = record", "DELETE FROM dpcausal.heads",
                     "TRUNCATE dpcausal.records", "DELETE FROM dpcausal.schema_version"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                conn.execute(stmt)
    assert len(rows(pg_url)) == 2 and verify(pg_url, []).ok


def test_the_file_ledgers_policy_holds_in_the_database(pg_url: str, pg_key: Path) -> None:
    Ledger(pg_url).init()
    first = charge(Ledger(pg_url), 1.0, cap=4.0)  # the first charge records the spec's cap
    assert first["ledger"]["store"] == {"kind": "postgresql", "url": pg_url.replace(
        "dpcausal@", "")}  # the receipt: kind and URL, without the user
    with pytest.raises(BudgetExceededError, match=r"cap ε=4.*set-cap --raise"):
        charge(Ledger(pg_url), 4.0, cap=100.0)  # a spec cannot raise the ledger's cap
    with pytest.raises(BudgetExceededError, match="set lower by the spec"):
        charge(Ledger(pg_url), 1.0, cap=1.5)
    Ledger(pg_url).set_cap("d", 2.5)
    second = charge(Ledger(pg_url), 1.5, cap=100.0)
    assert second["ledger"]["spent_before"]["epsilon"] == 1.0
    assert second["prev_hash"] == rows(pg_url)[-2]["hash"] and receipt_hash(second) == second["hash"]
    with pytest.raises(SpecError, match="differs from the ledger's existing label 'd'"):
        charge(Ledger(pg_url), 0.1, dataset="D")
    assert [r.get("kind") for r in rows(pg_url)] == ["ledger-init", "cap", None, "cap", None]
    assert [r["seq"] for r in rows(pg_url)] == [1, 2, 3, 4, 5]
    report = verify(pg_url, [])
    assert report.ok, report.problems
    assert report.totals["d"]["epsilon"] == 2.5 and report.totals["d"]["cap"]["epsilon"] == 2.5


def test_a_release_run_never_creates_a_database_ledger(pg_url: str, pg_key: Path) -> None:
    with pytest.raises(OutputError, match=r"no dpcausal ledger in this database.*ledger init"):
        charge(Ledger(pg_url), 0.1)
    with pytest.raises(OutputError, match="no dpcausal ledger"):
        Ledger(pg_url).state("d", Budget(0.1), Budget(1.0))
    assert sql(pg_url, "SELECT to_regnamespace('dpcausal')") == [(None,)]
    assert not pg_key.exists()


def test_the_key_comes_only_from_the_environment(pg_url: str, pg_key: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    Ledger(pg_url).init()
    charge(Ledger(pg_url), 0.5)
    hexkey = pg_key.read_text().strip()
    monkeypatch.delenv("DPCAUSAL_LEDGER_KEY_FILE")
    with pytest.raises(SpecError, match="never stored in the database"):
        charge(Ledger(pg_url), 0.1)
    monkeypatch.setenv("DPCAUSAL_LEDGER_KEY", hexkey)  # a masked CI variable works as well
    charge(Ledger(pg_url), 0.1)
    monkeypatch.setenv("DPCAUSAL_LEDGER_KEY_FILE", str(pg_key))
    with pytest.raises(SpecError, match="set only one"):
        charge(Ledger(pg_url), 0.1)
    monkeypatch.setenv("DPCAUSAL_LEDGER_KEY", chain.new_key().hex())
    monkeypatch.delenv("DPCAUSAL_LEDGER_KEY_FILE")
    with pytest.raises(LedgerIntegrityError, match=r"DPCAUSAL_LEDGER_KEY is not this ledger's key"):
        charge(Ledger(pg_url), 0.1)
    assert not verify(pg_url, []).ok
    monkeypatch.delenv("DPCAUSAL_LEDGER_KEY")
    monkeypatch.setenv("DPCAUSAL_LEDGER_KEY_FILE", str(pg_key))
    os.chmod(pg_key, 0o644)
    with pytest.raises(OutputError, match="chmod 600"):
        charge(Ledger(pg_url), 0.1)
    os.chmod(pg_key, 0o600)
    assert len(releases_in(pg_url)) == 2 and verify(pg_url, []).ok


def _ledger_of_four(url: str) -> list[dict[str, Any]]:
    Ledger(url).init()
    return [charge(Ledger(url), 1.0, cap=4.0) for _ in range(4)]  # the cap is exhausted


def _delete_middle_row(url: str) -> None:
    sql(url, "DELETE FROM dpcausal.records WHERE seq = 4")


def _delete_last_row(url: str) -> None:
    sql(url, "DELETE FROM dpcausal.records WHERE seq = (SELECT max(seq) FROM dpcausal.records)")


def _edit_without_rehash(url: str) -> None:
    sql(url, "UPDATE dpcausal.records SET record = replace(record, '\"epsilon\": 1.0', "
             "'\"epsilon\": 0.01') WHERE seq = 4")


def _edit_and_rechain(url: str) -> None:
    recs = rows(url)
    recs[3]["epsilon"] = recs[3]["events"][0]["epsilon"] = 0.01
    prev = recs[2]["hash"]
    for rec in recs[3:]:  # what a forger without the key can do: re-chain every later row
        rec["prev_hash"] = prev
        rec["hash"] = receipt_hash(rec)
        prev = rec["hash"]
        sql(url, "UPDATE dpcausal.records SET record = %s WHERE seq = %s",
            [chain.record_json(rec), rec["seq"]])


def _forge_a_row(url: str) -> None:
    last = rows(url)[-1]
    forged = {**last, "seq": last["seq"] + 1, "prev_hash": last["hash"], "mac": "0" * 64}
    forged["hash"] = receipt_hash(forged)
    sql(url, "INSERT INTO dpcausal.records VALUES (%s, %s)", [forged["seq"],
                                                            chain.record_json(forged)])


def _empty(url: str) -> None:
    sql(url, "DELETE FROM dpcausal.records")
    sql(url, "DELETE FROM dpcausal.heads")


@pytest.mark.parametrize(("tamper", "evidence"), [
    (_delete_middle_row, "missing"),
    (_delete_last_row, "committed but only"),
    (_edit_without_rehash, "does not match its content"),
    (_edit_and_rechain, "MAC does not verify"),
    (_forge_a_row, "MAC does not verify"),
    (_empty, "empty"),
])
def test_tampering_is_detected_and_refused(pg_url: str, pg_key: Path,
                                           tamper: Callable[[str], None], evidence: str) -> None:
    _ledger_of_four(pg_url)
    tamper(pg_url)
    before = rows(pg_url)
    report = verify(pg_url, [])
    assert not report.ok and evidence in " ".join(report.problems), report.problems
    with pytest.raises(LedgerIntegrityError, match="nothing was spent"):
        charge(Ledger(pg_url), 1.0, cap=4.0)  # a refund is never accepted
    assert rows(pg_url) == before


def test_a_rollback_of_rows_and_head_is_revealed_by_a_kept_receipt(
        pg_url: str, pg_key: Path, tmp_path: Path) -> None:
    last = _ledger_of_four(pg_url)[-1]
    receipt = tmp_path / "receipt.json"
    receipt.write_text(json.dumps(last))
    sql(pg_url, "DELETE FROM dpcausal.records WHERE seq = %s", [last["seq"]])
    sql(pg_url, "DELETE FROM dpcausal.heads WHERE count = %s", [last["seq"]])
    assert verify(pg_url, []).ok  # a consistent older state: the ledger alone cannot tell
    report = verify(pg_url, [receipt])
    assert not report.ok and "committed history was lost" in report.problems[0]


def test_a_role_with_the_documented_grants_can_run_and_nothing_more(
        pg_url: str, pg_key: Path) -> None:
    from dpcausal.accounting.ledger_pg_schema import GRANTS

    Ledger(pg_url).init()
    role = "dpcausal_job"
    sql(pg_url, f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') "
                f"THEN CREATE ROLE {role} LOGIN; END IF; END $$")
    for grant in GRANTS:
        sql(pg_url, grant.format(role=role))
    job_url = pg_url.replace("dpcausal@", f"{role}@")
    charge(Ledger(job_url), 0.5)
    assert verify(job_url, []).ok
    with psycopg.connect(job_url, autocommit=True) as conn:
        for stmt in ("UPDATE dpcausal.records SET record = record", "DELETE FROM dpcausal.records",
                     "TRUNCATE dpcausal.heads", "INSERT INTO dpcausal.schema_version VALUES (9, 'x')",
                     "ALTER TABLE dpcausal.records DISABLE TRIGGER USER"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(stmt)
    sql(pg_url, f"REVOKE ALL ON ALL TABLES IN SCHEMA dpcausal FROM {role}")
    sql(pg_url, f"REVOKE ALL ON SCHEMA dpcausal FROM {role}")


_HOLD = """
import sys
import psycopg
from cli_tests.helpers import charge
from dpcausal.accounting.ledger import Ledger

def hold(self):  # the rows are inserted and the lock held: wait here to be killed
    print("inserted", flush=True)
    sys.stdin.read()

psycopg.Connection.commit = hold
charge(Ledger(sys.argv[1]), 1.0, cap=3.0)
"""


def test_a_client_killed_mid_transaction_spends_nothing(pg_url: str, pg_key: Path) -> None:
    Ledger(pg_url).init()
    charge(Ledger(pg_url), 1.0, cap=3.0)
    before = rows(pg_url)
    with subprocess.Popen([sys.executable, "-c", _HOLD, pg_url], cwd=REPO, text=True,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          env={**os.environ, "PYTHONPATH": str(REPO)}) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "inserted"
            with pytest.raises(LedgerLockError, match="could not lock"):  # it holds the lock
                charge(Ledger(pg_url, lock_timeout=0.5), 1.0, cap=3.0)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait(30)
    assert rows(pg_url) == before  # its rows were never committed
    for _ in range(2):  # and its lock is gone with it: the cap's last two units are still there
        charge(Ledger(pg_url, lock_timeout=10), 1.0, cap=3.0)
    with pytest.raises(BudgetExceededError):
        charge(Ledger(pg_url), 1.0, cap=3.0)
    assert len(releases_in(pg_url)) == 3 and verify(pg_url, []).ok


def _failing_commit(monkeypatch: pytest.MonkeyPatch, *, commit_first: bool) -> None:
    real = psycopg.Connection.commit

    def commit(self: Any) -> None:
        if commit_first:
            real(self)  # the server commits; the acknowledgement is lost
        else:
            self.close()  # the connection dies before the COMMIT reaches the server
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(psycopg.Connection, "commit", commit)


def test_a_lost_commit_that_went_through_stands(pg_url: str, pg_key: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    Ledger(pg_url).init()
    with monkeypatch.context() as patch:
        _failing_commit(patch, commit_first=True)
        rec = charge(Ledger(pg_url), 1.0)  # found in the ledger: charged, so it may be published
    assert releases_in(pg_url) == [rec]


def test_a_lost_commit_that_did_not_go_through_spent_nothing(pg_url: str, pg_key: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    Ledger(pg_url).init()
    with monkeypatch.context() as patch:
        _failing_commit(patch, commit_first=False)
        with pytest.raises(OutputError, match="it was not committed: nothing was spent"):
            charge(Ledger(pg_url), 1.0)
    assert releases_in(pg_url) == []


def test_a_lost_commit_that_cannot_be_checked_says_so(pg_url: str, pg_key: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from dpcausal.accounting.ledger_pg import CommitOutcomeUnknown, PostgresStore

    Ledger(pg_url).init()
    real_connect = PostgresStore._connect
    calls: list[int] = []

    def connect(self: Any) -> Any:
        calls.append(1)
        if len(calls) > 2:  # state(), the charge, then the check: the database is gone
            raise OutputError("cannot connect")
        return real_connect(self)

    with monkeypatch.context() as patch:
        _failing_commit(patch, commit_first=True)
        patch.setattr(PostgresStore, "_connect", connect)
        ledger = Ledger(pg_url)
        ledger.state("d", Budget(1.0), Budget(1.0))
        with pytest.raises(CommitOutcomeUnknown, match=r"unknown whether.*charged, not published"):
            charge(ledger, 1.0)
    assert len(releases_in(pg_url)) == 1  # it had gone through: the budget is spent


def test_an_unreachable_database_fails_before_reading(pg_cluster: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPCAUSAL_LEDGER_KEY_FILE", str(tmp_path / "k"))
    url = pg_cluster.url()
    Ledger(url).init()
    pg_cluster.stop()
    started = time.monotonic()
    with pytest.raises(OutputError, match=r"cannot connect to the ledger database.*nothing was read"):
        Ledger(url).state("d", Budget(1.0), Budget(1.0))
    with pytest.raises(OutputError, match="cannot connect"):
        verify(url, [])
    assert time.monotonic() - started < 30


def test_export_import_round_trip_keeps_every_line(pg_url: str, pg_server: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "l.jsonl"
    Ledger(src).init(dataset="d", cap=Budget(5.0))
    for eps in (1.0, 0.5):
        charge(Ledger(src), eps, cap=5.0)
    Ledger(src).set_cap("e", 2.0, 1e-6)
    original = src.read_text()
    monkeypatch.setenv("DPCAUSAL_LEDGER_KEY_FILE", str(src) + ".key")  # the key moves with it
    report = copy_ledger(src, pg_url)
    assert report.records == 5 and report.spent["d"] == Budget(1.5)
    assert rows(pg_url) == ledger_lines(src)
    charge(Ledger(pg_url), 1.0, cap=5.0)  # the shared ledger goes on from there
    back = tmp_path / "back.jsonl"
    copy_ledger(pg_url, back)
    assert back.read_text().startswith(original)  # byte for byte, plus the new line
    assert (tmp_path / "back.jsonl.key").read_text() == (Path(str(src) + ".key")).read_text()
    for ledger in (pg_url, back):
        report_v = verify(ledger, [])
        assert report_v.ok and report_v.totals["d"]["epsilon"] == 2.5
    with pytest.raises(OutputError, match="copied only into a new one"):
        copy_ledger(back, pg_url)
    with pytest.raises(OutputError, match="no dpcausal ledger"):  # the server's own database
        copy_ledger(pg_server, tmp_path / "x.jsonl")


def test_import_takes_the_sources_key_and_no_other(pg_url: str, pg_key: Path,
                                                      tmp_path: Path) -> None:
    src = tmp_path / "l.jsonl"
    charge(Ledger(src), 1.0)
    pg_key.write_text(chain.new_key().hex() + "\n")
    os.chmod(pg_key, 0o600)
    with pytest.raises(OutputError, match="not the imported ledger's key"):
        copy_ledger(src, pg_url)
    assert sql(pg_url, "SELECT to_regnamespace('dpcausal')") == [(None,)]
    pg_key.unlink()  # a new path: the source's key is written there
    copy_ledger(src, pg_url)
    assert pg_key.read_text() == (tmp_path / "l.jsonl.key").read_text()
    assert stat.S_IMODE(os.stat(pg_key).st_mode) == 0o600 and verify(pg_url, []).ok


def test_import_refuses_a_damaged_source(pg_url: str, pg_key: Path, tmp_path: Path) -> None:
    src = tmp_path / "l.jsonl"
    for _ in range(3):
        charge(Ledger(src), 0.2)
    lines = src.read_text().splitlines()
    src.write_text("\n".join(lines[:-1]) + "\n")  # the last line is gone: the head says so
    with pytest.raises(LedgerIntegrityError, match="removed"):
        copy_ledger(src, pg_url)
    assert not pg_key.exists()
    assert lines[0].startswith("{") and GENESIS_HASH in lines[0]
