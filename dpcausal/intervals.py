"""How every command writes a released number with its interval, and clamps it (DESIGN principle 9).

One convention for all commands (README, "How sure is a release?"):

- **Tables**: a released column ``<q>`` gets ``<q>_noise_lo`` and ``<q>_noise_hi`` (the (1 − α)
  interval of the privacy noise) and, where a total interval (sampling error + noise) exists,
  ``<q>_total_lo`` and ``<q>_total_hi``. A column with public bounds is clamped to them and gets
  a boolean ``<q>_clamped`` (True where the released value was moved onto a bound).
- **JSON** (documents and the ``--json`` summary): a released number is
  ``{"estimate": v, "interval": {"lo", "hi", "level", "kind", "law", "bound"}}`` with ``kind``
  ``"noise"``, plus ``"total_interval"`` (same keys, ``kind: "total"``) where one exists, plus
  ``"clamped": {"bounds": [lo, hi], "unclamped": raw}`` only when clamping moved the value.
  ``bound: true`` means the interval covers with probability *at least* ``level`` (a public
  bound), ``false`` that ``level`` is its exact coverage under the mechanism's law.

All of it is post-processing of released values and public parameters: it costs no ε.

Clamping never moves a value inside the bounds. An interval is computed around the *unclamped*
value (the mechanism's output, to which the noise law applies) and then intersected with the
bounds: if the noise is within ±h and the value without noise lies inside the bounds, that value
lies in the clamped interval too, so clamping never lowers the coverage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpcausal.accounting.plan import IntervalKind

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]


def clamp(values: npt.ArrayLike, bounds: tuple[float, float] | None
          ) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """``values`` clipped to the public ``bounds`` and where they moved (a value inside the
    bounds is returned bit for bit). ``bounds=None``: nothing is clamped."""
    v = np.asarray(values, dtype=np.float64)
    if bounds is None:
        return v.copy(), np.zeros(v.shape, dtype=bool)
    lo, hi = bounds
    if not lo <= hi:
        raise ValueError(f"clamp bounds must have lo <= hi, got {bounds}")
    out = np.where(v < lo, lo, np.where(v > hi, hi, v))
    return np.asarray(out, dtype=np.float64), np.asarray(out != v)


def interval_bounds(values: npt.ArrayLike, halfwidths: npt.ArrayLike,
                    bounds: tuple[float, float] | None = None) -> tuple[FloatArray, FloatArray]:
    """[v − h, v + h] around the unclamped values, intersected with ``bounds`` (module doc)."""
    v = np.asarray(values, dtype=np.float64)
    h = np.broadcast_to(np.asarray(halfwidths, dtype=np.float64), v.shape)
    lo, hi = v - h, v + h
    if bounds is not None:
        lo, _ = clamp(lo, bounds)
        hi, _ = clamp(hi, bounds)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


def interval_record(value: float, halfwidth: float, *, alpha: float, law: str,
                    kind: IntervalKind = "noise", bound: bool = False,
                    bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    """The JSON form of one released number (module docstring)."""
    clamped, moved = clamp(np.array([value]), bounds)
    lo, hi = interval_bounds(np.array([value]), halfwidth, bounds)
    key = "interval" if kind == "noise" else "total_interval"
    out: dict[str, Any] = {
        "estimate": float(clamped[0]),
        key: {"lo": float(lo[0]), "hi": float(hi[0]), "level": 1.0 - alpha, "kind": kind,
              "law": law, "bound": bound},
    }
    if bool(moved[0]):
        assert bounds is not None
        out["clamped"] = {"bounds": [float(bounds[0]), float(bounds[1])],
                          "unclamped": float(value)}
    return out


def add_interval_columns(frame: pd.DataFrame, column: str, halfwidths: npt.ArrayLike, *,
                         kind: IntervalKind = "noise",
                         bounds: tuple[float, float] | None = None) -> pd.DataFrame:
    """``frame`` with ``<column>_<kind>_lo/_hi`` after ``column`` (and ``<column>_clamped`` when
    ``bounds`` are given); ``column`` itself is clamped to ``bounds``. Returns a new frame."""
    out = frame.copy()
    raw = out[column].to_numpy(dtype=np.float64)
    lo, hi = interval_bounds(raw, halfwidths, bounds)
    at = list(out.columns).index(column) + 1
    new: dict[str, npt.NDArray[Any]] = {f"{column}_{kind}_lo": lo, f"{column}_{kind}_hi": hi}
    if bounds is not None:
        out[column], moved = clamp(raw, bounds)
        new[f"{column}_clamped"] = moved
    for offset, (name, vals) in enumerate(new.items()):
        if name in out.columns:
            out[name] = vals
        else:
            out.insert(at + offset, name, vals)
    return out


def summary_interval(record: dict[str, Any]) -> str:
    """A one-line human form of :func:`interval_record`'s output, for the terminal summary."""
    iv = record.get("interval") or record["total_interval"]
    what = f"{iv['level'] * 100:g}% {iv['kind']} interval" + (" (bound)" if iv["bound"] else "")
    text = f"{record['estimate']:.6g} [{iv['lo']:.6g}, {iv['hi']:.6g}] ({what})"
    if "clamped" in record:
        text += f", clamped to {record['clamped']['bounds']}"
    return text


