"""``audit privacy`` for ``method: capped``: its neighbours and each mechanism's input.

Neighbours follow the spec's privacy unit: a whole donor series replaced (``donor``), or one
donor's cells each moved by at most contribution/population (``individual``). Planted pairs
attain the stated sensitivities (docs/proofs/synth_control_estimand.md §6): for the nearest
choice, a donor that leaves the k while the runner-up with the opposite post-period values
enters; for a fixed (privately chosen) set, a member's cells moved by the full cell change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.synth_control import capped
from dpcausal.commands.synth_control.capped_plan import scales_of
from dpcausal.commands.synth_control.layout import build_layout
from dpcausal.commands.synth_control.panel import PanelLayout, value_matrix
from dpcausal.commands.synth_control.spec import SynthControlSpec

FloatArray = npt.NDArray[np.float64]
Pair = tuple[str, pd.DataFrame | None, pd.DataFrame]
WithSeries = Callable[[SynthControlSpec, pd.DataFrame, Any, FloatArray], pd.DataFrame]


def conditioning_sets(n: int, k: int) -> FloatArray:
    """One k-subset per donor j (j and the next k − 1 donors, cyclically), as 0/1 rows.

    A fixed set's counterfactual moves only through the changed donor's own cells, weighted 1/k
    if it is a member and 0 otherwise; so the worst case over all C(n, k) sets is reached on a
    row containing the changed donor, and these n rows contain every donor.
    """
    rows = np.zeros((n, n))
    for j in range(n):
        rows[j, [(j + i) % n for i in range(k)]] = 1.0
    return rows


def pre_noise(spec: SynthControlSpec, frame: pd.DataFrame, plan: PrivacyPlan,
              layout: PanelLayout) -> dict[str, Any]:
    """Each mechanism's input on ``frame`` (non-private; audit only), by stage.

    ``nearest``: the released functions of the k nearest donors. ``private``: the donors'
    utilities −d_j, then every later stage conditioned on each set of :func:`conditioning_sets`
    (two-dimensional inputs: the audit takes the worst row).
    """
    sec = spec.synth_control
    scales = scales_of(spec, layout)
    x_raw, y_raw = value_matrix(spec, layout, frame, spec.data.path)
    prep = capped.prepare(x_raw, y_raw, scales, layout.t0)
    stages = {e.stage for e in plan.events}
    slices = capped.block_slices(layout.h, sec.releases.path_blocks)

    def inputs(chosen: FloatArray) -> dict[str, FloatArray]:
        values = capped.released_values(prep, chosen, sec.k, layout.t0, slices)
        return {s: v for s, v in values.items() if s in stages}

    out: dict[str, Any] = {}
    if capped.STAGE_PLACEBOS in stages:
        out.update(placebo_inputs(x_raw, scales, layout.t0,
                                  capped.STAGE_PLACEBO_CHOICE in stages))
    if capped.STAGE_CHOICE not in stages:
        return {**out, **inputs(capped.nearest(prep.d, sec.k))}
    rows = [inputs(s) for s in conditioning_sets(layout.n, sec.k)]
    out[capped.STAGE_CHOICE] = -prep.d
    for stage in rows[0]:
        out[stage] = np.vstack([r[stage] for r in rows])
    return out


def placebo_inputs(x_raw: FloatArray, scales: capped.CappedScales, t0: int,
                   private: bool) -> dict[str, Any]:
    """The placebo stages' inputs. ``private``: the utility matrix, then the effects conditioned
    on, for each donor j, a family in which every other placebo's set contains j (the worst
    case for j, whose own placebo's set is any fixed one)."""
    n = x_raw.shape[0]
    if not private:
        _, effects = capped.placebo_values(x_raw, scales, t0)
        return {capped.STAGE_PLACEBOS: effects}
    k = scales.placebo_k(n)
    pools = capped.placebo_pools(n)
    xb = np.clip(x_raw, scales.lo, scales.hi)
    rows = []
    for j in range(n):
        family = np.zeros((n, n - 1))
        for p in range(n):
            members = list(range(k))  # j's own placebo: any fixed set
            if p != j:
                pos = int(np.flatnonzero(pools[p] == j)[0])
                members = [pos, *[(pos + 1 + i) % (n - 1) for i in range(k - 1)]]
            family[p, members] = 1.0
        rows.append(capped.placebo_effects(xb, family, k, t0))
    return {capped.STAGE_PLACEBO_CHOICE: -capped.placebo_distances(xb, t0),
            capped.STAGE_PLACEBOS: np.vstack(rows)}


