"""A reference for the tests: the former pandas reader of synth-control's panel structure (main
before issue 24 moved it to Arrow, :mod:`dpcausal.commands.synth_control.layout`), verbatim but for
its imports. The equality tests hold the new layout to it. Test helper only: nothing in dpcausal
imports it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpcausal.commands.synth_control.panel import (
    MAX_NAMED,
    LongColumns,
    PanelLayout,
    data_columns,
    panel_columns,
    unit_key,
)
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import DataError, SpecError


def plain_value(value: Any) -> Any:
    """A JSON-able form of a unit id or time value."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, pd.Timestamp | dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _pre_mask(spec: SynthControlSpec, times: pd.Series, path: Path | None) -> npt.NDArray[np.bool_]:
    """times < treatment_time, with a clear error when the types cannot be compared."""

    t_star = spec.synth_control.treatment_time
    col = spec.data.columns.time
    if pd.api.types.is_datetime64_any_dtype(times):
        try:
            stamp = pd.Timestamp(t_star)
            if times.dt.tz is not None and stamp.tzinfo is None:
                stamp = stamp.tz_localize(times.dt.tz)
            return np.asarray(times < stamp)
        except (ValueError, TypeError) as exc:
            raise SpecError(
                f"synth_control.treatment_time: {t_star!r} is not a date comparable with the "
                f"dates of column '{col}' of {path}; give it as an ISO date, e.g. 2020-01-01"
            ) from exc
    if pd.api.types.is_numeric_dtype(times) and not pd.api.types.is_bool_dtype(times):
        if isinstance(t_star, bool) or not isinstance(t_star, int | float):
            raise SpecError(
                f"synth_control.treatment_time: column '{col}' of {path} holds numbers; give the "
                f"first post-intervention period as a number (got {t_star!r})"
            )
        return np.asarray(times.to_numpy(dtype=np.float64) < float(t_star))
    if not isinstance(t_star, str):
        raise SpecError(
            f"synth_control.treatment_time: column '{col}' of {path} holds text; give the first "
            f"post-intervention period as text in the same format (got {t_star!r}), e.g. quoted"
        )
    return np.asarray(times.astype(str) < t_star)


def _sorted_times(values: pd.Series, path: Path | None, col: str) -> pd.Series:

    if values.isna().any():
        raise DataError(
            f"{path}: column '{col}' (time) has missing values; every row needs a period")
    return pd.Series(values.unique()).sort_values(ignore_index=True)


def build_layout(spec: SynthControlSpec, frame: pd.DataFrame, path: Path | None) -> PanelLayout:
    """Read the public structure from the unit/time columns (long) or the header and time (wide).

    Refuses a missing target or donor, an unbalanced panel (naming the unit and period), duplicate
    cells, and T0 < 1 or no post period.
    """

    sec = spec.synth_control
    cols = panel_columns(spec)
    if isinstance(cols, LongColumns):
        if frame[cols.unit].isna().any():
            raise DataError(f"{path}: column '{cols.unit}' (unit) has missing values")
        codes, uniques = pd.factorize(frame[cols.unit], sort=False)
        keys = [unit_key(u) for u in uniques]
        by_key = {k: i for i, k in enumerate(keys)}
        if len(by_key) != len(keys):
            raise DataError(f"{path}: column '{cols.unit}' has unit ids that differ only in type "
                            "(e.g. 3 and '3'); make them unique")
        tkey = unit_key(sec.target)
        if tkey not in by_key:
            raise SpecError(f"synth_control.target: unit {sec.target!r} is not in column "
                            f"'{cols.unit}' of {path}; check the target id")
        if sec.donors is not None:
            missing = [d for d in sec.donors if unit_key(d) not in by_key]
            if missing:
                raise SpecError(f"synth_control.donors: unit(s) {', '.join(map(repr, missing))} "
                                f"not in column '{cols.unit}' of {path}")
            donor_idx = [by_key[unit_key(d)] for d in sec.donors]
        else:
            donor_idx = [i for i, k in enumerate(keys) if k != tkey]
        used = [by_key[tkey], *donor_idx]
        if len(used) < 2:
            raise DataError(f"{path}: no donor units besides the target {sec.target!r}")
        pos = np.full(len(uniques), -1, dtype=np.int64)
        pos[used] = np.arange(len(used))
        row_unit = pos[codes]
        keep = row_unit >= 0
        times = _sorted_times(frame.loc[keep, cols.time], path, cols.time)
        row_time = np.searchsorted(times.to_numpy(), frame.loc[keep, cols.time].to_numpy())
        counts = np.bincount(row_unit[keep] * len(times) + row_time,
                             minlength=len(used) * len(times)).reshape(len(used), len(times))
        labels = [uniques[i] for i in used]
        _check_cells(counts, labels, times, path)
        target, donors = uniques[used[0]], tuple(uniques[i] for i in donor_idx)
    else:
        tcol = frame[cols.time]
        times = _sorted_times(tcol, path, cols.time)
        if len(times) != len(tcol):
            dup = tcol[tcol.duplicated()].iloc[0]
            raise DataError(
                f"{path}: period {plain_value(dup)!r} appears in more than one row of column "
                f"'{cols.time}'; the wide layout needs one row per period")
        target = str(sec.target)
        unit_cols = data_columns(spec)[2:]
        donors = tuple(unit_cols)
    pre = _pre_mask(spec, times, path)
    t0 = int(pre.sum())
    if t0 < 1 or t0 == len(times):
        where = "before" if t0 < 1 else "at or after"
        raise SpecError(
            f"synth_control.treatment_time: no period of {path} is {where} {sec.treatment_time!r}; "
            "synth-control needs at least one pre- and one post-intervention period"
        )
    return PanelLayout(sec.layout, target, donors, tuple(times.tolist()), t0)


def _check_cells(counts: npt.NDArray[np.int64], labels: list[Any], times: pd.Series,
                 path: Path | None) -> None:
    """Refuse missing (unit, time) cells and duplicated ones, naming the first few."""
    for bad, what, fix in (
        (counts == 0, "missing", "synth-control needs a balanced panel: every used unit observed "
         "at every period. Fill the cells by a rule that uses only that unit's own series, or drop "
         "the unit or period by a public rule (never because of its values)"),
        (counts > 1, "duplicated", "keep one row per (unit, time)"),
    ):
        if bad.any():
            ui, ti = np.nonzero(bad)
            named = ", ".join(f"unit {plain_value(labels[u])!r} at time {plain_value(times.iloc[t])!r}"
                              for u, t in zip(ui[:MAX_NAMED], ti[:MAX_NAMED], strict=True))
            more = f" (and {len(ui) - MAX_NAMED} more)" if len(ui) > MAX_NAMED else ""
            raise DataError(f"{path}: {len(ui)} {what} panel cell(s): {named}{more}; {fix}")
