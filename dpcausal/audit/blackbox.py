"""The black-box half of ``audit privacy``: ε lower bounds from many releases on one neighbouring pair.

The command runs once on D and once on D′ through a :class:`RecordingGuard` (a noise guard with
test-seeded noise that also checks the plan): it keeps each draw's mechanism and input. On D′ the
guard returns D's outputs for every stage, so each later stage's input on D′ is computed given the
same earlier outputs as on D — the conditional form in which sequential composition claims each
stage's (ε_i, δ_i). Then, per stage:

- output perturbation (every shipped mechanism except objective perturbation): many more outputs
  of the *same mechanism object* at the two recorded inputs, vectorized and streamed in chunks, so
  a broken sampler or scale is exercised exactly as a real release would exercise it;
- objective perturbation (b is data independent; the output is the perturbed solve): complete
  releases of the command, compared with its output vector.

The number of releases follows the stage's claim: enough that an event seen in half of one side's
releases and never on the other gives a bound past ε_i (:func:`releases_needed`), within a cap on
the values drawn; when the cap (or ``--trials``) keeps the ceiling of the test below ε_i, the
stage is reported as not testable by the black box, never silently passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.estimators import (
    MAX_SINGLETONS,
    N_EVENTS,
    LowerBound,
    max_attainable,
    releases_needed,
    streamed_lower_bound,
)
from dpcausal.mechanisms import Draw, NoiseGuard

FloatArray = npt.NDArray[np.float64]
MAX_VALUES = 2**26
"""Cap on the values drawn per stage and side (streamed; ~0.5 GB of float64 in total)."""
CHUNK_VALUES = 2**21
"""Values per streamed chunk (16 MB)."""
MAX_COMPLETE = 1000
"""Cap on complete releases per side (each is a solve)."""
SELECT_MIN, SELECT_MAX = 2000, 50_000
"""Vectorized stages choose their events on this many releases per side (separate from the test)."""
SELECTIONS = ("exponential", "subset_exponential", "subset_family")
"""Event kinds whose releases take few values: the black box also tests each value seen."""
TEST_MIN = 10_000
"""Vectorized stages test at least this many releases per side (cheap; more power below the cap)."""


class RecordingGuard(NoiseGuard):
    """A seeded noise guard that keeps every admitted draw and, on D′, replays D's outputs."""

    def __init__(self, plan: PrivacyPlan, *, test_seed: int,
                 replay: dict[str, Any] | None = None) -> None:
        super().__init__(plan, test_seed=test_seed)
        self.draws: dict[str, Draw] = {}
        self.outputs: dict[str, Any] = {}
        self._replay = replay

    def _draw(self, draw: Draw) -> Any:
        self.draws[draw.stage] = draw
        out = self._replay[draw.stage] if self._replay is not None else super()._draw(draw)
        self.outputs[draw.stage] = out
        return out


@dataclass
class StageBound:
    """The black-box result of one stage (or of complete releases)."""

    stage: str
    epsilon: float
    delta: float
    mode: str
    releases: int
    """Test releases per side (the selection sample is extra)."""
    ceiling: float
    """The largest bound these releases could show (an event on one side only)."""
    bound: LowerBound | None = None

    @property
    def testable(self) -> bool:
        """Whether a violation of this stage's ε could show at all."""
        return self.ceiling > self.epsilon

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        b = self.bound
        return {"stage": self.stage, "claimed_epsilon": self.epsilon, "claimed_delta": self.delta,
                "mode": self.mode, "releases_per_side": self.releases,
                "max_attainable_bound": self.ceiling, "testable": self.testable,
                "epsilon_lower_bound": b.epsilon_lb if b else None,
                "event": b.event if b else None, "p_on_D": b.p_d if b else None,
                "p_on_D_prime": b.p_dprime if b else None}


def recorded_run(method: Any, spec: Any, frame: pd.DataFrame, plan: PrivacyPlan,
                 side: dict[str, Any], *, seed: int,
                 replay: dict[str, Any] | None = None) -> RecordingGuard:
    """Run the command once on ``frame`` through a recording guard (DPCausalError on a refusal)."""
    guard = RecordingGuard(plan, test_seed=seed, replay=replay)
    method.run(spec, frame, plan, side, rng=np.random.default_rng(0), noise=guard)
    guard.check_all_drawn()
    return guard


