"""Whole releases through the real CLI: a release is published with its receipt or not at all.

Issue 14 scenarios: kill -9 during and right after the ledger append and during publication (a
forked child running the CLI, killed with SIGKILL from outside at the named point); a full disk
(ENOSPC, injected deterministically into ``os.write`` for one file) under the output directory and
under the ledger; re-running into an existing directory. Each shows: no output without its receipt,
the previous release intact, and no refund of a published release.
"""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli_tests.helpers import invoke, read_json, releases, write_yaml

REPO = Path(__file__).resolve().parents[2]
OWL = ["owl", "--spec", "configs/owl.yaml", "--quiet"]
REAL_WRITE = os.write


def _state(workdir: Path) -> dict[str, Any]:
    """What a reader sees: the release at out/owl (files → bytes) and the ledger's releases."""
    out = workdir / "out" / "owl"
    files = {p.name: p.read_bytes() for p in out.iterdir()} if out.exists() else {}
    ledger = workdir / "out" / "ledger.jsonl"
    return {"files": files, "releases": releases(ledger) if ledger.exists() else []}


def _assert_whole(workdir: Path) -> None:
    """out/owl holds exactly one release: a receipt whose outputs are all there and match."""
    out = workdir / "out" / "owl"
    receipt = read_json(out / "receipt.json")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [o["path"] for o in receipt["outputs"]] + ["receipt.json"])
    res = invoke(["audit", "verify", "--ledger", "out/ledger.jsonl", "--receipt",
                  out / "receipt.json"])
    assert res.exit_code == 0, res.output


def _store(workdir: Path) -> list[str]:
    return sorted(os.listdir(workdir / "out" / ".owl.releases"))


def test_rerun_publishes_whole_and_keeps_the_previous_until_replaced(workdir: Path) -> None:
    assert invoke(OWL).exit_code == 0
    out = workdir / "out" / "owl"
    assert out.is_symlink()
    first = os.readlink(out)
    _assert_whole(workdir)
    assert invoke(OWL).exit_code == 0
    second = os.readlink(out)
    assert second != first and (out.parent / first).is_dir()  # previous kept one generation
    _assert_whole(workdir)
    assert invoke(OWL).exit_code == 0
    assert not (out.parent / first).exists() and (out.parent / second).is_dir()
    assert [r["ledger"]["spent_after"]["epsilon"] for r in releases(out.parent / "ledger.jsonl")] \
        == [5.0, 10.0, 15.0]


def test_an_old_output_directory_is_moved_aside_not_deleted(workdir: Path) -> None:
    old = workdir / "out" / "owl"
    old.mkdir()
    (old / "rule.json").write_text("{}")
    (old / "receipt.json").write_text(json.dumps({"outputs": [{"path": "rule.json"}]}))
    assert invoke(OWL).exit_code == 0
    _assert_whole(workdir)
    kept = [d for d in _store(workdir) if d.startswith("earlier-")]
    assert len(kept) == 1
    assert (workdir / "out" / ".owl.releases" / kept[0] / "rule.json").read_text() == "{}"


def test_foreign_files_in_the_output_directory_are_refused_before_spending(workdir: Path) -> None:
    (workdir / "out" / "owl").mkdir()
    (workdir / "out" / "owl" / "notes.txt").write_text("mine")
    res = invoke(OWL)
    assert res.exit_code == 5 and "not one dpcausal release" in res.stderr
    assert (workdir / "out" / "owl" / "notes.txt").read_text() == "mine"
    assert not (workdir / "out" / "ledger.jsonl").exists()


