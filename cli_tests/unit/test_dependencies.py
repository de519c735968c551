"""Every module the package and its tests import is declared in pyproject.toml (issue 12).

A test that imports a module no dependency declares passes on a machine that happens to have it and
stops at collection on a fresh one. The walk below reads every ``import`` of ``dpcausal/`` and
``cli_tests/`` (the README runs no benchmark) with ``ast``, maps each top-level module to the
distributions installing it, and requires one of them to be declared: for the package itself in
``[project] dependencies`` or a runtime extra (never only in ``test``, which users do not install),
for the tests in any of them.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_EXTRAS = frozenset({"test"})
"""Extras that only the tests and CI install: the package may not need them at run time."""


def normalize(name: str) -> str:
    """A distribution name in PEP 503 form (``PyYAML`` → ``pyyaml``, ``scikit_learn`` →
    ``scikit-learn``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The distribution a PEP 508 requirement names (``dask[dataframe]>=2024.1`` → ``dask``)."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert found, f"cannot parse the requirement {requirement!r}"
    return normalize(found.group(1))


def declared(pyproject: Mapping[str, object], *, runtime_only: bool) -> set[str]:
    """Normalized names of the distributions declared in ``dependencies`` and the extras (without
    the test-only extras when ``runtime_only``)."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    names = {requirement_name(r) for r in project.get("dependencies", [])}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        if runtime_only and extra in TEST_EXTRAS:
            continue
        names |= {requirement_name(r) for r in requirements}
    return names


def imported_modules(files: Iterable[Path]) -> dict[str, set[Path]]:
    """Top-level module → the files importing it, for every absolute import (including those
    inside functions and ``TYPE_CHECKING`` blocks)."""
    found: dict[str, set[Path]] = {}
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], set()).add(path)
    return found


def own_modules(root: Path) -> set[str]:
    """The project's own top-level packages and modules (not provided by any dependency)."""
    return {p.parent.name for p in root.glob("*/__init__.py")} | {p.stem for p in root.glob("*.py")}


def undeclared(
    modules: Mapping[str, set[Path]],
    declared_names: set[str],
    providers: Mapping[str, list[str]],
    own: set[str],
) -> dict[str, str]:
    """Module → why it is not covered: neither stdlib, nor the project's own, nor installed by a
    declared distribution."""
    problems: dict[str, str] = {}
    for module, files in sorted(modules.items()):
        if module in sys.stdlib_module_names or module in own:
            continue
        dists = {normalize(d) for d in providers.get(module, [])}
        if dists & declared_names:
            continue
        where = ", ".join(sorted(str(f.relative_to(ROOT)) for f in files)[:3])
        problems[module] = (
            f"imported by {where}; installed by {sorted(dists)} but none is declared"
            if dists else f"imported by {where}; not installed, and no declared dependency has it"
        )
    return problems


def _python_files(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_package_imports_only_runtime_dependencies() -> None:
    problems = undeclared(imported_modules(_python_files("dpcausal")),
                          declared(_pyproject(), runtime_only=True),
                          packages_distributions(), own_modules(ROOT))
    assert not problems, ("dpcausal/ imports modules that `pip install dpcausal` (or a runtime "
                          f"extra) does not bring: {problems}")


def test_the_tests_import_only_declared_dependencies() -> None:
    problems = undeclared(imported_modules(_python_files("dpcausal", "cli_tests")),
                          declared(_pyproject(), runtime_only=False),
                          packages_distributions(), own_modules(ROOT))
    assert not problems, f"add these to an extra in pyproject.toml: {problems}"


def test_a_removed_declaration_is_caught() -> None:
    # the check itself can fail: drop mpmath (imported by the two-stage certificate test) and
    # scikit-learn (imported as `sklearn`, a different name) from a copy of the declarations
    modules = imported_modules(_python_files("cli_tests"))
    names = declared(_pyproject(), runtime_only=False) - {"mpmath", "scikit-learn"}
    problems = undeclared(modules, names, packages_distributions(), own_modules(ROOT))
    assert set(problems) == {"mpmath", "sklearn"}
    assert "mpmath" in problems["mpmath"]
    # a module nothing installs is reported too, and the project's own packages never are
    fake = {"not_a_real_module_xyz": {ROOT / "cli_tests" / "__init__.py"},
            "dpcausal": {ROOT / "cli_tests" / "__init__.py"}}
    assert set(undeclared(fake, names, packages_distributions(), own_modules(ROOT))) == {
        "not_a_real_module_xyz"}
