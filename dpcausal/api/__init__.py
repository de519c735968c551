"""The Python API: plan and release from notebooks and pipelines (``import dpcausal as dpc``).

The command line is a thin layer over it: ``dpcausal <command>`` calls :func:`release` (or
:func:`plan` for ``--dry-run``), ``dpcausal audit`` calls :func:`verify`, :func:`audit_privacy`
and :func:`ledger.repair`, ``dpcausal ledger`` the functions of :mod:`dpcausal.api.ledger`; so
both refuse exactly the same things, charge the same ledger and write the same receipts and
lines. ``dpcausal/__init__.py`` exposes these names lazily, and so does this package: each
name's module is imported on first use, so a dry run (``plan``) never loads what ``verify``,
``audit_privacy`` or ``apply_rule`` need (issue 24: start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpcausal.api import ledger
    from dpcausal.api.audit import audit_privacy, verify
    from dpcausal.api.results import Plan, Release
    from dpcausal.api.rules import apply_rule
    from dpcausal.api.run import plan, release
    from dpcausal.api.specs import (
        CommandName,
        build_spec,
        command_of,
        load_spec,
        schema,
        spec_sha256,
    )

_WHERE = {"audit_privacy": "audit", "verify": "audit", "Plan": "results", "Release": "results",
          "apply_rule": "rules", "plan": "run", "release": "run", "CommandName": "specs",
          "build_spec": "specs", "command_of": "specs", "load_spec": "specs", "schema": "specs",
          "spec_sha256": "specs"}
"""Name → the submodule of :mod:`dpcausal.api` that defines it (``ledger`` is a submodule)."""

__all__ = ["CommandName", "Plan", "Release", "apply_rule", "audit_privacy", "build_spec",
           "command_of", "ledger", "load_spec", "plan", "release", "schema", "spec_sha256",
           "verify"]


def __getattr__(name: str) -> Any:
    """Import a name's submodule when the name is first used (PEP 562)."""
    if name == "ledger":
        value: Any = importlib.import_module("dpcausal.api.ledger")
    elif name in _WHERE:
        value = getattr(importlib.import_module(f"dpcausal.api.{_WHERE[name]}"), name)
    else:
        raise AttributeError(f"module 'dpcausal.api' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