def test_created_at_is_the_runs_start(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dpcausal.pipeline as pipeline

    calls = iter(f"2001-01-01T00:00:0{i}+00:00" for i in range(10))
    monkeypatch.setattr(pipeline, "now_iso", lambda: next(calls))
    assert invoke(OWL).exit_code == 0
    assert read_json(workdir / "out" / "owl" / "receipt.json")["created_at"] == \
        "2001-01-01T00:00:00+00:00"


def test_a_spec_cannot_raise_the_cap_recorded_in_the_ledger(workdir: Path) -> None:
    doc = json.loads(json.dumps(__import__("yaml").safe_load(
        (workdir / "configs" / "owl.yaml").read_text())))
    doc["ledger"]["budget"] = {"epsilon": 10.0}
    write_yaml(workdir / "small.yaml", doc)
    doc["ledger"]["budget"] = {"epsilon": 1000.0}
    write_yaml(workdir / "large.yaml", doc)
    assert invoke(["owl", "--spec", "small.yaml", "-q"]).exit_code == 0
    plan = json.loads(invoke(["owl", "--spec", "large.yaml", "--dry-run", "--json"]).stdout)
    assert plan["ledger"]["cap"]["epsilon"] == 10.0 and plan["ledger"]["cap_source"] == "ledger"
    assert invoke(["owl", "--spec", "large.yaml", "-q"]).exit_code == 0
    res = invoke(["owl", "--spec", "large.yaml", "-q"])
    assert res.exit_code == 3 and "cap ε=10, δ=0 (recorded in the ledger)" in res.stderr
    assert len(releases(workdir / "out" / "ledger.jsonl")) == 2


@pytest.mark.parametrize("dry", [False, True])
def test_a_ledger_in_a_missing_directory_is_refused(workdir: Path, dry: bool) -> None:
    res = invoke([*OWL, "--ledger", "typo/ledger.jsonl", *(["--dry-run"] if dry else [])])
    assert res.exit_code == 5 and "does not exist" in res.stderr and "ledger init" in res.stderr
    assert not (workdir / "typo").exists() and not (workdir / "out" / "owl").exists()


# -- a full disk ----------------------------------------------------------------------------------


def _enospc(monkeypatch: pytest.MonkeyPatch, hit: Callable[[str], bool]) -> list[str]:
    """Make ``os.write`` to a file whose path satisfies ``hit`` write half, then fail ENOSPC."""
    real = REAL_WRITE
    partial: set[int] = set()
    hits: list[str] = []

    def write(fd: int, data: Any) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not hit(target):
            return real(fd, data)
        hits.append(target)
        if fd in partial or len(data) < 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        partial.add(fd)
        return real(fd, bytes(data)[: len(data) // 2])

    monkeypatch.setattr(os, "write", write)
    return hits


def test_a_full_disk_under_the_output_spends_nothing(workdir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert invoke(OWL).exit_code == 0
    before = _state(workdir)
    hits = _enospc(monkeypatch, lambda t: "/.staging-" in t and t.endswith("/rule.json"))
    res = invoke(OWL)
    assert hits and res.exit_code == 5, res.output
    assert "No space left" in res.stderr and "nothing was spent" in res.stderr
    assert _state(workdir) == before
    monkeypatch.setattr(os, "write", REAL_WRITE)  # the disk has room again
    assert not [d for d in _store(workdir) if d.startswith(".staging")]
    _assert_whole(workdir)


def test_a_full_disk_for_the_receipt_is_charged_not_published(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert invoke(OWL).exit_code == 0
    before = _state(workdir)
    hits = _enospc(monkeypatch, lambda t: "/.staging-" in t and t.endswith("/receipt.json"))
    res = invoke(OWL)
    assert hits and res.exit_code == 5, res.output
    assert "charged, not published" in res.stderr and "previous release" in res.stderr
    after = _state(workdir)
    assert after["files"] == before["files"]  # the previous release, untouched
    assert len(after["releases"]) == len(before["releases"]) + 1  # budget wasted, not refunded
    monkeypatch.setattr(os, "write", REAL_WRITE)  # the disk has room again
    _assert_whole(workdir)


@pytest.mark.parametrize("first_run", [False, True])
def test_a_full_disk_under_the_ledger_is_rolled_back(workdir: Path, first_run: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if not first_run:
        assert invoke(OWL).exit_code == 0
    ledger = workdir / "out" / "ledger.jsonl"
    before = {p.name: p.read_bytes() for p in (workdir / "out").glob("ledger.jsonl*")
              if p.suffix != ".lock"}
    files_before = _state(workdir)["files"]
    hits = _enospc(monkeypatch, lambda t: t == str(ledger))
    res = invoke(OWL)
    assert hits and res.exit_code == 5, res.output
    assert "partial line was removed: nothing was spent" in res.stderr
    assert {p.name: p.read_bytes() for p in (workdir / "out").glob("ledger.jsonl*")
            if p.suffix != ".lock"} == before
    assert _state(workdir)["files"] == files_before
    monkeypatch.setattr(os, "write", REAL_WRITE)  # the disk has room again
    assert invoke(OWL).exit_code == 0  # no torn line left for later runs to blame
    _assert_whole(workdir)


def test_a_full_disk_for_the_head_record_is_rolled_back(workdir: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert invoke(OWL).exit_code == 0
    before = _state(workdir)
    size = (workdir / "out" / "ledger.jsonl").stat().st_size
    hits = _enospc(monkeypatch, lambda t: "/.ledger.jsonl.head." in t)
    res = invoke(OWL)
    assert hits and res.exit_code == 5 and "nothing was spent" in res.stderr
    assert _state(workdir) == before and (workdir / "out" / "ledger.jsonl").stat().st_size == size
    monkeypatch.setattr(os, "write", REAL_WRITE)  # the disk has room again
    assert invoke(["audit", "verify", "--ledger", "out/ledger.jsonl"]).exit_code == 0


# -- kill -9 --------------------------------------------------------------------------------------


Hook = Callable[[Callable[..., Any], Callable[[], None]], Callable[..., Any]]


def _after(real: Callable[..., Any], stop: Callable[[], None]) -> Callable[..., Any]:
    return lambda *args, **kwargs: (real(*args, **kwargs), stop())


def _before(real: Callable[..., Any], stop: Callable[[], None]) -> Callable[..., Any]:
    return lambda *args, **kwargs: stop()


def _killed_at(obj: Any, name: str, hook: Hook) -> None:
    """Run the CLI in a forked child; kill -9 it from here when it reaches ``hook``'s stop."""
    ctx = mp.get_context("fork")
    reached = ctx.Event()

    def child() -> None:
        def stop() -> None:
            reached.set()
            time.sleep(120)

        setattr(obj, name, hook(getattr(obj, name), stop))
        invoke(OWL)
        os._exit(3)

    proc = ctx.Process(target=child)
    proc.start()
    try:
        assert reached.wait(120), "the child never reached the kill point"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
    assert proc.exitcode == -signal.SIGKILL


def test_kill_right_after_the_append_wastes_budget_and_publishes_nothing(workdir: Path) -> None:
    from dpcausal.accounting.ledger import Ledger

    assert invoke(OWL).exit_code == 0
    before = _state(workdir)
    _killed_at(Ledger, "charge", _after)
    after = _state(workdir)
    assert after["files"] == before["files"]  # the previous release, whole
    assert len(after["releases"]) == len(before["releases"]) + 1  # charged, not refunded
    _assert_whole(workdir)
    assert any(d.startswith(".staging-") for d in _store(workdir))  # private, unpublished
    assert invoke(OWL).exit_code == 0
    assert not any(d.startswith(".staging-") for d in _store(workdir))  # the next run cleans up
    _assert_whole(workdir)


def test_kill_on_the_first_run_after_the_append_leaves_no_output(workdir: Path) -> None:
    from dpcausal.accounting.ledger import Ledger

    _killed_at(Ledger, "charge", _after)
    assert not (workdir / "out" / "owl").exists()
    assert len(releases(workdir / "out" / "ledger.jsonl")) == 1
    assert invoke(["audit", "verify", "--ledger", "out/ledger.jsonl"]).exit_code == 0


def test_kill_before_the_head_moves_counts_the_line_as_spent(workdir: Path) -> None:
    from dpcausal.accounting.ledger_file import FileStore

    assert invoke(OWL).exit_code == 0
    before = _state(workdir)
    _killed_at(FileStore, "_write_head", _before)
    res = invoke(["audit", "verify", "--ledger", "out/ledger.jsonl"])
    assert res.exit_code == 0 and "after the head record" in res.stdout
    assert len(_state(workdir)["releases"]) == len(before["releases"]) + 1
    assert _state(workdir)["files"] == before["files"]
    assert invoke(OWL).exit_code == 0
    assert json.loads((workdir / "out" / "ledger.jsonl.head").read_text())["count"] == 2 + 3


def test_kill_mid_append_leaves_a_repairable_line_and_no_output(workdir: Path) -> None:
    from dpcausal.accounting import ledger_file

    assert invoke(OWL).exit_code == 0
    before = _state(workdir)
    committed = (workdir / "out" / "ledger.jsonl").read_bytes()

    def half(real: Callable[..., Any], stop: Callable[[], None]) -> Callable[..., Any]:
        def write_half(fd: int, data: bytes) -> None:  # the first write of the append: the line
            real(fd, data[: len(data) // 2])
            os.fsync(fd)
            stop()

        return write_half

    _killed_at(ledger_file, "write_all", half)
    res = invoke(OWL)
    assert res.exit_code == 5 and "audit repair" in res.stderr
    assert invoke(["audit", "repair", "--ledger", "out/ledger.jsonl"]).exit_code == 0
    assert (workdir / "out" / "ledger.jsonl").read_bytes() == committed
    assert _state(workdir) == before
    _assert_whole(workdir)


def test_kill_mid_publication_keeps_the_previous_release(workdir: Path) -> None:
    from dpcausal.io.release_dir import Staged

    assert invoke(OWL).exit_code == 0
    before = _state(workdir)
    _killed_at(Staged, "_swap", _before)
    assert _state(workdir)["files"] == before["files"]
    assert len(_state(workdir)["releases"]) == len(before["releases"]) + 1
    _assert_whole(workdir)
    assert invoke(OWL).exit_code == 0
    assert len(_store(workdir)) == 3  # .lock, the previous and the current version
    _assert_whole(workdir)


def test_dead_runs_leftovers_are_removed_and_live_ones_kept(workdir: Path) -> None:
    assert invoke(OWL).exit_code == 0
    out = workdir / "out"
    dead_link, live_link = out / ".owl.link-999999999-ab", out / f".owl.link-{os.getpid()}-cd"
    dead_stage = out / ".owl.releases" / ".staging-999999999-x"
    live_stage = out / ".owl.releases" / f".staging-{os.getpid()}-y"
    for link in (dead_link, live_link):
        link.symlink_to(".owl.releases/none")
    for stage in (dead_stage, live_stage):
        stage.mkdir()
    assert invoke(OWL).exit_code == 0
    assert not dead_link.is_symlink() and not dead_stage.exists()
    assert live_link.is_symlink() and live_stage.is_dir()
