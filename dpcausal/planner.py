"""The utility guard and the ε / n planner (DESIGN principle 9).

Both work on the plan's predicted accuracies (:class:`~dpcausal.accounting.plan.PredictedAccuracy`),
which every wired command fills from the spec and public sizes alone. So the guard runs before any
row is read, and the planner re-plans at other ε (or n) without touching data: all of it is
post-processing of public inputs and costs nothing.

The planner assumes what holds for every calibration here: more ε (or more rows) never widens the
noise. It brackets the smallest ε that meets a target by factors of 10, bisects geometrically, and
rounds *up* to three significant digits (re-checked), so the ε it names always meets the target.
A plan that refuses at some ε (too small for float64, a fixed penalty below what that ε requires)
counts as not meeting it there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpcausal.accounting.plan import PredictedAccuracy, PrivacyPlan
from dpcausal.errors import AccuracyRefusedError, DPCausalError, SpecError

EPSILON_RANGE = (1e-6, 1e6)
"""The ε the planner searches over."""
N_MAX = 10_000_000
"""The largest n the planner tries (and at most 1,000 × the file's n)."""
REL_TOL = 1e-3
"""Bisection stops when the bracket's ratio is below 1 + REL_TOL."""

Replan = Callable[[float | None, int | None], PrivacyPlan]
"""(ε or None for the spec's, n or None for the file's) → the plan built from public inputs."""


def target_quantity(plan: PrivacyPlan, quantity: str | None, what: str) -> PredictedAccuracy:
    """The predicted accuracy ``what`` (an option or field name) refers to.

    Raises
    ------
    SpecError
        The command predicts no accuracy yet, or ``quantity`` is not one of its quantities.
    """
    if not plan.accuracy:
        raise SpecError(f"{what}: '{plan.command}' does not predict the accuracy of its release "
                        "yet; remove it", field=what)
    acc = plan.predicted(quantity)
    if acc is None:
        names = ", ".join(a.quantity for a in plan.accuracy)
        raise SpecError(f"accuracy.quantity: '{quantity}' is not a quantity of {plan.command}; "
                        f"choose one of: {names}", field="accuracy.quantity")
    return acc


def _halfwidth(replan: Replan, quantity: str, epsilon: float | None, n: int | None) -> float | None:
    """The predicted half-width of ``quantity`` at (ε, n); None where the plan refuses."""
    try:
        acc = replan(epsilon, n).predicted(quantity)
    except DPCausalError:
        return None
    return None if acc is None or not math.isfinite(acc.halfwidth) else acc.halfwidth


def _round_up(x: float, digits: int = 3) -> float:
    """``x`` rounded up to ``digits`` significant digits."""
    step = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / step * (1 - 1e-12)) * step:.{digits}g}")


def smallest_epsilon(replan: Replan, quantity: str, target: float, start: float) -> float | None:
    """The smallest ε (3 significant digits, rounded up) whose predicted half-width of
    ``quantity`` is ≤ ``target``; None if no ε in :data:`EPSILON_RANGE` meets it."""
    lo_eps, hi_eps = EPSILON_RANGE

    def meets(eps: float) -> bool:
        h = _halfwidth(replan, quantity, eps, None)
        return h is not None and h <= target

    lo: float | None = None
    hi: float | None = None
    eps = min(max(start, lo_eps), hi_eps)
    if meets(eps):
        hi = eps
        while hi > lo_eps:
            down = max(hi / 10.0, lo_eps)
            if not meets(down):
                lo = down
                break
            hi = down
        if lo is None:
            return hi
    else:
        lo = eps
        while lo < hi_eps:
            up = min(lo * 10.0, hi_eps)
            if meets(up):
                hi = up
                break
            lo = up
        if hi is None:
            return None
    while hi / lo > 1.0 + REL_TOL:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if meets(mid) else (mid, hi)
    for rounded in sorted({_round_up(lo), _round_up(hi)}):  # 3 digits, never below the bracket
        if meets(rounded):
            return rounded
    return hi