def band_wider_than_range(halfwidths: npt.ArrayLike,
                          value_range: tuple[float, float] | None) -> bool:
    """Whether any noise band (2h, before clamping) is wider than the public range of the values:
    then the release is mostly noise, and its plot must say so in its title."""
    if value_range is None:
        return False
    span = float(value_range[1]) - float(value_range[0])
    return bool(np.any(2.0 * np.asarray(halfwidths, dtype=np.float64) > span))


def band_title(title: str, *, wide: bool, value_range: tuple[float, float] | None,
               what: str = "the noise band") -> str:
    """``title``, plus a second line saying so when the band is wider than the bounds' range."""
    if not wide or value_range is None:
        return title
    return (f"{title}\nWARNING: {what} is wider than the public range "
            f"[{value_range[0]:g}, {value_range[1]:g}]: this release is mostly noise")


def draw_band(ax: Any, x: npt.ArrayLike, values: npt.ArrayLike, halfwidths: npt.ArrayLike, *,
              bounds: tuple[float, float] | None = None, level: float, color: str = "tab:blue",
              label: str = "released") -> bool:
    """Draw released ``values`` (clamped to ``bounds``) with their noise band on a matplotlib
    ``ax``; dotted lines mark the bounds. Returns :func:`band_wider_than_range` for the title."""
    xs = np.asarray(x)
    shown, _ = clamp(values, bounds)
    lo, hi = interval_bounds(values, halfwidths, bounds)
    ax.fill_between(xs, lo, hi, color=color, alpha=0.2, linewidth=0,
                    label=f"{level * 100:g}% noise band")
    ax.plot(xs, shown, color=color, marker="o", markersize=3, label=label)
    if bounds is not None:
        for b in bounds:
            ax.axhline(b, color="grey", linestyle=":", linewidth=0.8)
    return band_wider_than_range(halfwidths, bounds)


def draw_error_bars(ax: Any, labels: list[str], values: npt.ArrayLike, halfwidths: npt.ArrayLike,
                    *, level: float, color: str = "tab:blue", label: str = "released") -> None:
    """Draw one released value per label (rows, top to bottom) with its noise interval as a
    horizontal error bar on a matplotlib ``ax``, and a zero line."""
    pos = np.arange(len(labels))[::-1]
    ax.errorbar(np.asarray(values, dtype=np.float64), pos,
                xerr=np.asarray(halfwidths, dtype=np.float64), fmt="o", color=color, capsize=3,
                markersize=4, label=f"{label} ± {level * 100:g}% noise interval")
    ax.axvline(0.0, color="grey", linewidth=0.8)
    ax.set_yticks(pos, labels)
