"""Issue 12: help that helps — a description on every spec field, ``--help`` without type
placeholders, a plan table that never cuts a stage name, summaries that say what they show."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import dpcausal as dpc
from cli_tests.helpers import invoke
from dpcausal.api.render import print_plan
from dpcausal.commands import COMMANDS


def _fields(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(dotted name, property) of every field of the schema and of its definitions."""
    out = [(name, prop) for name, prop in schema.get("properties", {}).items()]
    for model, definition in schema.get("$defs", {}).items():
        out += [(f"{model}.{name}", prop) for name, prop in definition.get("properties", {}).items()]
    return out


@pytest.mark.parametrize("command", sorted(c.name for c in COMMANDS))
def test_every_field_of_every_schema_has_a_description(command: str) -> None:
    res = invoke(["schema", command])
    assert res.exit_code == 0
    fields = _fields(json.loads(res.stdout))
    assert len(fields) > 40
    for name, prop in fields:
        text = prop.get("description", "")
        assert text, f"{command}: {name} has no description"
        words = re.findall(r"\w+", text)
        # a sentence, not the name again: at least six words beyond the field's own name
        assert len([w for w in words if w.lower() not in name.lower()]) >= 6, (name, text)
        assert "\n" not in text, name  # one line of prose in the schema


def test_the_schemas_hold_all_270_fields() -> None:
    total = sum(len(_fields(json.loads(invoke(["schema", c.name]).stdout)))
                for c in COMMANDS)
    assert total >= 270


HELP_COMMANDS = [[], ["owl"], ["select-policy"], ["synth-control"], ["cate"], ["two-stage"],
                 ["schema"], ["audit"], ["audit", "verify"], ["audit", "privacy"],
                 ["audit", "repair"], ["ledger"], ["ledger", "init"], ["ledger", "set-cap"]]


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=lambda c: " ".join(c) or "dpcausal")
def test_help_has_no_type_placeholders(command: list[str]) -> None:
    res = invoke([*command, "--help"], env={"COLUMNS": "120"})
    assert res.exit_code == 0
    assert "<bool>" not in res.stdout and "list[" not in res.stdout, res.stdout
    assert "--help" in res.stdout


def test_release_help_names_what_each_option_takes() -> None:
    out = invoke(["owl", "--help"], env={"COLUMNS": "120"}).stdout
    for option, metavar in (("--spec", "FILE"), ("--data", "FILE"), ("--out", "DIR"),
                            ("--seed", "N"), ("--apply", "RULE")):
        assert re.search(rf"{option}\s+{metavar}\b", out), (option, out)
    assert re.search(r"--json\s+Print one JSON", out)  # a flag: no placeholder at all


def _cate_plan() -> Any:
    repo = Path(__file__).resolve().parents[2]
    spec = dpc.load_spec(repo / "configs" / "cate.yaml")
    assert spec.data.path is not None
    return dpc.plan(spec, repo / spec.data.path)


def test_the_plan_prints_full_stage_names_in_logs(repo_root: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo_root)
    res = invoke(["cate", "--spec", "configs/cate.yaml", "--dry-run"])  # stdout is not a tty
    assert res.exit_code == 0
    assert "cate.second_stage.function" in res.stdout and "…" not in res.stdout  # was cut at 80


def test_the_plan_wraps_stage_names_on_a_narrow_terminal() -> None:
    console = Console(width=60, force_terminal=True, color_system=None, record=True)
    print_plan(_cate_plan(), console)
    text = console.export_text()
    assert "…" not in text
    folded = "".join(line.split("│")[1].strip() for line in text.splitlines()
                     if line.startswith("│"))
    assert "cate.second_stage.function" in folded


def test_select_policy_summary_names_the_sensitivity(repo_root: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo_root)
    res = invoke(["select-policy", "--spec", "configs/select_policy.yaml", "--out", tmp_path / "o",
                  "--ledger", tmp_path / "l.jsonl", "--json"])
    assert res.exit_code == 0
    summary = json.loads(res.stdout)["summary"]
    assert "delta" not in summary  # was the utility sensitivity Δ, printed next to the plan's δ
    receipt = json.loads(res.stdout)
    assert summary["utility_sensitivity"] == receipt["events"][0]["sensitivity"]


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["owl", "--help"]])
def test_help_and_version_load_no_command_and_no_numpy(args: list[str]) -> None:
    """The registry names each command's parts by import path: ``--help`` and ``--version`` import
    no command package, no method and none of numpy, pandas, scipy or pyarrow."""
    script = (
        "import sys\n"
        "from dpcausal.cli import app\n"
        f"try:\n    app({args!r})\nexcept SystemExit:\n    pass\n"
        "heavy = ('numpy', 'pandas', 'scipy', 'pyarrow')\n"
        "print([m for m in sys.modules if m.split('.')[0] in heavy\n"
        "       or m.startswith('dpcausal.commands.') or m == 'dpcausal.pipeline'])\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout[-2000:]


def test_field_descriptions_are_the_docstrings_pydantic_would_attach() -> None:
    """Issue 24: the descriptions are read when a schema is asked for, not when the models are
    built; they must be what ``use_attribute_docstrings`` gave (own docstring, the redeclaring
    class's, the alias as key, none for an undocumented field)."""
    from pydantic import BaseModel, ConfigDict, Field

    from dpcausal.spec.model import StrictModel

    class Base(StrictModel):
        a: int = 1
        """The first
        field, on two lines."""
        b: int = 2
        """Inherited unchanged."""

    class Child(Base):
        a: int = 3
        """Redeclared here."""
        c: int = Field(default=4, alias="lambda")
        """An aliased field."""
        d: int = 5

    class Reference(BaseModel):
        model_config = ConfigDict(use_attribute_docstrings=True)
        a: int = 3
        """Redeclared here."""
        b: int = 2
        """Inherited unchanged."""
        c: int = Field(default=4, alias="lambda")
        """An aliased field."""
        d: int = 5

    ours = Child.model_json_schema()["properties"]
    ref = Reference.model_json_schema()["properties"]
    assert {k: p.get("description") for k, p in ours.items()} == {
        k: p.get("description") for k, p in ref.items()}
    assert ours["a"]["description"] == "Redeclared here."
    assert "description" not in ours["d"]
    assert Base.model_json_schema()["properties"]["a"]["description"] == \
        "The first field, on two lines."


def test_building_and_loading_a_spec_reads_no_source() -> None:
    """Issue 24: loading a spec does not parse the spec modules' source for docstrings (it cost
    every run ~0.04 CPU-s); only a schema does."""
    script = ("from dpcausal.api.specs import load_spec\n"
              "from dpcausal.spec import model\n"
              "load_spec('configs/owl.yaml', 'owl')\n"
              "print(model._module_classes.cache_info().currsize)\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], check=True)
    assert res.stdout.split()[-1] == "0"