def smallest_n(replan: Replan, quantity: str, target: float, n_now: int) -> int | None:
    """The smallest n (at the spec's ε) whose predicted half-width is ≤ ``target``; None if no
    n up to min(1,000·n, :data:`N_MAX`) meets it."""

    def meets(n: int) -> bool:
        h = _halfwidth(replan, quantity, None, n)
        return h is not None and h <= target

    n_max = max(n_now, min(1000 * n_now, N_MAX))
    if meets(n_now):
        lo, hi = 1, n_now
    else:  # up by factors of 10: a plan may refuse the largest n (e.g. δ must stay < 1/n)
        lo, n, found = n_now, n_now, None
        while n < n_max and found is None:
            n = min(10 * n, n_max)
            if meets(n):
                found = n
            else:
                lo = n
        if found is None:
            return None
        hi = found
    while hi - lo > 1:  # invariant: hi meets, lo does not (or lo = 1, never tried)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class TargetReport:
    """What ``--dry-run --target-halfwidth X`` prints: the ε (and n) that meet X."""

    quantity: str
    units: str
    target: float
    halfwidth: float
    epsilon_now: float
    epsilon: float | None
    n_now: int
    n: int | None
    n_note: str
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The ``target`` object of ``--dry-run --json``."""
        return {"quantity": self.quantity, "units": self.units, "target_halfwidth": self.target,
                "halfwidth_now": self.halfwidth, "epsilon_now": self.epsilon_now,
                "smallest_epsilon": self.epsilon, "n_rows_now": self.n_now,
                "smallest_n": self.n, "n_note": self.n_note, "note": self.note}

    def lines(self) -> list[str]:
        """The human form."""
        eps = (f"smallest ε that meets it: {self.epsilon:g}" if self.epsilon is not None else
               f"no ε up to {EPSILON_RANGE[1]:g} meets it" + (f" ({self.note})" if self.note
                                                               else ""))
        return [f"target: ±{self.target:g} {self.units} for '{self.quantity}' (now ±"
                f"{self.halfwidth:.4g} at ε = {self.epsilon_now:g}, n = {self.n_now})",
                f"  {eps}", f"  {self.n_note}"]


def plan_target(plan: PrivacyPlan, replan: Replan, *, target: float, quantity: str | None,
                epsilon: float, n_rows: int) -> TargetReport:
    """Search the smallest ε and, where the half-width depends on n, the smallest n."""
    if not (math.isfinite(target) and target > 0):
        raise SpecError(f"--target-halfwidth: must be a finite number > 0, got {target}",
                        field="--target-halfwidth")
    acc = target_quantity(plan, quantity, "--target-halfwidth")
    eps = smallest_epsilon(replan, acc.quantity, target, epsilon)
    if not acc.n_search:
        n, note = None, "n: not searched for this quantity (see the command's README section)"
    else:
        n_max = max(n_rows, min(1000 * n_rows, N_MAX))
        # 10n rows as well as the most: a plan may refuse the largest n (δ must stay < 1/n)
        wide = [_halfwidth(replan, acc.quantity, None, n) for n in (min(10 * n_rows, n_max), n_max)]
        big = min((h for h in wide if h is not None), default=None)
        if big is None or big >= acc.halfwidth * (1.0 - 1e-9):
            n, note = None, "n: more rows do not narrow this half-width (at this ε)"
        else:
            n = smallest_n(replan, acc.quantity, target, n_rows)
            note = (f"smallest n at ε = {epsilon:g} that meets it: {n}" if n is not None else
                    f"no n up to {min(1000 * n_rows, N_MAX)} meets it at ε = {epsilon:g}")
    return TargetReport(acc.quantity, acc.units, target, acc.halfwidth, epsilon, eps, n_rows, n,
                        note, acc.note)


def check_accuracy(plan: PrivacyPlan, replan: Replan, *, max_halfwidth: float | None,
                   quantity: str | None, epsilon: float) -> None:
    """Refuse (exit 3) when the predicted half-width exceeds ``max_halfwidth``.

    Runs on the plan alone, before any row is read; the message names the ε that would meet the
    limit (all public).

    Raises
    ------
    AccuracyRefusedError
        The predicted half-width is above ``max_halfwidth``.
    """
    if max_halfwidth is None:
        return
    acc = target_quantity(plan, quantity, "accuracy.max_halfwidth")
    if acc.halfwidth <= max_halfwidth:
        return
    eps = smallest_epsilon(replan, acc.quantity, max_halfwidth, epsilon)
    fix = (f"ε = {eps:g} would meet it (privacy.epsilon is {epsilon:g}; --epsilon overrides it)"
           if eps is not None else
           f"no ε up to {EPSILON_RANGE[1]:g} meets it ({acc.note or 'change the limit'})")
    kind = "bound on the noise" if acc.bound else "noise"
    raise AccuracyRefusedError(
        f"accuracy.max_halfwidth: the predicted {(1 - acc.alpha) * 100:g}% {kind} half-width of "
        f"'{acc.quantity}' is {acc.halfwidth:.4g} {acc.units}, above the limit "
        f"{max_halfwidth:g}; {fix}. No row was read and nothing was spent",
        field="accuracy.max_halfwidth")
