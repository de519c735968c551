"""Every shipped example spec can be run as .ci/run runs it (with --ledger out/ledger.jsonl): each
names the command it is for and carries its own ledger section (dataset and cap)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dpcausal.commands import COMMANDS

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
COMMAND_SECTIONS = {c.section for c in COMMANDS}


def _is_spec(doc: object) -> bool:
    return isinstance(doc, dict) and bool(COMMAND_SECTIONS & set(doc))


@pytest.mark.parametrize("path", [p for p in CONFIGS if _is_spec(yaml.safe_load(p.read_text()))],
                         ids=lambda p: p.name)
def test_example_spec_has_a_ledger_section(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    ledger = doc.get("ledger")
    assert isinstance(ledger, dict), f"{path.name}: add a ledger section (.ci/run passes --ledger)"
    assert ledger.get("dataset") and ledger.get("budget"), path.name
