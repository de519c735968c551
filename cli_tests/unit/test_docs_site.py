"""Issue 21: the documentation site's generated parts (docs/_hooks/), checked without MkDocs so
the default suite catches a renamed README heading or an undocumented spec field; CI also runs
``mkdocs build --strict``."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import dpcausal as dpc

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _hook_module(name: str) -> Any:
    """A module of docs/_hooks, imported as MkDocs does (its folder first on sys.path)."""
    sys.path.insert(0, str(DOCS / "_hooks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(DOCS / "_hooks"))


hook = _hook_module("dpcausal_docs")
field_tables = _hook_module("spec_fields").field_tables

COMMANDS = ["owl", "select-policy", "synth-control", "cate", "two-stage"]


def pages() -> dict[str, str]:
    return {p.relative_to(DOCS).as_posix(): p.read_text(encoding="utf-8")
            for p in DOCS.rglob("*.md")}


def test_every_part_of_every_page_is_generated_and_every_readme_link_lands() -> None:
    found = pages()
    anchors = hook.anchors_of(found)
    for link in re.findall(r"\]\(#([^)]+)\)", (REPO / "README.md").read_text()):
        assert link in anchors, f"README link #{link}: no page includes its section"
    for page, text in found.items():
        out = hook.expand(text, page, anchors)
        assert "<!-- dpcausal:" not in out, page
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", out):
            if not re.match(r"[a-z]+:", target):  # a page or picture of the site
                assert (DOCS / Path(page).parent / target).resolve().is_file(), (page, target)


def test_a_missing_readme_heading_or_an_unknown_part_fails_the_build() -> None:
    with pytest.raises(hook.DocsError, match="no heading"):
        hook.expand("<!-- dpcausal:readme No such section -->", "x.md", {})
    with pytest.raises(hook.DocsError, match="unknown part"):
        hook.expand("<!-- dpcausal:nonsense -->", "x.md", {})


def test_each_command_has_a_page_with_its_fields_plan_and_proof() -> None:
    for command in COMMANDS:
        text = (DOCS / "commands" / f"{command}.md").read_text()
        assert f"<!-- dpcausal:fields {command} -->" in text
        assert "<!-- dpcausal:plan " in text and "](../proofs/" in text


def _properties(node: dict[str, Any], defs: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for name, sub in node.get("properties", {}).items():
        out.append(prefix + name)
        refs = [sub.get("$ref")] + [n.get("$ref") for n in sub.get("anyOf", [])]
        for ref in filter(None, refs):
            out += _properties(defs[ref.rsplit("/", 1)[-1]], defs, f"{prefix}{name}.")
    return out


@pytest.mark.parametrize("command", COMMANDS)
def test_the_field_tables_list_every_field_of_the_schema_with_its_description(
        command: str) -> None:
    schema = dpc.schema(command)
    tables = field_tables(schema)
    rows = dict(re.findall(r"^\| `([^`]+)` \| .*? \| .*? \| (.*) \|$", tables, re.M))
    sections = set(schema["properties"])
    expected = [p for p in _properties(schema, schema.get("$defs", {}), "")
                if p not in sections]
    assert sorted(rows) == sorted(expected)
    assert all(text.strip() for text in rows.values())


def test_docstring_roles_are_shown_as_code() -> None:
    html = ("with :attr:<code>Plan.refusal</code> set, :class:<code>~dpcausal.PrivacyError</code>"
            " and <code>:x:</code>")
    assert hook.sphinx_roles(html) == ("with <code>Plan.refusal</code> set, "
                                       "<code>PrivacyError</code> and <code>:x:</code>")
