"""Damage and tampering that used to refund budget silently (issue 14) are now caught.

Each scenario damages a ledger of committed releases, then shows that no refund is accepted: a
charge is refused with nothing written, ``audit verify`` exits 4 and ``audit repair`` exits 4
changing nothing. Only an incomplete final line that the head record proves was never committed is
repairable.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_tests.helpers import charge, invoke, ledger_lines, releases
from dpcausal.accounting.budget import Budget
from dpcausal.accounting.ledger import Ledger
from dpcausal.accounting.receipt import GENESIS_HASH, finalize, receipt_hash
from dpcausal.audit.verify import verify
from dpcausal.errors import LedgerIntegrityError, OutputError


def _ledger(tmp_path: Path, n: int = 4) -> Path:
    path = tmp_path / "l.jsonl"
    for _ in range(n):
        charge(Ledger(path), 1.0, cap=4.0)  # the cap is exhausted: any refund would show
    return path


def _line_starts(path: Path) -> list[int]:
    raw = path.read_bytes()
    return [0, *[i + 1 for i, b in enumerate(raw) if b == ord("\n")][:-1]]


def _truncate(path: Path, size: int) -> None:
    with path.open("r+b") as fh:
        fh.truncate(size)


def _rechain(lines: list[dict]) -> str:
    """Re-chain ``lines`` as a forger without the key can: seq, prev_hash and hash recomputed."""
    prev = GENESIS_HASH
    for i, rec in enumerate(lines, start=1):
        rec["seq"], rec["prev_hash"] = i, prev
        rec["hash"] = receipt_hash(rec)
        prev = rec["hash"]
    return "".join(json.dumps(r) + "\n" for r in lines)


def _mid_last_line(p: Path) -> None:
    _truncate(p, p.stat().st_size - 40)


def _mid_middle_line(p: Path) -> None:
    _truncate(p, _line_starts(p)[3] + 25)


def _newline_only(p: Path) -> None:
    _truncate(p, p.stat().st_size - 1)


def _line_boundary(p: Path) -> None:
    _truncate(p, _line_starts(p)[4])


def _delete_last_line(p: Path) -> None:
    p.write_text("".join(x + "\n" for x in p.read_text().splitlines()[:-1]))


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _delete_file(p: Path) -> None:
    p.unlink()


def _drop_middle_rechained(p: Path) -> None:
    lines = ledger_lines(p)
    del lines[3]
    p.write_text(_rechain(lines))


def _drop_middle_rechained_and_head(p: Path) -> None:
    _drop_middle_rechained(p)
    head = json.loads(p.with_name("l.jsonl.head").read_text())
    lines = ledger_lines(p)
    head.update(count=len(lines), last_hash=lines[-1]["hash"], size=p.stat().st_size)
    p.with_name("l.jsonl.head").write_text(json.dumps(head))


def _reorder(p: Path) -> None:
    lines = p.read_text().splitlines()
    lines[3], lines[4] = lines[4], lines[3]
    p.write_text("".join(x + "\n" for x in lines))


def _reorder_rechained(p: Path) -> None:
    lines = ledger_lines(p)
    lines[3], lines[4] = lines[4], lines[3]
    p.write_text(_rechain(lines))


def _delete_head(p: Path) -> None:
    p.with_name("l.jsonl.head").unlink()


def _delete_key(p: Path) -> None:
    p.with_name("l.jsonl.key").unlink()


def _head_count_lowered(p: Path) -> None:
    head_path = p.with_name("l.jsonl.head")
    head = json.loads(head_path.read_text())
    head["count"] -= 1
    head_path.write_text(json.dumps(head))
    _delete_last_line(p)


def _replace_with_fresh_unkeyed(p: Path) -> None:
    p.write_text(json.dumps(finalize({"events": [], "ledger": {"dataset": "d"}},
                                     GENESIS_HASH)) + "\n")


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated mid last line (byte)": _mid_last_line,
    "truncated mid middle line (byte)": _mid_middle_line,
    "only the final newline cut": _newline_only,
    "truncated at a line boundary": _line_boundary,
    "deleted last line": _delete_last_line,
    "emptied file": _empty,
    "deleted file (key and head kept)": _delete_file,
    "middle line dropped, re-chained without the key": _drop_middle_rechained,
    "middle line dropped, re-chained, head rewritten": _drop_middle_rechained_and_head,
    "two lines swapped": _reorder,
    "two lines swapped and re-chained": _reorder_rechained,
    "head record deleted": _delete_head,
    "key deleted": _delete_key,
    "head count lowered with the last line": _head_count_lowered,
    "replaced by an unkeyed file": _replace_with_fresh_unkeyed,
}


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_damage_never_refunds_budget(tmp_path: Path, damage: str) -> None:
    path = _ledger(tmp_path)
    DAMAGE[damage](path)
    before = path.read_bytes() if path.exists() else None
    with pytest.raises(LedgerIntegrityError):
        charge(Ledger(path), 1.0, cap=4.0)
    with pytest.raises(LedgerIntegrityError):
        Ledger(path).state("d", Budget(1.0), Budget(4.0))  # the plan check (dry runs) too
    res = invoke(["audit", "verify", "--ledger", path])
    assert res.exit_code == 4, res.output
    res = invoke(["audit", "repair", "--ledger", path])
    assert res.exit_code == 4, res.output
    assert (path.read_bytes() if path.exists() else None) == before
    assert not list(tmp_path.glob("l.jsonl.torn-*"))


def test_an_uncommitted_torn_line_is_repairable_and_refunds_nothing(tmp_path: Path) -> None:
    # a run killed while appending: its bytes are after the head's last committed line
    path = _ledger(tmp_path, 3)
    committed = path.read_bytes()
    with path.open("ab") as fh:
        fh.write(b'{"torn": tr')
    with pytest.raises(LedgerIntegrityError, match=r"never committed.*audit repair"):
        charge(Ledger(path), 1.0, cap=4.0)
    res = invoke(["audit", "verify", "--ledger", path])
    assert res.exit_code == 4 and "audit repair" in res.stderr
    res = invoke(["audit", "repair", "--ledger", path])
    assert res.exit_code == 0 and "never committed" in res.stdout
    assert path.read_bytes() == committed
    assert [p.read_bytes() for p in tmp_path.glob("l.jsonl.torn-*")] == [b'{"torn": tr']
    assert invoke(["audit", "verify", "--ledger", path]).exit_code == 0
    charge(Ledger(path), 1.0, cap=4.0)
    with pytest.raises(Exception, match="exceeded"):
        charge(Ledger(path), 1.0, cap=4.0)
    assert invoke(["audit", "repair", "--ledger", path]).stdout.count("nothing to repair") == 1


def test_a_complete_line_after_the_head_counts_as_spent(tmp_path: Path) -> None:
    # a run killed after writing its line, before moving the head: charged, never published
    path = _ledger(tmp_path, 2)
    head = tmp_path / "l.jsonl.head"
    old_head = head.read_bytes()
    charge(Ledger(path), 1.0, cap=4.0)
    head.write_bytes(old_head)
    report = verify(path, [])
    assert report.ok and "after the head record" in report.notes[0]
    assert report.totals["d"]["epsilon"] == 3.0
    charge(Ledger(path), 1.0, cap=4.0)
    with pytest.raises(Exception, match="exceeded"):
        charge(Ledger(path), 1.0, cap=4.0)
    assert json.loads(head.read_text())["count"] == 2 + 4  # init, cap, 4 releases


def test_a_kept_receipt_reveals_a_rollback(tmp_path: Path) -> None:
    # a rollback of ledger and head together to an older copy verifies alone; receipts catch it
    path = _ledger(tmp_path, 2)
    backup = tmp_path / "backup"
    backup.mkdir()
    for name in ("l.jsonl", "l.jsonl.head"):
        shutil.copy(tmp_path / name, backup / name)
    rec = charge(Ledger(path), 1.0, cap=4.0)
    (tmp_path / "receipt.json").write_text(json.dumps(rec))
    for name in ("l.jsonl", "l.jsonl.head"):
        shutil.copy(backup / name, tmp_path / name)
    assert verify(path, []).ok
    report = verify(path, [tmp_path / "receipt.json"])
    assert not report.ok and "charged at line 5 but the ledger has 4 lines" in report.problems[0]


def test_a_receipt_of_another_ledger_is_caught(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 1)
    other = tmp_path / "o" / "l.jsonl"
    other.parent.mkdir()
    rec = charge(Ledger(other), 1.0)
    (tmp_path / "receipt.json").write_text(json.dumps(rec))
    report = verify(path, [tmp_path / "receipt.json"])
    assert not report.ok and "charged to ledger" in report.problems[0]


def _legacy_ledger(path: Path, n: int) -> None:
    """A ledger as dpcausal 0.1 wrote it: an unkeyed SHA-256 chain of receipts."""
    prev, lines, spent = GENESIS_HASH, [], 0.0
    for cap in [3.0] + [10.0] * (n - 1):
        rec = finalize({"command": "test", "epsilon": 1.0, "delta": 0.0,
                        "events": [{"epsilon": 1.0, "delta": 0.0}],
                        "ledger": {"dataset": "d", "spent_before": {"epsilon": spent, "delta": 0.0},
                                   "spent_after": {"epsilon": spent + 1, "delta": 0.0},
                                   "cap": {"epsilon": cap, "delta": 0.0}}}, prev)
        lines.append(json.dumps(rec, sort_keys=True) + "\n")
        prev, spent = rec["hash"], spent + 1
    path.write_text("".join(lines))


def test_a_legacy_ledger_is_adopted_with_its_first_caps(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    _legacy_ledger(path, 2)
    with pytest.raises(OutputError, match="ledger init --adopt"):
        charge(Ledger(path), 1.0, cap=10.0)
    report = verify(path, [])
    assert report.ok and "unkeyed" in report.notes[0]
    res = invoke(["ledger", "init", "--adopt", "--ledger", path])
    assert res.exit_code == 0, res.output
    assert "dataset 'd' cap ε=3" in res.stdout
    lines = ledger_lines(path)
    assert lines[2]["kind"] == "ledger-adopt"
    assert lines[2]["adopted"] == {"lines": 2, "last_hash": lines[1]["hash"]}
    charge(Ledger(path), 1.0, cap=10.0)  # the first cap (3) governs, not the later spec's 10
    with pytest.raises(Exception, match="exceeded"):
        charge(Ledger(path), 1.0, cap=10.0)
    assert verify(path, []).ok and len(releases(path)) == 3
    assert invoke(["ledger", "init", "--adopt", "--ledger", path]).exit_code == 5
    # after adoption the legacy lines are pinned by the keyed adopt line
    legacy = ledger_lines(path)
    legacy[0]["events"][0]["epsilon"] = legacy[0]["epsilon"] = 0.0
    legacy[0]["hash"] = receipt_hash(legacy[0])
    legacy[1]["prev_hash"] = legacy[0]["hash"]
    legacy[1]["hash"] = receipt_hash(legacy[1])
    path.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    assert invoke(["audit", "verify", "--ledger", path]).exit_code == 4
