"""The ledger: keyed chain, caps owned by the ledger, labels, and concurrent appends."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import stat
from pathlib import Path

import pytest

from cli_tests.helpers import charge, invoke, ledger_lines, releases
from dpcausal.accounting import chain
from dpcausal.accounting.budget import Budget, compose
from dpcausal.accounting.ledger import Ledger, label_key
from dpcausal.accounting.receipt import GENESIS_HASH, receipt_hash
from dpcausal.audit.verify import verify
from dpcausal.errors import (
    BudgetExceededError,
    LedgerIntegrityError,
    OutputError,
    SpecError,
)


def test_compose_and_fits_within() -> None:
    total = compose([Budget(0.1), Budget(0.1), Budget(0.1)])
    assert total.fits_within(Budget(0.3))  # float slack: 0.1+0.1+0.1 > 0.3 in binary
    assert not Budget(0.31).fits_within(Budget(0.3))
    assert not Budget(0.1, 1e-6).fits_within(Budget(1.0, 0.0))


def test_first_charge_creates_a_keyed_ledger_and_records_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    first = charge(Ledger(path), 0.4)
    second = charge(Ledger(path), 0.4)
    lines = ledger_lines(path)
    assert [r.get("kind") for r in lines] == ["ledger-init", "cap", None, None]
    assert lines[1]["dataset"] == "d" and lines[1]["cap"] == {"epsilon": 1.0, "delta": 0.0}
    assert lines[0]["prev_hash"] == GENESIS_HASH
    assert [r["seq"] for r in lines] == [1, 2, 3, 4]
    assert second["prev_hash"] == first["hash"] and receipt_hash(second) == second["hash"]
    assert second["ledger"]["spent_before"]["epsilon"] == pytest.approx(0.4)
    assert second["ledger"]["ledger_id"] == lines[0]["ledger_id"]
    key_mode = stat.S_IMODE(os.stat(tmp_path / "l.jsonl.key").st_mode)
    assert key_mode == 0o600
    head = json.loads((tmp_path / "l.jsonl.head").read_text())
    assert head["count"] == 4 and head["last_hash"] == second["hash"]
    assert head["size"] == path.stat().st_size
    with pytest.raises(BudgetExceededError, match=r"requested ε=0.4.*spent ε=0.8.*cap ε=1"):
        charge(Ledger(path), 0.4)
    assert len(releases(path)) == 2
    assert verify(path, []).ok


def test_a_spec_cannot_raise_the_ledgers_cap(tmp_path: Path) -> None:
    # issue 14: a second spec with the same label and a larger cap kept spending
    path = tmp_path / "l.jsonl"
    for _ in range(4):
        charge(Ledger(path), 1.0, cap=4.0)
    with pytest.raises(BudgetExceededError, match=r"cap ε=4.*recorded in the ledger.*set-cap --raise"):
        charge(Ledger(path), 1.0, cap=5.0)
    with pytest.raises(BudgetExceededError):
        charge(Ledger(path), 0.5, cap=100.0)
    assert len(releases(path)) == 4
    report = verify(path, [])
    assert report.ok and report.totals["d"]["epsilon"] == pytest.approx(4.0)


def test_a_spec_can_lower_the_cap_for_its_run(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    charge(Ledger(path), 1.0, cap=10.0)
    with pytest.raises(BudgetExceededError, match=r"cap ε=1.5.*set lower by the spec"):
        charge(Ledger(path), 1.0, cap=1.5)
    rec = charge(Ledger(path), 1.0, cap=2.0)
    assert rec["ledger"]["cap"]["epsilon"] == 2.0 and rec["ledger"]["cap_source"] == "spec"
    assert Ledger(path).state("d", Budget(1.0), Budget(10.0)).cap == Budget(10.0)  # not lowered
    assert verify(path, []).ok


def test_set_cap_lowers_freely_and_raises_only_when_told(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    charge(Ledger(path), 1.0, cap=5.0)
    Ledger(path).set_cap("d", 2.0)
    with pytest.raises(BudgetExceededError, match="cap ε=2"):
        charge(Ledger(path), 1.5, cap=5.0)
    with pytest.raises(BudgetExceededError, match="--raise"):
        Ledger(path).set_cap("d", 6.0)
    rec = Ledger(path).set_cap("d", 6.0, allow_raise=True, note="board approval 12")
    assert rec["reason"] == "raise" and rec["previous_cap"]["epsilon"] == 2.0
    assert rec["note"] == "board approval 12"
    charge(Ledger(path), 1.5, cap=100.0)
    report = verify(path, [])
    assert report.ok and report.totals["d"]["cap"]["epsilon"] == 6.0


@pytest.mark.parametrize("near", ["D", " d", "ｄ"])
def test_near_duplicate_labels_are_refused(tmp_path: Path, near: str) -> None:
    path = tmp_path / "l.jsonl"
    charge(Ledger(path), 0.1)
    assert label_key(near) == label_key("d")
    before = path.read_bytes()
    with pytest.raises(SpecError, match="differs from the ledger's existing label 'd'"):
        charge(Ledger(path), 0.1, dataset=near)
    with pytest.raises(SpecError):
        Ledger(path).set_cap(near, 1.0)
    assert path.read_bytes() == before
    charge(Ledger(path), 0.1, dataset="d2")  # a clearly different label is fine


def test_a_ledger_is_never_created_in_a_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "l.jsonl"
    with pytest.raises(OutputError, match=r"does not exist.*ledger init"):
        charge(Ledger(missing), 0.1)
    assert not (tmp_path / "typo").exists()
    res = invoke(["ledger", "init", "--ledger", missing, "--dataset", "d", "--epsilon", "2"])
    assert res.exit_code == 0, res.output
    with pytest.raises(BudgetExceededError, match="cap ε=2"):
        charge(Ledger(missing), 3.0, cap=10.0)
    res = invoke(["ledger", "init", "--ledger", missing])
    assert res.exit_code == 5 and "already exists" in res.stderr


def test_ledger_cli_set_cap(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    assert invoke(["ledger", "set-cap", "--ledger", path, "--dataset", "d",
                   "--epsilon", "1"]).exit_code == 5  # no ledger yet
    assert invoke(["ledger", "init", "--ledger", path]).exit_code == 0
    res = invoke(["ledger", "set-cap", "--ledger", path, "--dataset", "d", "--epsilon", "3",
                  "--delta", "1e-6"])
    assert res.exit_code == 0 and "cap ε=3 δ=1e-06" in res.stdout
    res = invoke(["ledger", "set-cap", "--ledger", path, "--dataset", "d", "--epsilon", "4"])
    assert res.exit_code == 3 and "--raise" in res.stderr
    res = invoke(["ledger", "set-cap", "--ledger", path, "--dataset", "d", "--epsilon", "4",
                  "--raise", "--json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout)[0]["cap"] == {"epsilon": 4.0, "delta": 1e-6}
    assert invoke(["ledger", "set-cap", "--ledger", path, "--dataset", "bad label",
                   "--epsilon", "1"]).exit_code == 2
    assert invoke(["ledger", "set-cap", "--ledger", path, "--dataset", "d",
                   "--epsilon", "-1"]).exit_code == 2


def test_verify_catches_an_edit_even_when_rehashed(tmp_path: Path) -> None:
    # the unkeyed chain let a forger lower a line's cost and re-hash the rest (issue 14)
    path = tmp_path / "l.jsonl"
    for _ in range(3):
        charge(Ledger(path), 0.2)
    lines = ledger_lines(path)
    lines[3]["events"][0]["epsilon"] = lines[3]["epsilon"] = 0.01
    prev = lines[2]["hash"]
    for rec in lines[3:]:
        rec["prev_hash"] = prev
        rec["hash"] = receipt_hash(rec)
        prev = rec["hash"]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    report = verify(path, [])
    assert not report.ok and "MAC does not verify" in report.problems[0]
    with pytest.raises(LedgerIntegrityError, match="line 4"):
        charge(Ledger(path), 0.2)


def test_a_wrong_key_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    charge(Ledger(path), 0.2)
    (tmp_path / "l.jsonl.key").write_text(chain.new_key().hex() + "\n")
    report = verify(path, [])
    assert not report.ok and "MAC" in report.problems[0]


def test_an_open_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    charge(Ledger(path), 0.2)
    os.chmod(tmp_path / "l.jsonl.key", 0o644)
    with pytest.raises(LedgerIntegrityError, match="chmod 600"):
        charge(Ledger(path), 0.2)


def _racer(path: str, barrier: mp.synchronize.Barrier, out: mp.Queue) -> None:  # type: ignore[name-defined]
    barrier.wait()
    try:
        charge(Ledger(Path(path)), 1.0, cap=3.0)
        out.put("ok")
    except BudgetExceededError:
        out.put("refused")
    except OutputError as exc:
        out.put(f"error: {exc}")


def _race(paths: list[Path]) -> list[str]:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(paths))
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(str(p), barrier, out)) for p in paths]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    return sorted(out.get(timeout=5) for _ in procs)


def test_concurrent_runs_through_a_symlink_never_overspend(tmp_path: Path) -> None:
    # issue 14: the lock was keyed by the path string; through a symlink two runs double-spent
    real = tmp_path / "real" / "l.jsonl"
    real.parent.mkdir()
    Ledger(real).init()
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    results = _race([real, link] * 4)
    assert results.count("ok") == 3 and results.count("refused") == 5, results
    assert len(releases(real)) == 3
    assert verify(link, []).ok


def test_a_hard_linked_ledger_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "l.jsonl"
    charge(Ledger(real), 1.0, cap=3.0)
    other = tmp_path / "other.jsonl"
    os.link(real, other)
    results = _race([real, other] * 4)
    assert all(r.startswith("error:") and "hard links" in r for r in results), results
    assert len(releases(real)) == 1
    os.unlink(other)
    charge(Ledger(real), 1.0, cap=3.0)


def test_a_symlink_repointed_while_waiting_for_the_lock_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    charge(Ledger(a), 1.0)
    charge(Ledger(b), 1.0, cap=5.0)
    link = tmp_path / "l.jsonl"
    link.symlink_to(a)
    ledger = Ledger(link)
    link.unlink()
    link.symlink_to(b)
    with pytest.raises(OutputError, match="re-pointed"):
        charge(ledger, 0.5, cap=5.0)
    assert len(releases(a)) == len(releases(b)) == 1


def test_a_record_kind_this_version_does_not_know_is_refused(tmp_path: Path) -> None:
    # a newer dpcausal may append records that change the totals: never skip them silently
    path = tmp_path / "l.jsonl"
    charge(Ledger(path), 0.2)
    with Ledger(path).store.transaction() as txn:
        txn.append([{"kind": "transfer", "dataset": "d", "to": "e"}])
    with pytest.raises(LedgerIntegrityError, match="unknown record kind 'transfer'"):
        charge(Ledger(path), 0.2)
    assert not verify(path, []).ok
