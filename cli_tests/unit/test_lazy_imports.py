"""Issue 24: pandas, pyarrow and scipy are imported inside the functions that use them (the plan
path must not load them), with the module-level import kept under ``TYPE_CHECKING`` for
annotations. A function that uses such a name at run time without importing it fails only when it
runs (a NameError after the rows are read); this static check finds it at once."""

from __future__ import annotations

import ast
from pathlib import Path

from cli_tests.helpers import REPO


def _type_checking_only(tree: ast.Module) -> set[str]:
    """Names imported only under a module-level ``if TYPE_CHECKING:``."""
    checking: set[str] = set()
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            for sub in node.body:
                if isinstance(sub, ast.Import | ast.ImportFrom):
                    checking.update(a.asname or a.name.split(".")[0] for a in sub.names)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            top.update(a.asname or a.name.split(".")[0] for a in node.names)
    return checking - top


def _bound_in(fn: ast.AST) -> set[str]:
    """Names a function binds itself: local imports and assignments."""
    names: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


class _RuntimeUses(ast.NodeVisitor):
    """Loads of ``names`` outside annotations."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.found: list[tuple[int, str]] = []

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.names and isinstance(node.ctx, ast.Load):
            self.found.append((node.lineno, node.id))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:  # a local annotation is not evaluated
        if node.value is not None:
            self.visit(node.value)

    def visit_arg(self, node: ast.arg) -> None:
        return

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for stmt in node.body:
            self.visit(stmt)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)


def test_type_checking_only_names_are_imported_where_used() -> None:
    problems = []
    for path in sorted((REPO / "dpcausal").rglob("*.py")):
        tree = ast.parse(path.read_text())
        lazy = _type_checking_only(tree)
        if not lazy:
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            uses = _RuntimeUses(lazy - _bound_in(fn))
            for stmt in fn.body:
                uses.visit(stmt)
            problems += [f"{Path(path).relative_to(REPO)}:{line} uses {name} in {fn.name}() "
                         "without importing it" for line, name in uses.found]
    assert not problems, "\n".join(sorted(set(problems)))
