"""The path and gap plot of ``synth-control``, drawn from the released table only (Agg backend)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd


def _x_values(times: pd.Series) -> tuple[Any, list[str] | None]:
    """Plot numeric and date periods as they are; anything else at positions with labels."""
    if pd.api.types.is_numeric_dtype(times) and not pd.api.types.is_bool_dtype(times):
        return times.to_numpy(dtype=np.float64), None
    try:
        return pd.to_datetime(times).to_numpy(), None
    except (ValueError, TypeError):
        return np.arange(len(times), dtype=np.float64), [str(t) for t in times]


def plot_png(table: pd.DataFrame, *, target: str, epsilon: float, title_note: str) -> bytes:
    """Two panels: observed target vs private counterfactual (path), and their gap (effect).

    ``table`` is the released ``counterfactual`` table; nothing else is drawn. The pre-period
    shows only the public observed target (no synthetic pre-fit is released).
    """
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    x, labels = _x_values(table["time"])
    post = (table["period"] == "post").to_numpy()
    first_post = x[post][0]
    fig = Figure(figsize=(8.0, 6.0), dpi=100)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    ax1.plot(x, table["observed"], color="black", label=f"observed {target} (public)")
    ax1.plot(x[post], table.loc[post, "counterfactual"], color="tab:blue", linestyle="--",
             marker="o", markersize=3, label="private synthetic counterfactual")
    ax2.plot(x[post], table.loc[post, "effect"], color="tab:red", marker="o", markersize=3,
             label="effect = observed − counterfactual")
    ax2.axhline(0.0, color="grey", linewidth=0.8)
    for ax in (ax1, ax2):
        ax.axvline(first_post, color="grey", linestyle=":", linewidth=1.0)
        ax.legend(loc="best", fontsize=8)
    return _finish(fig, (ax1, ax2), x, labels,
                   f"DP synthetic control (ε = {epsilon:g}; {title_note})", top=0.93)


def _finish(fig: Any, axes: tuple[Any, Any], x: Any, labels: list[str] | None, title: str, *,
            top: float) -> bytes:
    """Title, axis labels (the effect's in two lines, never cut off), ticks; the PNG bytes."""
    ax1, ax2 = axes
    ax1.set_title(title, fontsize=10)
    ax1.set_ylabel("outcome")
    ax2.set_ylabel("effect\n(observed − synthetic)")
    ax2.set_xlabel("time")
    if labels is not None:
        step = max(1, len(labels) // 12)
        ax2.set_xticks(x[::step], labels[::step], rotation=45, ha="right")
    fig.subplots_adjust(left=0.13, right=0.97, top=top, bottom=0.12 if labels is None else 0.2,
                        hspace=0.08)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def plot_capped_png(table: pd.DataFrame, *, target: str, epsilon: float,
                    average: dict[str, Any], bounds: tuple[float, float], level: float,
                    title: str = "DP synthetic control, k nearest donors") -> bytes:
    """The path with its noise band, and the effect with its band and the released average
    effect as a line with its interval (``capped``: its own, more precise release).

    Drawn from the released table and effect record only. The title says so when a noise band is
    wider than the public range of the outcome (the release is then mostly noise).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from dpcausal.intervals import band_title

    x, labels = _x_values(table["time"])
    post = (table["period"] == "post").to_numpy()
    fig = Figure(figsize=(8.0, 6.4), dpi=100)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    ax1.plot(x, table["observed"], color="black", label=f"observed {target} (public)")
    wide = False
    pct = f"{level * 100:g}%"
    if "counterfactual" in table.columns:
        lo = table.loc[post, "counterfactual_noise_lo"].to_numpy(dtype=np.float64)
        hi = table.loc[post, "counterfactual_noise_hi"].to_numpy(dtype=np.float64)
        ax1.fill_between(x[post], lo, hi, color="tab:blue", alpha=0.2, linewidth=0,
                         label=f"{pct} noise band")
        ax1.plot(x[post], table.loc[post, "counterfactual"], color="tab:blue", linestyle="--",
                 marker="o", markersize=3, label="private synthetic control")
        ax2.fill_between(x[post], table.loc[post, "effect_noise_lo"],
                         table.loc[post, "effect_noise_hi"], color="tab:red", alpha=0.15,
                         linewidth=0, label=f"{pct} noise band of the path")
        ax2.plot(x[post], table.loc[post, "effect"], color="tab:red", marker="o", markersize=3,
                 label="effect path")
        span = float(bounds[1]) - float(bounds[0])
        wide = bool(np.any(hi - lo >= span))
    iv = average["interval"]
    ax2.hlines(average["estimate"], x[post][0], x[post][-1], color="darkred", linewidth=2,
               label=f"average effect {average['estimate']:.4g} [{iv['lo']:.4g}, {iv['hi']:.4g}]")
    ax2.fill_between(x[post], iv["lo"], iv["hi"], color="darkred", alpha=0.12, linewidth=0)
    for b in bounds:
        ax1.axhline(b, color="grey", linestyle=":", linewidth=0.8)
    ax2.axhline(0.0, color="grey", linewidth=0.8)
    for ax in (ax1, ax2):
        ax.axvline(x[post][0], color="grey", linestyle=":", linewidth=1.0)
        ax.legend(loc="best", fontsize=7)
    title = band_title(f"{title} (ε = {epsilon:g})", wide=wide,
                       value_range=bounds, what="the path's noise band")
    return _finish(fig, (ax1, ax2), x, labels, title, top=0.9 if wide else 0.93)
