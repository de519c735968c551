"""Manage a ledger from Python (``dpc.ledger``): the ``dpcausal ledger`` commands and
``dpcausal audit repair``, which call these functions.

Each function takes the ledger as a file path or a ``postgresql://`` URL, makes the command
line's checks, writes the same keyed lines under the ledger's lock, and returns what it wrote
instead of printing it. A refusal raises the command line's error (its ``exit_code``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcausal.errors import AuditViolation, LedgerIntegrityError, OutputError, SpecError

if TYPE_CHECKING:
    from dpcausal.accounting.accountant import Accountant
    from dpcausal.accounting.budget import Budget
    from dpcausal.accounting.ledger import Ledger
    from dpcausal.accounting.ledger_copy import CopyReport

__all__ = ["LedgerUpdate", "Repair", "adopt", "copy", "init", "repair", "set_accountant",
           "set_cap"]

Location = str | PathLike[str]
"""A ledger: a JSONL file (a path) or a database (a ``postgresql://host/dbname`` URL)."""


def ledger_location(ledger: Location) -> str | Path:
    """A ledger file (a path) or a database (a ``postgresql://`` URL, kept as text)."""
    return ledger if isinstance(ledger, str) else Path(ledger)


@dataclass(frozen=True)
class LedgerUpdate:
    """The lines a ledger function appended (``--json`` prints :attr:`records`).

    Attributes
    ----------
    location
        The ledger: its file, or its database's URL without credentials.
    key_location
        Where the ledger's key is (never the key): keep it private and back it up; without it the
        ledger can be neither verified nor extended.
    records
        The appended lines, as written (with ``seq``, ``prev_hash``, ``hash`` and ``mac``).
    """

    location: str
    key_location: str
    records: list[dict[str, Any]]


@dataclass(frozen=True)
class Repair:
    """What :func:`repair` did: the ledger's ``location`` (as in :class:`LedgerUpdate`), and
    ``moved_to``, the file the incomplete last line's bytes were moved to
    (``LEDGER.torn-<time>``), or None when there was nothing to repair."""

    location: str
    moved_to: Path | None


def _update(led: Ledger, records: list[dict[str, Any]]) -> LedgerUpdate:
    return LedgerUpdate(location=led.location, key_location=led.store.key_location(),
                        records=records)


def _accountant(name: str) -> Accountant:
    from dpcausal.accounting.accountant import ACCOUNTANTS, Accountant

    if name not in ACCOUNTANTS:
        raise SpecError(f"--accountant must be one of {', '.join(ACCOUNTANTS)}. Got '{name}' "
                        "instead.")
    return Accountant(name)


def _number(option: str, value: object) -> float:
    """``value`` as the float the command line parses (an int 10 would be written ``10``, and the
    line would not be the command line's)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise SpecError(f"{option} must be a number. Got {value!r} instead.")
    return float(value)


def _cap(epsilon: float, delta: float) -> Budget:
    from dpcausal.accounting.budget import Budget

    epsilon, delta = _number("--epsilon", epsilon), _number("--delta", delta)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise SpecError(f"--epsilon must be a finite number > 0. Got {epsilon} instead.")
    if not 0.0 <= delta <= 1.0:
        raise SpecError(f"--delta must be in [0, 1]. Got {delta} instead.")
    return Budget(epsilon, delta)


def _make_parent(location: str | Path) -> None:
    from dpcausal.accounting.ledger_url import is_database_url

    if not is_database_url(location):
        Path(location).absolute().parent.mkdir(parents=True, exist_ok=True)


def _open(ledger: Location) -> Ledger:
    from dpcausal.accounting.ledger import Ledger

    return Ledger(ledger_location(ledger))


def init(ledger: Location, *, dataset: str | None = None, epsilon: float | None = None,
         delta: float = 0.0, note: str | None = None, accountant: str = "basic") -> LedgerUpdate:
    """Create a new ledger, its key and head: ``dpcausal ledger init``.

    The ledger's directory is created if missing (a release never does that). For a
    ``postgresql://`` URL the schema is created in the database, and the key goes to the file
    ``DPCAUSAL_LEDGER_KEY_FILE`` names (created when missing), never into the database.

    Parameters
    ----------
    ledger
        The new ledger: a file or a ``postgresql://`` URL.
    dataset, epsilon, delta
        Record this dataset's cap (ε, δ) in the same commit (``dataset`` and ``epsilon`` go
        together).
    note
        Why (recorded in the cap line).
    accountant
        How releases add up: ``"basic"`` (ε and δ sum) or ``"pld"`` (privacy loss
        distributions: much tighter for repeated Gaussian releases).

    Returns
    -------
    LedgerUpdate
        The ``ledger-init`` line (and the cap line).

    Raises
    ------
    SpecError
        An invalid dataset label, cap or accountant (exit code 2 on the command line).
    OutputError
        A ledger already exists there, or it cannot be written (exit code 5).
    """
    if (dataset is None) != (epsilon is None):
        raise SpecError("--dataset and --epsilon go together (the dataset's cap)")
    cap = _cap(epsilon, delta) if epsilon is not None else None
    acc = _accountant(accountant)
    location = ledger_location(ledger)
    _make_parent(location)
    led = _open(location)
    return _update(led, led.init(dataset=dataset, cap=cap, note=note, accountant=acc))


def adopt(ledger: Location) -> LedgerUpdate:
    """Take over a ledger written by an earlier dpcausal (unkeyed): ``dpcausal ledger init
    --adopt``.

    Verifies the old hash chain, then starts its keyed chain (basic accountant) with, for each
    dataset, the cap it was first charged under.

    Returns
    -------
    LedgerUpdate
        The ``ledger-adopt`` line and one cap line per dataset.

    Raises
    ------
    OutputError
        No legacy ledger there, or it is keyed already (exit code 5).
    LedgerIntegrityError
        The old chain does not verify; nothing is adopted (exit code 5).
    """
    led = _open(ledger)
    return _update(led, led.adopt())


def set_cap(ledger: Location, dataset: str, epsilon: float, delta: float | None = None, *,
            allow_raise: bool = False, note: str | None = None) -> LedgerUpdate:
    """Record a dataset's cap: ``dpcausal ledger set-cap [--raise]``.

    Lowering a cap is always allowed; raising it is a policy decision, allowed with
    ``allow_raise`` and recorded as such.

    Parameters
    ----------
    ledger
        An existing ledger: a file or a ``postgresql://`` URL.
    dataset
        The dataset label.
    epsilon, delta
        The new cap; ``delta`` None keeps the current cap's δ (0 for a new dataset).
    allow_raise
        Allow a cap above the current one (``--raise``).
    note
        Why (recorded in the line).

    Returns
    -------
    LedgerUpdate
        The cap line (``reason``: ``set``, ``lower`` or ``raise``; ``previous_cap``).

    Raises
    ------
    BudgetExceededError
        The new cap is higher than the ledger's and ``allow_raise`` is False (exit code 3).
    SpecError
        An invalid dataset label or cap (exit code 2).
    OutputError, LedgerIntegrityError
        No ledger there, or it cannot be locked, trusted or written (exit code 5).
    """
    cap = _cap(epsilon, 0.0 if delta is None else delta)
    led = _open(ledger)
    return _update(led, [led.set_cap(dataset, cap.epsilon, None if delta is None else cap.delta,
                                     allow_raise=allow_raise, note=note)])


def set_accountant(ledger: Location, accountant: str, *,
                   note: str | None = None) -> LedgerUpdate:
    """Switch how the ledger adds up releases: ``dpcausal ledger set-accountant``.

    Only to a rule that never reports more (``basic`` → ``pld``): every dataset's whole history is
    recomputed with it, and the switch is a visible, keyed line.

    Returns
    -------
    LedgerUpdate
        The ``accountant`` line (with the ``previous`` one).

    Raises
    ------
    PrivacyError
        The switch could report more than the totals releases were checked against (exit code 3).
    SpecError
        An unknown accountant, or the one the ledger already uses (exit code 2).
    OutputError, LedgerIntegrityError
        No ledger there, or it cannot be locked, trusted or written (exit code 5).
    """
    acc = _accountant(accountant)
    led = _open(ledger)
    return _update(led, [led.set_accountant(acc, note=note)])


def copy(source: Location, dest: Location) -> CopyReport:
    """Copy a ledger into a new one, every record unchanged: ``dpcausal ledger export --ledger
    SOURCE --to DEST`` and ``dpcausal ledger import --ledger DEST --from SOURCE``.

    A file ledger moves into a database (or back, or into another of either kind) with the same
    ``seq``, hashes and MACs under the same key, so every receipt still names its record. The
    source is read under its lock and must verify; the copy is verified after writing. For a
    database destination, ``DPCAUSAL_LEDGER_KEY_FILE`` names where the key goes (written when the
    file does not exist; else it must hold the source's key).

    Returns
    -------
    CopyReport
        The records copied, the ledger id, its last hash, each dataset's spend, where the copy's
        key is; ``to_dict()`` is the ``--json`` object.

    Raises
    ------
    SpecError
        The source and the destination are the same ledger (exit code 2).
    OutputError
        The source is missing or unkeyed, the destination exists, or I/O failed; nothing is
        copied (exit code 5).
    LedgerIntegrityError
        The source or the copy fails its integrity check (exit code 5).
    """
    from dpcausal.accounting.ledger_copy import copy_ledger

    destination = ledger_location(dest)
    _make_parent(destination)
    return copy_ledger(ledger_location(source), destination)


def repair(ledger: Location) -> Repair:
    """Move aside an incomplete last line that the head proves was never committed:
    ``dpcausal audit repair``.

    Such a line was left by a run killed (or a disk that filled) while appending; it published
    nothing, so no spend is lost. A database ledger never has one.

    Returns
    -------
    Repair
        Where the line's bytes were moved to (``moved_to``), or None there when there was nothing
        to repair.

    Raises
    ------
    AuditViolation
        Anything else is wrong (a truncated committed line, a missing line, a bad MAC): nothing is
        changed; restore the ledger from a backup (exit code 4).
    OutputError
        No ledger there (exit code 5).
    """
    try:
        led = _open(ledger)
        snap = led.snapshot()
        if not snap.exists and not snap.problems:
            raise OutputError(f"{led.location}: ledger not found; check --ledger")
        saved = led.repair_torn_tail()
    except LedgerIntegrityError as exc:
        raise AuditViolation(str(exc)) from exc
    return Repair(location=led.location, moved_to=None if saved is None else Path(saved))
