"""The user-facing error tree and the exit codes of the CLI contract (DESIGN §3).

Every error a user can cause is a :class:`DPCausalError` whose message names the file, the field or
column, what was wrong and how to fix it. The CLI maps ``exit_code`` in exactly one place
(``dpcausal.cli._run``); anything else that escapes is a bug and exits 1.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_PRIVACY = 3
EXIT_AUDIT = 4
EXIT_IO = 5


class DPCausalError(Exception):
    """Base class of errors that are fed back to the user with an exit code.

    Parameters
    ----------
    message
        The one sentence shown to the user (it names the file, field or column and the fix).
    file, field, column
        What the error is about, when known: repeated as keys of the ``--json`` error object so a
        pipeline need not parse the message.
    """

    exit_code: int = EXIT_INTERNAL

    def __init__(self, message: str = "", *, file: object = None, field: str | None = None,
                 column: str | None = None) -> None:
        super().__init__(message)
        self.file = None if file is None else str(file)
        self.field = field
        self.column = column

    def to_dict(self) -> dict[str, object]:
        """The ``--json`` form: ``{"error", "exit_code"}`` plus ``file``/``field``/``column``
        when known."""
        out: dict[str, object] = {"error": str(self), "exit_code": self.exit_code}
        for key in ("file", "field", "column"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


class SpecError(DPCausalError):
    """The YAML spec or a command-line option is invalid."""

    exit_code = EXIT_USAGE


class DataError(DPCausalError):
    """The data file is missing, malformed or does not match the spec."""

    exit_code = EXIT_USAGE


class SolverError(DPCausalError):
    """A numerical solve did not reach the accuracy its sensitivity bound assumes."""

    exit_code = EXIT_USAGE


class PrivacyError(DPCausalError):
    """The run was refused by privacy policy."""

    exit_code = EXIT_PRIVACY


class BudgetExceededError(PrivacyError):
    """The plan would take the dataset's spend past its ledger cap."""


class AccuracyRefusedError(PrivacyError):
    """The predicted noise half-width exceeds ``accuracy.max_halfwidth`` (refused before any row
    is read)."""


class MissingBoundsError(PrivacyError):
    """A public bound the sensitivity depends on is missing from the spec."""


class UncertifiedModeError(PrivacyError):
    """A mode without a proven guarantee was requested without ``allow_uncertified``."""


class AuditViolation(DPCausalError):
    """An audit found a broken ledger, receipt or privacy claim."""

    exit_code = EXIT_AUDIT


class OutputError(DPCausalError):
    """Writing an output, or locking or reading the ledger, failed."""

    exit_code = EXIT_IO


class LedgerLockError(OutputError):
    """The ledger lock could not be taken in time."""


class LedgerIntegrityError(OutputError):
    """The ledger fails its integrity check (truncated, edited, re-chained, key or head missing).

    A release run exits 5 (nothing spent); ``audit verify`` and ``audit repair`` report it as a
    violation (exit 4).
    """


class EngineError(DPCausalError):
    """An engine (a Dask scheduler or worker) failed: nothing was released, written or charged."""

    exit_code = EXIT_IO
