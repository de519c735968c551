"""A PNG of the released CATE curve (1-D grid) or surface (2-D grid), from released values only."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpcausal.commands.cate.spec import CateSpec
from dpcausal.intervals import band_wider_than_range, draw_band

if TYPE_CHECKING:
    import pandas as pd

FloatArray = npt.NDArray[np.float64]


def plot_png(table: pd.DataFrame, axes: list[str], spec: CateSpec, tau: FloatArray,
             halfwidth: float | None, bounds: tuple[float, float], *,
             what: str | None = None) -> bytes:
    """Draw the released τ̂ (``tau``, unclamped; shown clamped to ``bounds``) against the grid
    axes with its noise band (1-D: a band; 2-D: the half-width in the title), naming the
    covariates held fixed (and ``what`` the curve is, e.g. which contrast); post-processing of the
    release (no cost)."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    fig = Figure(figsize=(6.4, 4.6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    eps, dlt = spec.privacy.epsilon, spec.privacy.delta
    level = 1.0 - spec.accuracy.alpha
    lines = [f"DP-CATE ({spec.cate.learner.upper()}-learner, {spec.cate.mode} mode), "
             f"ε = {eps:g}, δ = {dlt:g}"]
    if what is not None:
        lines.append(what)
    fixed = [c for c in table.columns if c not in axes and c in spec.data.columns.covariates]
    if fixed:
        lines.append("held fixed: " + ", ".join(f"{c} = {table[c].iloc[0]:g}" for c in fixed))
    label = ("released τ̂(x)" if spec.cate.outcome_direction == "higher"
             else "released benefit E[Y(control) − Y(treated) | x]")
    wide = False
    if len(axes) == 1:
        order = np.argsort(table[axes[0]].to_numpy())
        xs = table[axes[0]].to_numpy()[order]
        if halfwidth is not None:
            wide = draw_band(ax, xs, tau[order], np.full(len(xs), halfwidth), bounds=bounds,
                             level=level, label=label)
            ax.legend(fontsize=8, loc="best")
        else:
            ax.plot(xs, table["cate"].to_numpy()[order], lw=1.6)
        ax.axhline(0.0, color="grey", lw=0.6)
        ax.set_xlabel(axes[0])
        ax.set_ylabel(label)
    else:
        xs = np.unique(table[axes[0]].to_numpy())
        ys = np.unique(table[axes[1]].to_numpy())
        z = table.set_index([axes[0], axes[1]])["cate"].unstack().reindex(index=xs, columns=ys)
        mesh = ax.pcolormesh(xs, ys, z.to_numpy().T, shading="auto", cmap="viridis")
        fig.colorbar(mesh, ax=ax, label=label)
        ax.set_xlabel(axes[0])
        ax.set_ylabel(axes[1])
        if halfwidth is not None:
            lines.append(f"each value ± {halfwidth:.3g} ({level * 100:g}% noise interval)")
            wide = band_wider_than_range(np.array([halfwidth]), bounds)
    if halfwidth is None:
        lines.append("no noise band: the noise scale depends on the data (gamma_method: search)")
    if wide:
        lines.append("the noise band is wider than the range of any effect: mostly noise")
    ax.set_title("\n".join(lines), fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
