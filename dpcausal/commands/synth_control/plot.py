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
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

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
    ax1.set_title(f"DP synthetic control (ε = {epsilon:g}; {title_note})", fontsize=10)
    ax1.set_ylabel("outcome")
    ax2.set_ylabel("gap")
    ax2.set_xlabel("time")
    if labels is not None:
        step = max(1, len(labels) // 12)
        ax2.set_xticks(x[::step], labels[::step], rotation=45, ha="right")
    fig.subplots_adjust(left=0.1, right=0.97, top=0.93, bottom=0.12 if labels is None else 0.2,
                        hspace=0.08)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
