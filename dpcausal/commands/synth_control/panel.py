"""The panel of ``synth-control``: its public structure (units, periods) and the bounded value matrix.

The structure — which units and periods exist, the target, the donor list, T0 — is public under the
method's neighbouring relation (replace one donor's series; n, T, T0 and unit ids are public, spec
§1.3 and §6.4). It is read from the unit and time columns only, before any outcome value
(:func:`dpcausal.commands.synth_control.layout.build_layout`, without pandas); the plan is built
from it. Outcome values are read only at run time, mapped by the public bounds and clipped.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import DataError, MissingBoundsError, SpecError

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]
MAX_NAMED = 3


def unit_key(value: Any) -> str:
    """Normalise a unit id so that 3, 3.0 and "3" match (file types and YAML types differ)."""
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


def plain_value(value: Any) -> Any:
    """A JSON-able form of a unit id or time value (a pandas ``Timestamp`` is a datetime)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True, slots=True)
class LongColumns:
    """The long layout's columns: one row per (unit, period), the outcome in one column."""

    unit: str
    time: str
    outcome: str


@dataclass(frozen=True, slots=True)
class WideColumns:
    """The wide layout's columns: one row per period, one column per unit."""

    time: str


PanelColumns = LongColumns | WideColumns


def panel_columns(spec: SynthControlSpec) -> PanelColumns:
    """The column roles of ``spec``'s layout, each a name; refuses a missing or an extra role."""
    cols = spec.data.columns
    if cols.time is None:
        raise SpecError("data.columns.time: synth-control needs the time column's name")
    if spec.synth_control.layout == "long":
        if cols.unit is None or cols.outcome is None:
            raise SpecError(
                "data.columns: the long layout needs 'unit', 'time' and 'outcome' columns "
                "(or set synth_control.layout: wide for one column per unit)"
            )
        return LongColumns(cols.unit, cols.time, cols.outcome)
    if cols.unit is not None or cols.outcome is not None:
        raise SpecError(
            "data.columns: the wide layout takes only 'time' (every other column is a unit); "
            "remove data.columns.unit/outcome, or use layout: long"
        )
    return WideColumns(cols.time)


def structure_columns(spec: SynthControlSpec) -> list[str]:
    """The public structure columns: unit and time (long), or time (wide)."""
    cols = panel_columns(spec)
    return [cols.unit, cols.time] if isinstance(cols, LongColumns) else [cols.time]


def data_columns(spec: SynthControlSpec) -> list[str]:
    """Columns read at run time: unit/time/outcome (long) or time, target and donors (wide)."""
    cols = panel_columns(spec)
    if isinstance(cols, LongColumns):
        return [cols.unit, cols.time, cols.outcome]
    sec = spec.synth_control
    base = [cols.time]
    units = [str(sec.target)]
    if sec.donors is not None:
        units += [str(d) for d in sec.donors]
    else:  # every other column of the header (the schema only: public)
        from dpcausal.io.tables import inspect_table

        header = inspect_table(spec.data.path).columns
        units += [c for c in header if c not in (cols.time, str(sec.target))]
    return [*base, *units]


@dataclass(frozen=True)
class PanelLayout:
    """The public structure of a balanced panel."""

    layout: str
    target: Any
    donors: tuple[Any, ...]
    times: tuple[Any, ...]
    t0: int

    @property
    def n(self) -> int:
        """Number of donors."""
        return len(self.donors)

    @property
    def periods(self) -> int:
        """T."""
        return len(self.times)

    @property
    def h(self) -> int:
        """Post periods T − T0."""
        return len(self.times) - self.t0

    def to_dict(self) -> dict[str, Any]:
        """Public facts for the plan's details."""
        return {
            "layout": self.layout, "target": plain_value(self.target), "n_donors": self.n,
            "periods_T": self.periods, "pre_periods_T0": self.t0, "post_periods_h": self.h,
            "first_time": plain_value(self.times[0]), "first_post_time": plain_value(self.times[self.t0]),
            "last_time": plain_value(self.times[-1]),
        }


