"""How a ledger adds up a dataset's releases: the ``basic`` and ``pld`` accountants.

Each ledger has one accountant, recorded in its init line (or a later ``accountant`` line):

- ``basic`` (the default): ε and δ add up over releases, each release costing
  :func:`~dpcausal.accounting.budget.compose_events` of its events (parallel over the parts of a
  public split). Loose, assumption-free, recomputable by hand.
- ``pld``: privacy loss distributions (Google's ``dp-accounting``, pessimistic connect-the-dots
  discretisation at a recorded interval). Each event is composed by the exact curve of its noise
  when it is a calibrated output release, else by its stated (ε, δ)
  (:func:`dpcausal.mechanisms.registry.release_curve`); a release whose receipt carries no
  worst-case guarantee (``dp_guarantee: false`` or ``guarantee: asymptotic``) is composed by its
  events' stated (ε, δ), as ``basic`` does. The dataset's spend is the point of the composed curve
  at the cap's δ: (ε(δ_cap), δ_cap), or the basic total when that is smaller (both are valid
  bounds; ``pld`` therefore never reports more than ``basic``). At δ_cap = 0 only pure mechanisms
  can be composed at all, and their composition at δ = 0 is exactly additive: ``pld`` gains
  nothing there.

Parallel composition under ``pld``: within one release, the events on the parts of one public
split cost the *maximum* of the parts' privacy curves (a record lies in exactly one part), composed
as the pessimistic connect-the-dots PLD of the pointwise maximum of the parts' δ(ε) (the maximum of
two privacy profiles is the profile of a pair dominating both: the convex hull of the minimum of
their trade-off functions). Across releases, a split drawn afresh per release may put a record in
any part each time, so each release contributes its own maximum and releases compose sequentially
(the same rule as ``basic``).
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dpcausal.accounting.budget import Budget, by_partition, compose, compose_events
from dpcausal.accounting.events import PrivacyEvent
from dpcausal.errors import SpecError
from dpcausal.mechanisms.curve import PLD_INTERVAL, PrivacyCurve
from dpcausal.mechanisms.registry import claim_curve, release_curve

if TYPE_CHECKING:
    from dpcausal.accounting.plan import PrivacyPlan

AccountantName = Literal["basic", "pld"]
ACCOUNTANTS: tuple[AccountantName, ...] = ("basic", "pld")

MAX_GRID_GAP = 10
"""The parts' maximum is connected at every 10th multiple of the interval: connect-the-dots is
pessimistic for any set of points, and between points 1e-3 apart the convex profile bends by far
less than its discretisation error; a 10 times shorter grid keeps a split release's PLD fast."""

GAUSSIAN_TAIL_SD = 10.0
"""dp-accounting drops Gaussian noise mass beyond e^-50 (≈ 10 sd): the loss range of a Gaussian
pair at μ is within ±(10μ + μ²/2)."""


@dataclass(frozen=True, slots=True)
class RunCost:
    """One release as an accountant sees it.

    Parameters
    ----------
    events
        The receipt's events (dicts with at least ``epsilon`` and ``delta``).
    certified
        False when the release's guarantee is not worst-case (``dp_guarantee: false``,
        ``guarantee: asymptotic``): its events are composed by their stated (ε, δ).
    """

    events: tuple[Mapping[str, Any], ...]
    certified: bool

    @classmethod
    def from_plan(cls, plan: PrivacyPlan) -> RunCost:
        """The planned run."""
        return cls(tuple(e.to_dict() for e in plan.events),
                   plan.dp_guarantee and plan.guarantee != "asymptotic")

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> RunCost:
        """A receipt (or ledger release line)."""
        return cls(tuple(rec["events"]), rec.get("dp_guarantee") is True
                   and rec.get("guarantee") in ("pure", "approximate"))

    @classmethod
    def stated(cls, cost: Budget) -> RunCost:
        """A cost known only as an (ε, δ) pair."""
        return cls(({"epsilon": cost.epsilon, "delta": cost.delta},), False)

    @property
    def basic(self) -> Budget:
        """The run's own (ε, δ) by basic composition (what its receipt states)."""
        return compose_events(self.events)

    def key(self) -> str:
        """Identical runs (a cron job's daily release) share a key and are composed at once."""
        return json.dumps([self.certified, list(self.events)], sort_keys=True, default=str)


def _curve(ev: Mapping[str, Any], certified: bool) -> PrivacyCurve:
    eps, delta = float(ev["epsilon"]), float(ev["delta"])
    if not certified:
        return claim_curve(eps, delta)
    try:
        return release_curve(PrivacyEvent(**dict(ev)))
    except (TypeError, ValueError, SpecError):  # not an event this version reads: its stated cost
        return claim_curve(eps, delta)


def _upper_loss(c: PrivacyCurve) -> float:
    return c.loss * (GAUSSIAN_TAIL_SD + c.loss / 2.0) if c.family == "gaussian" else c.loss


