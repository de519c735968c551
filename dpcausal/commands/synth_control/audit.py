"""What ``audit privacy`` needs to drive ``synth-control``: its :data:`ADAPTER`.

Neighbours replace one donor's whole series (pre and post), the target stays; the synthetic panel
keeps the data file's public structure (units, periods) and draws values inside bounds.outcome.
Only the certified methods are auditable this way (DPSC_out, and capped through
:mod:`capped_audit`): DPSC_obj's loss is not that of an output perturbation (and is unbounded,
spec §4.6).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.audit.privacy import AuditAdapter
from dpcausal.commands.synth_control import capped_audit
from dpcausal.commands.synth_control.dpsc import STAGE_COEF, STAGE_POST, ridge_coefficients
from dpcausal.commands.synth_control.layout import build_layout
from dpcausal.commands.synth_control.method import METHOD
from dpcausal.commands.synth_control.panel import (
    LongColumns,
    OutcomeMap,
    PanelLayout,
    panel_columns,
    structure_columns,
    value_matrix,
)
from dpcausal.commands.synth_control.plan import penalty_of
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import SpecError
from dpcausal.io.tables import read_table
from dpcausal.method import Release

FloatArray = npt.NDArray[np.float64]
Pair = tuple[str, pd.DataFrame | None, pd.DataFrame]


def audit_spec(spec: SynthControlSpec) -> SynthControlSpec:
    """The spec to audit: without the figure (its releases are compared, never drawn) and, with
    ``scaling: scale``, bounds.outcome widened to [−B, B], B = max(|lo|, |hi|).

    Notes
    -----
    Both sensitivities (√(2T0/λ) for the coefficients, 2 per post-period cell) are proven for data
    mapped into [−1, 1], and ``scale`` maps x ↦ x/B whatever lo and hi are: the spec with [−B, B]
    has exactly the same mechanism (the same events, the same noise in mapped and original units)
    on a larger data domain that contains the spec's. Bounds such as [0, 300] map onto [0, 1] only,
    where no donor can reach the sensitivities (half of each at most), so a sensitivity understated
    by up to 2× would pass; on [−B, B] the planted pair attains both. The audit thus checks the
    mechanism on the domain its bound is proven for, which covers the spec's own.
    ``affine`` already maps [lo, hi] onto [−1, 1], and ``method: capped`` has no such mapping (its
    planted pairs reach its sensitivities on the spec's own bounds): unchanged.
    """
    spec = spec.model_copy(update={
        "synth_control": spec.synth_control.model_copy(update={"plot": False})})
    omap = OutcomeMap.from_spec(spec)
    if (spec.synth_control.method == "capped" or spec.synth_control.scaling != "scale"
            or -omap.lo == omap.hi):
        return spec
    big = omap.unit_scale
    return spec.model_copy(update={"bounds": spec.bounds.model_copy(
        update={"outcome": (-big, big)})})


def notes(spec: SynthControlSpec) -> list[str]:
    """The report's note on the audited domain."""
    omap = OutcomeMap.from_spec(spec)
    if spec.synth_control.method == "capped" or spec.synth_control.scaling != "scale":
        return []
    return [f"synth-control (scaling: scale) is audited on the outcome domain [{omap.lo:g}, "
            f"{omap.hi:g}], which scale maps onto [-1, 1], the domain its sensitivities are proven "
            "for: the same mechanism as for any bounds within it, so narrower spec bounds are "
            "covered"]


def _layout(spec: SynthControlSpec, frame: pd.DataFrame) -> PanelLayout:
    return build_layout(spec, frame, spec.data.path)


def synthesize(spec: SynthControlSpec, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """A panel with the data file's public structure and uniform values inside bounds.outcome.

    ``n`` (the audit's row count) is ignored: the number of rows is fixed by the public structure.
    """
    omap = OutcomeMap.from_spec(spec)
    frame = read_table(spec.data.path, structure_columns(spec), "panel structure")
    cols = panel_columns(spec)
    if isinstance(cols, LongColumns):
        frame[cols.outcome] = rng.uniform(omap.lo, omap.hi, len(frame))
        return frame
    layout = _layout(spec, frame)
    for unit in [str(layout.target), *map(str, layout.donors)]:
        frame[unit] = rng.uniform(omap.lo, omap.hi, len(frame))
    return frame


def _with_series(spec: SynthControlSpec, frame: pd.DataFrame, unit: Any,
                 values: FloatArray) -> pd.DataFrame:
    """A copy of ``frame`` with ``unit``'s whole series (raw units, time order) replaced."""
    out = frame.copy()
    cols = panel_columns(spec)
    times = pd.Series(_layout(spec, frame).times).to_numpy()  # as value_matrix maps them
    if isinstance(cols, LongColumns):
        rows = (out[cols.unit] == unit).to_numpy()
        pos = np.searchsorted(times, out.loc[rows, cols.time].to_numpy())
        out[cols.outcome] = out[cols.outcome].astype(np.float64)  # an integer column, too
        out.loc[rows, cols.outcome] = values[pos]
    else:
        pos = np.searchsorted(times, out[cols.time].to_numpy())
        out[str(unit)] = values[pos]
    return out


def neighbours(spec: SynthControlSpec, frame: pd.DataFrame, rng: np.random.Generator,
               k: int) -> Iterator[Pair]:
    """``k`` replace-one-donor pairs: random corners, random series, and a planted extremal pair.

    The planted pair (:func:`_planted_pair`) attains both stated sensitivities for bounds that map
    onto [−1, 1]; for bounds mapped onto a smaller range (e.g. [0, 1] by ``scaling: scale`` of
    non-negative bounds) it attains the most that range allows, and the report says how much.
    """
    if spec.synth_control.method == "capped":
        yield from capped_audit.neighbours(spec, frame, rng, k, _with_series)
        return
    omap = OutcomeMap.from_spec(spec)
    layout = _layout(spec, frame)
    lo_m, hi_m = (float(v) for v in omap.forward(np.array([omap.lo, omap.hi])))
    periods = layout.periods
    lam = penalty_of(spec, layout).lam
    quiet: pd.DataFrame | None = None
    for i in range(k):
        j = int(rng.integers(layout.n))
        donor = layout.donors[j]
        kind = i % 3
        if kind == 0:
            series = np.where(rng.uniform(size=periods) < 0.5, omap.lo, omap.hi)
            yield f"donor {donor!r} -> a corner of the bounds", None, _with_series(spec, frame, donor, series)
        elif kind == 1:
            series = rng.uniform(omap.lo, omap.hi, periods)
            yield f"donor {donor!r} -> a random series", None, _with_series(spec, frame, donor, series)
        else:
            if quiet is None:
                quiet = _quiet_base(spec, frame, layout, lo_m, hi_m)
            yield _planted_pair(spec, quiet, layout, donor, lam, lo_m, hi_m)


def _y_star(lo_m: float, hi_m: float) -> float:
    """The mapped bound of largest magnitude."""
    return hi_m if abs(hi_m) >= abs(lo_m) else lo_m


def _quiet_base(spec: SynthControlSpec, frame: pd.DataFrame, layout: PanelLayout, lo_m: float,
                hi_m: float) -> pd.DataFrame:
    """Every donor at the mapped value nearest 0, the target at y* (see :func:`_planted_pair`)."""
    omap = OutcomeMap.from_spec(spec)
    zero = float(np.clip(0.0, lo_m, hi_m))
    base = frame
    for other in layout.donors:
        base = _with_series(spec, base, other, omap.inverse(np.full(layout.periods, zero)))
    return _with_series(spec, base, layout.target,
                        omap.inverse(np.full(layout.periods, _y_star(lo_m, hi_m))))


def _planted_pair(spec: SynthControlSpec, base: pd.DataFrame, layout: PanelLayout, donor: Any,
                  lam: float, lo_m: float, hi_m: float) -> Pair:
    """The pair that moves both mechanisms' inputs as far as the mapped bounds allow.

    On ``base`` (:func:`_quiet_base`) every other donor is at the mapped value nearest 0 and the
    target's pre-period at the mapped bound of largest magnitude y*, so the donor's ridge weight
    is c·y*·T0/(c²T0 + λ/2) for its constant pre-period value c: D and D′ put c at the maximiser
    and the minimiser of that over [lo, hi] (κ = √(λ/(2T0)) vs −κ for symmetric bounds, which
    attains Δ = √(2T0/λ), spec §3.3). The donor's post-period is at hi in D and lo in D′ (every
    entry moves by hi − lo: 2 for [−1, 1]).
    """
    omap = OutcomeMap.from_spec(spec)
    periods, t0 = layout.periods, layout.t0
    y_star = _y_star(lo_m, hi_m)
    grid = np.unique(np.concatenate([np.linspace(lo_m, hi_m, 2001), np.clip(
        [math.sqrt(lam / (2 * t0)), -math.sqrt(lam / (2 * t0))], lo_m, hi_m)]))
    coef = grid * y_star * t0 / (grid * grid * t0 + lam / 2)
    c_a, c_b = float(grid[np.argmax(coef)]), float(grid[np.argmin(coef)])
    a = np.concatenate([np.full(t0, c_a), np.full(periods - t0, hi_m)])
    b = np.concatenate([np.full(t0, c_b), np.full(periods - t0, lo_m)])
    return (f"donor {donor!r} planted at the ridge weight's extremes (pre) and hi vs lo (post), "
            "every other donor at 0", _with_series(spec, base, donor, omap.inverse(a)),
            _with_series(spec, base, donor, omap.inverse(b)))


def pre_noise(spec: SynthControlSpec, frame: pd.DataFrame, plan: PrivacyPlan,
              side: dict[str, pd.DataFrame]) -> dict[str, FloatArray]:
    """Each mechanism's input: f_reg (step 1) and the mapped post-period donor matrix (step 2);
    for ``method: capped`` those of :func:`capped_audit.pre_noise`."""
    if spec.synth_control.method == "capped":
        return capped_audit.pre_noise(spec, frame, plan, _layout(spec, frame))
    if spec.synth_control.method != "out":
        raise SpecError("synth_control.method: audit privacy covers method: out only; DPSC_obj "
                        "(method: obj) has no DP guarantee to audit (spec §4.6)")
    layout = _layout(spec, frame)
    omap = OutcomeMap.from_spec(spec)
    x_raw, y_raw = value_matrix(spec, layout, frame, spec.data.path)
    x, y = omap.forward(x_raw), omap.forward(y_raw)
    t0 = layout.t0
    f_reg = ridge_coefficients(x[:, :t0], y[:t0], float(plan.details["lambda"]))
    return {STAGE_COEF: f_reg, STAGE_POST: x[:, t0:].ravel()}


def output_vector(release: Release) -> FloatArray:
    """The released post-period counterfactual path (after the average effect, for capped)."""
    table = release.tables["counterfactual"]
    path = (table.loc[table["period"] == "post", "counterfactual"].to_numpy(dtype=np.float64)
            if "counterfactual" in table.columns else np.zeros(0))
    doc = release.documents["effect.json"]
    if isinstance(doc.get("average_post_effect"), dict):
        return np.concatenate([[doc["average_post_effect"]["estimate"]], path])
    return path


ADAPTER = AuditAdapter(METHOD, "synth_control", synthesize, neighbours, pre_noise, output_vector,
                       audit_spec=audit_spec, notes=notes)
"""synth-control's audit adapter (listed in :data:`dpcausal.commands.COMMANDS`)."""
"""(synthesize, neighbours, pre_noise, output_vector), in AuditAdapter's order."""