def value_matrix(spec: SynthControlSpec, layout: PanelLayout, frame: pd.DataFrame,
                 path: Path | None) -> tuple[FloatArray, FloatArray]:
    """Raw outcome values: donors X (n × T, rows in ``layout.donors`` order) and target y (T).

    Refuses non-numeric and missing cells, naming the unit and period.
    """
    import pandas as pd

    cols = panel_columns(spec)
    times = pd.Series(layout.times)
    if isinstance(cols, LongColumns):
        codes, uniques = pd.factorize(frame[cols.unit], sort=False)
        order = {unit_key(u): i for i, u in enumerate([layout.target, *layout.donors])}
        pos = np.array([order.get(unit_key(u), -1) for u in uniques], dtype=np.int64)
        row_unit = pos[codes]
        keep = row_unit >= 0
        row_time = np.searchsorted(times.to_numpy(), frame.loc[keep, cols.time].to_numpy())
        values = _numeric(frame.loc[keep, cols.outcome], path, cols.outcome,
                          [layout.target, *layout.donors], row_unit[keep], times, row_time)
        mat = np.full((layout.n + 1, layout.periods), np.nan)
        mat[row_unit[keep], row_time] = values
        if np.isnan(mat).any():  # the structure changed since the plan was made
            raise DataError(f"{path}: the panel's structure changed while running; rerun")
    else:
        sorted_frame = frame.sort_values(cols.time, kind="stable", ignore_index=True)
        units = [str(layout.target), *[str(d) for d in layout.donors]]
        mat = np.empty((len(units), layout.periods))
        for i, u in enumerate(units):
            mat[i] = _numeric(sorted_frame[u], path, u, [u], np.zeros(len(sorted_frame), np.int64),
                              times, np.arange(len(sorted_frame)))
    return mat[1:], mat[0]


def _numeric(series: pd.Series, path: Path | None, column: str, labels: list[Any],
             unit_idx: npt.NDArray[np.int64], times: pd.Series,
             time_idx: npt.NDArray[np.int64]) -> FloatArray:
    """Float values of ``series``; errors name the unit and period of the first bad cell."""
    import pandas as pd

    s = series.astype("float64") if pd.api.types.is_bool_dtype(series) else series
    arr = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    was_missing = series.isna().to_numpy()
    for bad, what in ((np.isnan(arr) & ~was_missing, "non-numeric"),
                      (~np.isfinite(arr), "missing, NaN or infinite")):
        if bad.any():
            idx = np.flatnonzero(bad)
            named = ", ".join(f"unit {plain_value(labels[unit_idx[i]])!r} at time "
                              f"{plain_value(times.iloc[time_idx[i]])!r}" for i in idx[:MAX_NAMED])
            more = f" (and {len(idx) - MAX_NAMED} more)" if len(idx) > MAX_NAMED else ""
            raise DataError(
                f"{path}: column '{column}' has {len(idx)} {what} value(s): {named}{more}; "
                "dpcausal never drops or imputes cells: fix them with a rule that uses only that "
                "unit's own series"
            )
    return arr


@dataclass(frozen=True, slots=True)
class OutcomeMap:
    """The public map of bounds.outcome [lo, hi] into [−1, 1], and its inverse for outputs."""

    lo: float
    hi: float
    kind: str

    @classmethod
    def from_spec(cls, spec: SynthControlSpec) -> OutcomeMap:
        """Refuse when bounds.outcome is missing (never taken from the data)."""
        if spec.bounds.outcome is None:
            raise MissingBoundsError(
                "bounds.outcome is missing: synth-control needs public bounds [lo, hi] on every "
                "outcome value (donors and target) to map them into [-1, 1]; they are never taken "
                "from the data. Add e.g. bounds: {outcome: [0, 300]}"
            )
        lo, hi = spec.bounds.outcome
        return cls(float(lo), float(hi), spec.synth_control.scaling)

    @property
    def unit_scale(self) -> float:
        """Original units per mapped unit (B for scale, (hi − lo)/2 for affine)."""
        if self.kind == "scale":
            return max(abs(self.lo), abs(self.hi))
        return (self.hi - self.lo) / 2.0

    def forward(self, x: FloatArray) -> FloatArray:
        """Clip to [lo, hi], then map: every result lies in [−1, 1]."""
        c = np.clip(x, self.lo, self.hi)
        if self.kind == "scale":
            return np.clip(c / self.unit_scale, -1.0, 1.0)
        return np.clip(2.0 * (c - self.lo) / (self.hi - self.lo) - 1.0, -1.0, 1.0)

    def inverse(self, z: FloatArray) -> FloatArray:
        """Back to original units (post-processing of released values)."""
        if self.kind == "scale":
            return np.asarray(z) * self.unit_scale
        return self.lo + (np.asarray(z) + 1.0) * (self.hi - self.lo) / 2.0

    def to_dict(self) -> dict[str, Any]:
        """The assumption recorded in the receipt."""
        return {"outcome_bounds": [self.lo, self.hi], "scaling": self.kind,
                "mapped_range": [-1.0, 1.0], "clipped": True,
                "unit_scale": self.unit_scale if math.isfinite(self.unit_scale) else None}