class _Pld:
    """Privacy loss distributions of runs at one discretisation interval (dp-accounting)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval

    def compose_curves(self, curves: Sequence[PrivacyCurve]) -> Any:
        """The PLD of ``curves`` composed (identical curves self-composed at once)."""
        from dp_accounting.pld import privacy_loss_distribution as pld

        out = pld.identity(self.interval)
        for curve, count in Counter(curves).items():
            one = curve.pld(self.interval)
            out = out.compose(one if count == 1 else one.self_compose(count))
        return out

    def maximum(self, parts: Sequence[Any], upper: float) -> Any:
        """A PLD dominating each of ``parts`` (module docstring): connect-the-dots on the
        pointwise maximum of their δ(ε) over the grid [−upper, upper]."""
        from dp_accounting.pld import pld_pmf
        from dp_accounting.pld import privacy_loss_distribution as pld

        top = MAX_GRID_GAP * (math.ceil(upper / (MAX_GRID_GAP * self.interval)) + 1)
        grid = np.arange(-top, top + 1, MAX_GRID_GAP)
        deltas = np.max([np.asarray(p.get_delta_for_epsilon(grid * self.interval))
                         for p in parts], axis=0)
        pmf = pld_pmf.create_pmf_pessimistic_connect_dots(
            self.interval, grid, np.minimum.accumulate(np.clip(deltas, 0.0, 1.0)))
        return pld.PrivacyLossDistribution(pmf)

    def run(self, run: RunCost) -> Any:
        """The PLD of one release: its plain events composed, each split at its parts' maximum."""
        return _run_pld(self.interval, run.key())

    def build(self, run: RunCost) -> Any:
        """:meth:`run`, uncached."""
        plain, splits = by_partition(run.events, lambda ev: _curve(ev, run.certified))
        out = self.compose_curves(plain)
        for parts in splits.values():
            plds = [self.compose_curves(cs) for cs in parts.values()]
            upper = max(sum(_upper_loss(c) for c in cs) for cs in parts.values())
            out = out.compose(plds[0] if len(plds) == 1 else self.maximum(plds, upper))
        return out


@functools.lru_cache(maxsize=16)
def _run_pld(interval: float, key: str) -> Any:
    """A release's PLD, cached by its key (a ledger's history repeats a few kinds of release)."""
    certified, events = json.loads(key)
    return _Pld(interval).build(RunCost(tuple(events), bool(certified)))


@dataclass(frozen=True, slots=True)
class Accountant:
    """A ledger's composition rule and its parameters (module docstring).

    Parameters
    ----------
    name
        ``basic`` or ``pld``.
    interval
        ``pld`` only: the discretisation interval of the privacy losses (rounded up to it).
    """

    name: AccountantName = "basic"
    interval: float = PLD_INTERVAL

    def __post_init__(self) -> None:
        if self.name not in ACCOUNTANTS:
            raise ValueError(f"unknown accountant {self.name!r}; use one of {ACCOUNTANTS}")
        if not (math.isfinite(self.interval) and 0.0 < self.interval <= 0.1):
            raise ValueError(f"the PLD discretisation interval must be in (0, 0.1], got "
                             f"{self.interval!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form recorded in the ledger and in every receipt's ``ledger`` field."""
        if self.name == "basic":
            return {"name": "basic"}
        return {"name": "pld", "library": "dp-accounting",
                "value_discretization_interval": self.interval, "pessimistic_estimate": True,
                "discretisation": "connect-the-dots",
                "pair": "add_or_remove_one at the recorded sensitivity"}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Accountant:
        """Read a recorded accountant (a ledger line without one is ``basic``)."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ValueError(f"an accountant must be a JSON object, got {d!r}")
        name = d.get("name")
        if name == "pld":
            if d.get("pessimistic_estimate") is not True:
                raise ValueError("a pld accountant must use pessimistic estimates")
            return cls("pld", float(d["value_discretization_interval"]))
        if name == "basic":
            return cls()
        raise ValueError(f"unknown accountant {name!r} (written by a newer dpcausal?)")

    def tighter_or_equal(self, other: Accountant) -> bool:
        """Whether ``other`` never reports more than this accountant (the rule for switching)."""
        return other == self or (self.name == "basic" and other.name == "pld")

    def total(self) -> Total:
        """An empty running composition."""
        return Total(self)


class Total:
    """The running composition of one dataset's releases under one accountant."""

    def __init__(self, accountant: Accountant) -> None:
        self.accountant = accountant
        self.basic = Budget(0.0, 0.0)
        self._pld = _Pld(accountant.interval) if accountant.name == "pld" else None
        self._runs: dict[str, RunCost] = {}
        self._pending: Counter[str] = Counter()
        self._composed: Any = None

    def add(self, run: RunCost) -> None:
        """Add one release."""
        self.basic = compose([self.basic, run.basic])
        if self._pld is not None:
            self._runs.setdefault(run.key(), run)
            self._pending[run.key()] += 1

    def add_all(self, runs: Iterable[RunCost]) -> None:
        """Add releases in order."""
        for run in runs:
            self.add(run)

    def spent(self, delta: float) -> Budget:
        """The spend at the cap's δ (``basic``: the sums, whatever ``delta``)."""
        if self._pld is None or delta <= 0.0 or self.basic.epsilon == 0.0:
            return self.basic
        pld = self._pld
        for key, count in self._pending.items():
            one = pld.run(self._runs[key])
            one = one if count == 1 else one.self_compose(count)
            self._composed = one if self._composed is None else self._composed.compose(one)
        self._pending.clear()
        eps = float(self._composed.get_epsilon_for_delta(delta))
        if self.basic.delta <= delta and self.basic.epsilon <= eps:
            return self.basic
        return Budget(eps, delta) if math.isfinite(eps) else self.basic
