"""dpcausal: differentially private causal inference, from the command line or from Python.

>>> import dpcausal as dpc
>>> spec = dpc.load_spec("configs/owl.yaml")                 # doctest: +SKIP
>>> dpc.plan(spec, frame)                                     # doctest: +SKIP
>>> release = dpc.release(spec, frame, ledger="ledger.jsonl")  # doctest: +SKIP
>>> dpc.ledger.set_cap("ledger.jsonl", "trial", 10.0)          # doctest: +SKIP

The API's functions and classes are imported when first used, so ``import dpcausal`` (and
``dpcausal --help``) loads neither numpy nor pandas; the errors are plain Python.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dpcausal._version import __version__
from dpcausal.errors import (
    EXIT_AUDIT,
    EXIT_INTERNAL,
    EXIT_IO,
    EXIT_OK,
    EXIT_PRIVACY,
    EXIT_USAGE,
    AccuracyRefusedError,
    AuditViolation,
    BudgetExceededError,
    DataError,
    DPCausalError,
    EngineError,
    LedgerIntegrityError,
    LedgerLockError,
    MissingBoundsError,
    OutputError,
    PrivacyError,
    SolverError,
    SpecError,
    UncertifiedModeError,
)

if TYPE_CHECKING:
    from dpcausal.api import (
        CommandName,
        Plan,
        Release,
        apply_rule,
        audit_privacy,
        build_spec,
        command_of,
        ledger,
        load_spec,
        plan,
        release,
        schema,
        spec_sha256,
        verify,
    )

_LAZY = {"CommandName", "Plan", "Release", "apply_rule", "audit_privacy", "command_of", "ledger",
         "load_spec", "plan", "release", "schema", "build_spec", "spec_sha256", "verify"}
"""Names :mod:`dpcausal.api` defines, imported on first use."""

__all__ = [
    "EXIT_AUDIT",
    "EXIT_INTERNAL",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_PRIVACY",
    "EXIT_USAGE",
    "AccuracyRefusedError",
    "AuditViolation",
    "BudgetExceededError",
    "CommandName",
    "DPCausalError",
    "DataError",
    "EngineError",
    "LedgerIntegrityError",
    "LedgerLockError",
    "MissingBoundsError",
    "OutputError",
    "Plan",
    "PrivacyError",
    "Release",
    "SolverError",
    "SpecError",
    "UncertifiedModeError",
    "__version__",
    "apply_rule",
    "audit_privacy",
    "build_spec",
    "command_of",
    "ledger",
    "load_spec",
    "plan",
    "release",
    "schema",
    "spec_sha256",
    "verify",
]


def __getattr__(name: str) -> Any:
    """Import the API's names when first used (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module("dpcausal.api"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpcausal' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