def _sizes(epsilon: float, delta: float, n_events: int, dim: int, trials: int | None, *,
           vectorized: bool) -> tuple[int, int]:
    """(selection releases, test releases) per side: ``trials`` split in halves, or sized to the
    claim within the caps (values drawn for a vectorized stage, releases for complete ones)."""
    if trials is not None:
        return max(1, trials // 2), max(1, trials - trials // 2)
    test = releases_needed(epsilon, n_events, delta=delta)
    if not vectorized:
        test = min(test, MAX_COMPLETE)
        return test, test
    select = min(max(test, SELECT_MIN), SELECT_MAX)
    return select, max(1, min(max(test, TEST_MIN), MAX_VALUES // max(dim, 1) - select))


def stage_bounds(d: RecordingGuard, dp: RecordingGuard, plan: PrivacyPlan, *,
                 trials: int | None, seed: int, confidence: float) -> list[StageBound]:
    """Vectorized per-stage bounds (every stage must be an output perturbation)."""
    out: list[StageBound] = []
    level = 1 - (1 - confidence) / len(plan.events)  # Bonferroni over the stages
    for i, ev in enumerate(plan.events):
        draw_d, draw_dp = d.draws[ev.stage], dp.draws[ev.stage]
        dim = int(np.asarray(d.outputs[ev.stage]).size)
        n_events = N_EVENTS + (MAX_SINGLETONS if ev.kind in SELECTIONS else 0)
        select, test = _sizes(ev.epsilon, ev.delta, n_events, dim, trials, vectorized=True)
        chunk = max(1, CHUNK_VALUES // max(dim, 1))
        base = seed + 1_000_003 * (i + 1)

        def sampler(draw: Draw, side: int, base: int = base) -> Any:
            return lambda count, part: draw.resample(count, test_seed=base + 2 * part + side)

        ceiling = max_attainable(test, n_events, confidence=level, delta=ev.delta)
        bound = None  # a test whose ceiling is below the claim could never flag it: not run
        if ceiling > ev.epsilon:
            bound = streamed_lower_bound(sampler(draw_d, 0), sampler(draw_dp, 1), n_select=select,
                                         n_test=test, chunk=chunk, confidence=level,
                                         delta=ev.delta)
        out.append(StageBound(ev.stage, ev.epsilon, ev.delta, "mechanism outputs", test, ceiling,
                              bound))
    return out


def complete_bound(method: Any, spec: Any, pair: tuple[pd.DataFrame, pd.DataFrame],
                   plan: PrivacyPlan, side: dict[str, Any], output_vector: Any, *,
                   trials: int | None, seed: int, confidence: float) -> StageBound:
    """The bound from complete releases (for objective perturbation), against the total claim."""
    cost = plan.cost
    select, test = _sizes(cost.epsilon, cost.delta, N_EVENTS, 1, trials, vectorized=False)

    def sampler(frame: pd.DataFrame, side_i: int) -> Any:
        def draw(count: int, part: int) -> FloatArray:
            rows = []
            for t in range(count):
                guard = NoiseGuard(plan, test_seed=seed + 2 * (part * 10**7 + t) + side_i)
                release = method.run(spec, frame, plan, side, rng=np.random.default_rng(0),
                                     noise=guard)
                guard.check_all_drawn()
                rows.append(np.asarray(output_vector(release), dtype=np.float64).ravel())
            return np.array(rows)
        return draw

    ceiling = max_attainable(test, N_EVENTS, confidence=confidence, delta=cost.delta)
    bound = None
    if ceiling > cost.epsilon:
        bound = streamed_lower_bound(sampler(pair[0], 0), sampler(pair[1], 1), n_select=select,
                                     n_test=test, chunk=max(test, 1), confidence=confidence,
                                     delta=cost.delta)
    stages = "+".join(e.stage for e in plan.events)
    return StageBound(stages, cost.epsilon, cost.delta, "complete releases", test, ceiling, bound)


def needs_complete_releases(guard: RecordingGuard) -> bool:
    """True when a stage is an objective perturbation (its output is a solve, not a noised value)."""
    return any(draw.form == "objective" for draw in guard.draws.values())


def describe(bounds: list[StageBound]) -> list[str]:
    """Plain notes on the stages the black box cannot test."""
    return [f"black-box: stage {b.stage} claims ε = {b.epsilon:g} but {b.releases} releases per "
            f"side can show at most {b.ceiling:.3g}: this claim is not testable by the black box, "
            f"which was not run for it (it would need about "
            f"{math.ceil(releases_needed(b.epsilon, N_EVENTS, delta=b.delta))} releases per side)"
            for b in bounds if not b.testable]
