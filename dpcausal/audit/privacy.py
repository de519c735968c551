"""``audit privacy``: run a command on neighbouring datasets and measure how distinguishable it is.

Two estimators (issue #5):
- gray-box, exact: the method's own pre-noise values on D and each neighbour D′, pushed through the
  exact privacy loss of each mechanism of the plan (composed basically) and compared with the claim;
  the observed change of each mechanism input is also compared with the sensitivity it was given.
- black-box: on the pair that came closest, many releases on D and D′ (test-seeded noise) and a
  Clopper–Pearson ε lower bound over half-space, ball and singleton events, per stage of the plan
  and sized to reach each stage's claim (``blackbox``, ``estimators``).

A refusal (exit 2 or 3) on one side of a neighbouring pair only is a violation: whether the command
refuses is an output, and it must not depend on one person's row (issue #13).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.budget import compose_events
from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit import blackbox
from dpcausal.audit.estimators import EventLoss, event_loss
from dpcausal.audit.neighbours import Pair
from dpcausal.errors import AuditViolation, DPCausalError, OutputError
from dpcausal.method import MethodDef, Release

FloatArray = npt.NDArray[np.float64]
TOL = 1e-9
COVERAGE = 0.9
"""Below this share of a stage's stated sensitivity the report says an understatement could pass."""


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
    coupled_spec: Callable[[Any], Any] | None = None
    """Optional: the spec both black-box runs use, for commands whose default row split is a
    secret random permutation: the one fixed permutation the gray-box conditions on
    (:func:`dpcausal.commands.common.row_split.for_audit`), so D and D′ are compared under the same
    split — the coupling under which the random split's guarantee is proved."""
    notes: Callable[[Any], list[str]] | None = None
    """Optional: what the report must say about the audited spec (e.g. a data domain widened to
    the one the sensitivity is proven for)."""


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
    ratio_per_stage: dict[str, float] = field(default_factory=dict)
    refused_both: int = 0
    black_box: list[blackbox.StageBound] | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def violation(self) -> bool:
        """True when the claim does not hold."""
        return bool(self.problems)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        q = np.quantile(self.losses, [0.5, 0.9, 1.0]).tolist() if self.losses else []
        bb = None
        if self.black_box is not None:
            lbs = [b.bound.epsilon_lb for b in self.black_box if b.bound is not None]
            bb = {"epsilon_lower_bound": max(lbs, default=0.0),
                  "confidence": 0.95, "releases": sum(2 * b.releases for b in self.black_box),
                  "stages": [b.to_dict() for b in self.black_box]}
        return {
            "command": self.command, "claimed": {"epsilon": self.epsilon, "delta": self.delta},
            "rows": self.rows, "pairs_tried": self.pairs,
            "gray_box": {"max_privacy_loss": self.max_loss, "loss_quantiles_50_90_100": q,
                         "max_loss_per_stage": self.per_stage,
                         "max_sensitivity_ratio": self.max_sensitivity_ratio,
                         "max_sensitivity_ratio_per_stage": self.ratio_per_stage,
                         "max_delta_at_claimed_epsilon": self.max_delta_at_claim,
                         "closest_pair": self.closest_pair,
                         "pairs_refused_on_both_sides": self.refused_both},
            "black_box": bb,
            "verdict": "violation" if self.violation else "pass",
            "problems": self.problems,
            "notes": self.notes,
        }


REFUSALS = (DPCausalError,)
"""What a command raises when it refuses (exit 2 or 3); AuditViolation and OutputError excluded."""


def _attempt(fn: Callable[[], Any]) -> tuple[Any, DPCausalError | None]:
    """(value, None) or (None, the refusal)."""
    try:
        return fn(), None
    except REFUSALS as exc:
        if isinstance(exc, AuditViolation | OutputError):
            raise
        return None, exc


def _refusal(exc: DPCausalError) -> str:
    return f"{type(exc).__name__} (exit {exc.exit_code})"


def run_audit(
    adapter: AuditAdapter,
    spec: Any,
    frame: pd.DataFrame,
    side: dict[str, pd.DataFrame],
    *,
    pairs: int,
    trials: int | None,
    rng: np.random.Generator,
    progress: Callable[[str, int, int], None] | None = None,
) -> AuditReport:
    """Audit ``spec`` on ``frame``: ``pairs`` neighbours (gray-box), then black-box releases on
    the closest pair (``trials`` per side and stage; None: sized to each stage's claim; 0: none)."""
    method = adapter.method
    plan = method.plan(spec, len(frame), side, rng=rng)
    cost = plan.cost
    report = AuditReport(plan.command, cost.epsilon, cost.delta, len(frame))
    if adapter.notes is not None:
        report.notes += adapter.notes(spec)
    base, base_err = _attempt(lambda: adapter.pre_noise(spec, frame, plan, side))
    worst: tuple[pd.DataFrame, pd.DataFrame] | None = None
    answered = base_err is None
    for i, (name, first, other) in enumerate(adapter.neighbours(spec, frame, rng, pairs)):
        if first is None:
            ref, ref_err = base, base_err
        else:
            ref, ref_err = _attempt(functools.partial(adapter.pre_noise, spec, first, plan, side))
        vals, val_err = _attempt(functools.partial(adapter.pre_noise, spec, other, plan, side))
        report.pairs += 1
        if progress:
            progress("neighbours", i + 1, pairs)
        if (ref_err is None) != (val_err is None):
            err = ref_err or val_err
            assert err is not None
            answered = True
            report.problems.append(
                f"the command refuses on one side of a neighbouring pair only ({_refusal(err)} on "
                f"{'D' if ref_err else 'D′'}; pair: {name}): whether it refuses depends on one row")
            continue
        if ref_err is not None:
            report.refused_both += 1
            continue
        answered = True
        if _score_pair(report, plan, name, ref, vals):
            worst = (frame if first is None else first, other)
    if not answered and base_err is not None:
        raise base_err  # every data set refused alike: a spec or data problem, not a leak
    _gray_box_verdict(report, plan)
    if trials != 0 and worst is not None:
        report.black_box = _black_box(adapter, spec, plan, side, worst, report, trials=trials,
                                      seed=int(rng.integers(2**31)))
    return report


