"""Replaying a ledger's records: its policy (caps, accountant) and each dataset's releases.

Shared by the charge (:mod:`dpcausal.accounting.ledger`, which refuses to spend on a ledger with any
problem) and ``audit verify`` (which reports every problem and checks each release's recorded totals
against the ones recomputed here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dpcausal.accounting import chain
from dpcausal.accounting.accountant import Accountant, RunCost, Total
from dpcausal.accounting.budget import Budget


def budget_of(d: Any) -> Budget:
    """An (ε, δ) pair from its JSON form."""
    return Budget(float(d["epsilon"]), float(d["delta"]))


def release_problem(rec: Mapping[str, Any]) -> str | None:
    """Why a release record could refund or hide budget, or None (events, dataset label)."""
    events = rec.get("events")
    if not isinstance(events, list):
        return "no events list"
    for ev in events:
        try:
            eps, delta = float(ev["epsilon"]), float(ev["delta"])
        except (KeyError, TypeError, ValueError):
            return "an event without numeric epsilon and delta"
        if not (math.isfinite(eps) and eps >= 0 and 0 <= delta <= 1):
            return "an event with a negative or non-finite epsilon or delta"
    if not isinstance((rec.get("ledger") or {}).get("dataset"), str):
        return "no ledger.dataset"
    return None


@dataclass
class Replay:
    """The policy a ledger's records add up to, and each dataset's releases."""

    caps: dict[str, Budget] = field(default_factory=dict)
    runs: dict[str, list[RunCost]] = field(default_factory=dict)
    releases: dict[str, int] = field(default_factory=dict)
    problems: list[tuple[int, str]] = field(default_factory=list)
    accountant: Accountant = field(default_factory=Accountant)

    @property
    def labels(self) -> set[str]:
        """Every dataset label the ledger knows."""
        return set(self.caps) | set(self.runs)

    def total(self, dataset: str) -> Total:
        """The running composition of ``dataset``'s releases under the ledger's accountant."""
        total = self.accountant.total()
        total.add_all(self.runs.get(dataset, []))
        return total

    def spent(self, dataset: str) -> Budget:
        """``dataset``'s spend, at its cap's δ."""
        cap = self.caps.get(dataset)
        return self.total(dataset).spent(cap.delta if cap is not None else 0.0)


ReleaseHook = Callable[[int, Mapping[str, Any], str, Budget, Budget, Budget | None], None]


def replay(records: Iterable[Mapping[str, Any]], on_release: ReleaseHook | None = None) -> Replay:
    """Walk the records in order: caps, the accountant, and each dataset's releases.

    ``on_release(line, record, dataset, before, after, ledger_cap)`` is called for each release
    with the dataset's spend before and after it, composed by the accountant in force at that line
    at the δ of the cap the release was checked against (``audit verify`` checks its recorded
    fields against them).
    """
    out = Replay()
    totals: dict[str, Total] = {}
    for pos, rec in enumerate(records, start=1):
        kind = rec.get("kind")
        try:
            if kind == "cap":
                out.caps[str(rec["dataset"])] = budget_of(rec["cap"])
                continue
            if kind in chain.INIT_KINDS or kind == "accountant":
                new = Accountant.from_dict(rec.get("accountant"))
                if kind == "accountant" and not out.accountant.tighter_or_equal(new):
                    out.problems.append((pos, f"the accountant was switched from "
                                              f"{out.accountant.name} to {new.name}, which may "
                                              "report more (only basic → pld is allowed)"))
                out.accountant = new
                continue
            if kind is not None:  # a record this version does not know could change the totals
                out.problems.append((pos, f"unknown record kind {kind!r} (written by a newer "
                                          "dpcausal?); upgrade before spending"))
                continue
            problem = release_problem(rec)
            if problem:
                out.problems.append((pos, problem))
                continue
            ds = str(rec["ledger"]["dataset"])
            run = RunCost.from_record(rec)
            if on_release is not None:
                total = totals.get(ds)
                if total is None or total.accountant != out.accountant:
                    total = totals[ds] = out.total(ds)
                delta = float((rec["ledger"].get("cap") or {"delta": 0.0})["delta"])
                before = total.spent(delta)
                total.add(run)
                on_release(pos, rec, ds, before, total.spent(delta), out.caps.get(ds))
            out.runs.setdefault(ds, []).append(run)
            out.releases[ds] = out.releases.get(ds, 0) + 1
        except (KeyError, TypeError, ValueError) as exc:
            out.problems.append((pos, f"malformed {kind or 'release'} record ({exc})"))
    return out
