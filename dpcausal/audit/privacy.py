"""``audit privacy``: run a command on neighbouring datasets and measure how distinguishable it is.

Two estimators (issue #5):
- gray-box, exact: the method's own pre-noise values on D and each neighbour D′, pushed through the
  exact privacy loss of each mechanism of the plan (composed basically) and compared with the claim;
  the observed change of each mechanism input is also compared with the sensitivity it was given.
- black-box: on the pair that came closest, many complete releases on D and D′ (test-seeded noise),
  and a Clopper–Pearson ε lower bound over half-space and ball events (``estimators``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.budget import compose_events
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.estimators import EventLoss, LowerBound, epsilon_lower_bound, event_loss
from dpcausal.audit.neighbours import Pair
from dpcausal.mechanisms import NoiseGuard
from dpcausal.methods.base import MethodDef, Release

FloatArray = npt.NDArray[np.float64]
TOL = 1e-9


@dataclass(frozen=True)
class AuditAdapter:
    """How the audit drives one command.

    ``synthesize(spec, n, rng)`` makes a data set inside the public bounds; ``neighbours(spec,
    frame, rng, k)`` yields (description, D or None for ``frame`` itself, D′) neighbouring pairs
    under the command's relation;
    ``pre_noise(spec, frame, plan, side)`` returns each mechanism's input by stage (non-private:
    used only inside the audit); ``output_vector(release)`` flattens a release for the black-box test.
    """

    method: MethodDef
    section: str
    synthesize: Callable[[Any, int, np.random.Generator], pd.DataFrame]
    neighbours: Callable[[Any, pd.DataFrame, np.random.Generator, int], Iterator[Pair]]
    pre_noise: Callable[[Any, pd.DataFrame, PrivacyPlan, dict[str, pd.DataFrame]], dict[str, FloatArray]]
    output_vector: Callable[[Release], FloatArray]
    audit_spec: Callable[[Any], Any] | None = None
    """Optional: the spec to audit with, e.g. without figures (post-processing only: the released
    numbers, and so the privacy loss, are unchanged)."""


@dataclass
class AuditReport:
    """The audit's findings; ``violation`` is set when any estimate exceeds the claim."""

    command: str
    epsilon: float
    delta: float
    rows: int
    pairs: int = 0
    max_loss: float = 0.0
    max_sensitivity_ratio: float = 0.0
    max_delta_at_claim: float = 0.0
    closest_pair: str = ""
    losses: list[float] = field(default_factory=list)
    per_stage: dict[str, float] = field(default_factory=dict)
    lower_bound: LowerBound | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def violation(self) -> bool:
        """True when the claim does not hold."""
        return bool(self.problems)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        lb = self.lower_bound
        q = np.quantile(self.losses, [0.5, 0.9, 1.0]).tolist() if self.losses else []
        return {
            "command": self.command, "claimed": {"epsilon": self.epsilon, "delta": self.delta},
            "rows": self.rows, "pairs_tried": self.pairs,
            "gray_box": {"max_privacy_loss": self.max_loss, "loss_quantiles_50_90_100": q,
                         "max_loss_per_stage": self.per_stage,
                         "max_sensitivity_ratio": self.max_sensitivity_ratio,
                         "max_delta_at_claimed_epsilon": self.max_delta_at_claim,
                         "closest_pair": self.closest_pair},
            "black_box": None if lb is None else {
                "epsilon_lower_bound": lb.epsilon_lb, "confidence": lb.confidence,
                "event": lb.event, "p_on_D": lb.p_d, "p_on_D_prime": lb.p_dprime,
                "releases": lb.trials},
            "verdict": "violation" if self.violation else "pass",
            "problems": self.problems,
        }


def run_audit(
    adapter: AuditAdapter,
    spec: Any,
    frame: pd.DataFrame,
    side: dict[str, pd.DataFrame],
    *,
    pairs: int,
    trials: int,
    rng: np.random.Generator,
    progress: Callable[[str, int, int], None] | None = None,
) -> AuditReport:
    """Audit ``spec`` on ``frame``: ``pairs`` neighbours (gray-box), ``trials`` releases per side
    of the closest pair (black-box; 0 skips it)."""
    method = adapter.method
    plan = method.plan(spec, len(frame), side, rng=rng)
    cost = plan.cost
    report = AuditReport(plan.command, cost.epsilon, cost.delta, len(frame))
    base = adapter.pre_noise(spec, frame, plan, side)
    worst: tuple[pd.DataFrame, pd.DataFrame] | None = None
    for i, (name, first, other) in enumerate(adapter.neighbours(spec, frame, rng, pairs)):
        ref = base if first is None else adapter.pre_noise(spec, first, plan, side)
        vals = adapter.pre_noise(spec, other, plan, side)
        losses: list[EventLoss] = [event_loss(ev, ref[ev.stage], vals[ev.stage]) for ev in plan.events]
        # compose the pair's losses exactly as the plan composes the claims (parallel over parts)
        total = compose_events(
            {"epsilon": x.epsilon_loss, "delta": 0.0, "partition": ev.partition}
            for x, ev in zip(losses, plan.events, strict=True)
        ).epsilon
        report.losses.append(total)
        report.pairs += 1
        for x in losses:
            report.per_stage[x.stage] = max(report.per_stage.get(x.stage, 0.0), x.epsilon_loss)
            if x.sensitivity > 0:
                report.max_sensitivity_ratio = max(report.max_sensitivity_ratio,
                                                   x.shift / x.sensitivity)
            report.max_delta_at_claim = max(report.max_delta_at_claim, x.delta_at_claim)
        if total >= report.max_loss:
            report.max_loss, report.closest_pair = total, name
            worst = (frame if first is None else first, other)
        if progress:
            progress("neighbours", i + 1, pairs)
    if report.max_loss > cost.epsilon * (1 + TOL) + TOL:
        report.problems.append(
            f"gray-box privacy loss {report.max_loss:.6g} exceeds the claimed ε = {cost.epsilon:g} "
            f"(pair: {report.closest_pair})")
    if report.max_sensitivity_ratio > 1 + TOL:
        report.problems.append(
            f"a mechanism input moved {report.max_sensitivity_ratio:.6g}× its stated sensitivity")
    if cost.delta > 0 and report.max_delta_at_claim > cost.delta * (1 + TOL):
        report.problems.append(
            f"δ at the claimed ε is {report.max_delta_at_claim:.3g} > claimed δ = {cost.delta:g}")
    if trials > 0 and worst is not None:
        outs: list[list[FloatArray]] = [[], []]
        for side_i, data in enumerate(worst):
            for t in range(trials):
                release = method.run(spec, data, plan, side, rng=np.random.default_rng(t),
                                     noise=NoiseGuard(plan, test_seed=2 * t + side_i))
                outs[side_i].append(adapter.output_vector(release))
                if progress:
                    progress("releases", side_i * trials + t + 1, 2 * trials)
        report.lower_bound = epsilon_lower_bound(np.array(outs[0]), np.array(outs[1]), rng=rng)
        if report.lower_bound.epsilon_lb > cost.epsilon * (1 + TOL):
            lb = report.lower_bound
            report.problems.append(
                f"black-box ε lower bound {lb.epsilon_lb:.3g} (at {lb.confidence:.0%} confidence, "
                f"event: {lb.event}) exceeds the claimed ε = {cost.epsilon:g}")
    return report