def _score_pair(report: AuditReport, plan: PrivacyPlan, name: str, ref: dict[str, Any],
                vals: dict[str, Any]) -> bool:
    """Add one pair's exact losses to the report; True when it is the closest pair so far."""
    losses: list[EventLoss] = [event_loss(ev, ref[ev.stage], vals[ev.stage]) for ev in plan.events]
    # compose the pair's losses exactly as the plan composes the claims (parallel over parts)
    total = compose_events(
        {"epsilon": x.epsilon_loss, "delta": 0.0, "partition": ev.partition}
        for x, ev in zip(losses, plan.events, strict=True)
    ).epsilon
    report.losses.append(total)
    for x in losses:
        report.per_stage[x.stage] = max(report.per_stage.get(x.stage, 0.0), x.epsilon_loss)
        if x.sensitivity > 0:
            ratio = x.shift / x.sensitivity
            report.ratio_per_stage[x.stage] = max(report.ratio_per_stage.get(x.stage, 0.0), ratio)
            report.max_sensitivity_ratio = max(report.max_sensitivity_ratio, ratio)
        report.max_delta_at_claim = max(report.max_delta_at_claim, x.delta_at_claim)
    if total >= report.max_loss:
        report.max_loss, report.closest_pair = total, name
        return True
    return False


def _gray_box_verdict(report: AuditReport, plan: PrivacyPlan) -> None:
    cost = plan.cost
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
    for stage, ratio in report.ratio_per_stage.items():
        if ratio < COVERAGE:
            factor = float(plan.event(stage).params.get("formula_factor", 1.0))
            why = (f" (its stated sensitivity is {factor:.3g}× the proven bound by the spec's "
                   f"choice; of the proven bound they reached {ratio * factor:.3g})"
                   if factor > 1.0 else "")
            report.notes.append(
                f"gray-box: the neighbours moved stage {stage}'s input by at most {ratio:.3g} of its "
                f"stated sensitivity{why}, so an understatement by less than "
                f"{1 / max(ratio, 1e-12):.3g}× would not show here")


def _black_box(adapter: AuditAdapter, spec: Any, plan: PrivacyPlan, side: dict[str, Any],
               pair: tuple[pd.DataFrame, pd.DataFrame], report: AuditReport, *,
               trials: int | None, seed: int) -> list[blackbox.StageBound]:
    method = adapter.method
    if adapter.coupled_spec is not None:
        spec = adapter.coupled_spec(spec)
    d, d_err = _attempt(lambda: blackbox.recorded_run(method, spec, pair[0], plan, side, seed=seed))
    dp, dp_err = _attempt(lambda: blackbox.recorded_run(
        method, spec, pair[1], plan, side, seed=seed + 1,
        replay=d.outputs if d is not None else None))
    if d is None or dp is None:
        err = d_err or dp_err
        assert err is not None
        if (d_err is None) != (dp_err is None):
            report.problems.append(
                f"the command's release refuses on one side of the closest pair only "
                f"({_refusal(err)}): whether it refuses depends on one row")
        else:
            report.notes.append(f"black-box: skipped, the release refused on both sides of the "
                                f"closest pair ({_refusal(err)})")
        return []
    if blackbox.needs_complete_releases(d):
        bounds = [blackbox.complete_bound(method, spec, pair, plan, side, adapter.output_vector,
                                          trials=trials, seed=seed + 2, confidence=0.95)]
    else:
        bounds = blackbox.stage_bounds(d, dp, plan, trials=trials, seed=seed + 2, confidence=0.95)
    for b in bounds:
        lb = b.bound
        if lb is not None and lb.epsilon_lb > b.epsilon * (1 + TOL):
            report.problems.append(
                f"black-box ε lower bound {lb.epsilon_lb:.3g} for {b.stage} (at 95% confidence, "
                f"event: {lb.event}) exceeds its claimed ε = {b.epsilon:g}")
    report.notes += blackbox.describe(bounds)
    return bounds