def neighbours(spec: SynthControlSpec, frame: pd.DataFrame, rng: np.random.Generator, k: int,
               with_series: WithSeries) -> Iterator[Pair]:
    """``k`` neighbouring pairs under the spec's privacy unit (module docstring)."""
    layout = build_layout(spec, frame, spec.data.path)
    scales = scales_of(spec, layout)
    x_raw, _ = value_matrix(spec, layout, frame, spec.data.path)
    planted: list[Pair] = []
    for i in range(k):
        j = int(rng.integers(layout.n))
        donor = layout.donors[j]
        if i % 3 == 2:
            if not planted:
                planted = [_planted(spec, frame, layout, scales, with_series, at)
                           for at in ("middle", "low end")]
            yield planted[(i // 3) % 2]
        elif scales.person_change is None:
            series = (rng.uniform(scales.lo, scales.hi, layout.periods) if i % 3 else
                      np.where(rng.uniform(size=layout.periods) < 0.5, scales.lo, scales.hi))
            yield (f"donor {donor!r} -> a {'random' if i % 3 else 'corner'} series", None,
                   with_series(spec, frame, donor, series))
        else:
            step = scales.person_change * rng.choice([-1.0, 1.0], layout.periods)
            moved = np.clip(x_raw[j] + step, scales.lo, scales.hi)
            yield (f"one person in donor {donor!r}: every cell moved by ±contribution/population",
                   None, with_series(spec, frame, donor, moved))


def _planted(spec: SynthControlSpec, frame: pd.DataFrame, layout: PanelLayout,
             scales: capped.CappedScales, with_series: WithSeries, at: str) -> Pair:
    """A pair attaining the stated per-period sensitivity.

    The target is constant at the middle (attains the width of a band) or the low end of the
    bounds (attains the RMSPE's bound without a band); k − 1 donors equal it; donor k − 1 (the
    runner-up) and the rest sit, before the treatment, at the far end of every I_t, after it at
    the low end. Donor j (the last) equals the target before and sits at the high end after (D).
    ``nearest``: in D′ donor j is at the far end before (tied with the runner-up, which has the
    lower index and takes its place) and at the low end after, so the counterfactual moves by
    (hi_t − lo_t)/k after the treatment (and by the runner-up's distance before it).
    ``private`` (a fixed set): D′ moves every cell of donor j by the full cell change, away from
    the target before and down after.
    """
    n, t0, k = layout.n, layout.t0, spec.synth_control.k
    y0 = (scales.lo + scales.hi) / 2.0 if at == "middle" else scales.lo
    y = np.full(layout.periods, y0)
    lo_t, hi_t = capped.intervals(y, scales.lo, scales.hi, scales.band)
    far = np.concatenate([hi_t[:t0], lo_t[t0:]])
    base = with_series(spec, frame, layout.target, y)
    for i in range(n - 1):
        base = with_series(spec, base, layout.donors[i], y if i < k - 1 else far)
    j = layout.donors[n - 1]
    a = np.concatenate([y[:t0], hi_t[t0:]])
    step = scales.cell_change
    b = far if scales.choice == "nearest" else np.concatenate(
        [np.minimum(y[:t0] + step, hi_t[:t0]), np.maximum(hi_t[t0:] - step, lo_t[t0:])])
    return (f"donor {j!r} planted (target at the {at} of the bounds): in the k nearest on D, "
            "out on D′ (or its cells moved by the full cell change)",
            with_series(spec, base, j, a), with_series(spec, base, j, b))
