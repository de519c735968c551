"""The privacy proofs in docs/proofs/ cite code that exists (issue 23).

Every proof names the code implementing each step as ```path/to/module.py::qualified.name``` (a
function, class, method, property or module constant) or a bare ```path/to/module.py```, for
``dpcausal/``, ``cli_tests/`` and ``benchmarks/``. These tests parse every such reference with
``ast`` (nothing is imported) and fail when the file or the name is gone, so a restructure that
moves or renames code cannot leave a proof silently pointing at nothing. They also require one
proof per command and that the proofs' links to each other resolve.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROOFS = ROOT / "docs" / "proofs"
REQUIRED = (
    "index.md", "composition.md", "mechanisms.md", "select_policy.md", "cate.md",
    "synth_control.md", "owl.md", "two_stage.md", "two_stage_weights.md",
)
"""One proof per command (select-policy, cate, synth-control, owl, two-stage), the building blocks,
the two-stage stage-1 appendix and the index."""
MIN_REFERENCES = 10
"""Every proof except the index names at least this many pieces of code."""
CODE_REF = re.compile(r"`((?:dpcausal|cli_tests|benchmarks)/[\w/]+\.py)(?:::([A-Za-z_][\w.]*))?`")
ANY_PY_REF = re.compile(r"`([^`\s]*\.py(?:::[^`]*)?)`")
MD_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def proof_files() -> list[Path]:
    return sorted(PROOFS.glob("*.md"))


def references() -> list[tuple[str, str, str | None]]:
    """(proof file name, code path, qualified name or None) for every code reference."""
    out = []
    for doc in proof_files():
        for m in CODE_REF.finditer(doc.read_text(encoding="utf-8")):
            out.append((doc.name, m.group(1), m.group(2)))
    return out


def _defined(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """Names a module or class body defines: functions, classes, (annotated) assignments."""
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


@cache
def _module_body(path: str) -> list[ast.stmt]:
    return ast.parse((ROOT / path).read_text(encoding="utf-8"), filename=path).body


def resolves(path: str, qualname: str | None) -> bool:
    """Whether ``path`` exists and defines ``qualname`` (``Class.attribute`` descends into classes)."""
    if not (ROOT / path).is_file():
        return False
    if qualname is None:
        return True
    body = _module_body(path)
    for part in qualname.split("."):
        node = _defined(body).get(part)
        if node is None:
            return False
        body = node.body if isinstance(node, ast.ClassDef) else []
    return True


def test_every_command_has_a_proof() -> None:
    present = {p.name for p in proof_files()}
    assert set(REQUIRED) <= present, f"missing proofs: {sorted(set(REQUIRED) - present)}"


def test_the_resolver_can_fail() -> None:
    assert resolves("dpcausal/mechanisms/laplace.py", "LaplaceMechanism.scale")
    assert resolves("dpcausal/numerics.py", "SUM_CHUNK")
    assert not resolves("dpcausal/mechanisms/laplace.py", "LaplaceMechanism.no_such_method")
    assert not resolves("dpcausal/mechanisms/laplace.py", "no_such_function")
    assert not resolves("dpcausal/no_such_module.py", None)


def test_every_code_reference_exists() -> None:
    missing = sorted({f"docs/proofs/{doc}: `{path}::{qualname}`" if qualname
                      else f"docs/proofs/{doc}: `{path}`"
                      for doc, path, qualname in references() if not resolves(path, qualname)})
    assert not missing, (
        "the proofs cite code that does not exist; update each to the code's current module and "
        "name (and re-check the argument it supports):\n" + "\n".join(missing))


@pytest.mark.parametrize("doc", proof_files(), ids=lambda p: p.name)
def test_code_references_use_the_checked_form(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    loose = [m.group(1) for m in ANY_PY_REF.finditer(text)
             if not CODE_REF.fullmatch(f"`{m.group(1)}`")]
    assert not loose, (f"docs/proofs/{doc.name}: write code references as "
                       f"`dpcausal/path/module.py::name` so they are checked: {loose}")


@pytest.mark.parametrize("doc", [p for p in proof_files() if p.name != "index.md"],
                         ids=lambda p: p.name)
def test_every_proof_cites_its_code(doc: Path) -> None:
    count = sum(1 for d, _, _ in references() if d == doc.name)
    assert count >= MIN_REFERENCES, f"docs/proofs/{doc.name} cites only {count} pieces of code"


@pytest.mark.parametrize("doc", proof_files(), ids=lambda p: p.name)
def test_links_between_proofs_resolve(doc: Path) -> None:
    broken = [link for link in MD_LINK.findall(doc.read_text(encoding="utf-8"))
              if not (doc.parent / link).is_file()]
    assert not broken, f"docs/proofs/{doc.name} links to missing files: {broken}"
