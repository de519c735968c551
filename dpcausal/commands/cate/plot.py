"""A PNG of the released CATE curve (1-D grid) or surface (2-D grid), from released values only."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from dpcausal.commands.cate.spec import CateSpec


def plot_png(table: pd.DataFrame, axes: list[str], spec: CateSpec) -> bytes:
    """Draw ``table['cate']`` against the grid axes; post-processing of the release (no cost)."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    fig = Figure(figsize=(6.0, 4.2), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    eps, dlt = spec.privacy.epsilon, spec.privacy.delta
    title = (f"DP-CATE ({spec.cate.learner.upper()}-learner, {spec.cate.mode} mode), "
             f"ε = {eps:g}, δ = {dlt:g}")
    label = ("released τ̂(x)" if spec.cate.outcome_direction == "higher"
             else "released benefit E[Y(control) − Y(treated) | x]")
    if len(axes) == 1:
        order = np.argsort(table[axes[0]].to_numpy())
        ax.plot(table[axes[0]].to_numpy()[order], table["cate"].to_numpy()[order], lw=1.6)
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
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
