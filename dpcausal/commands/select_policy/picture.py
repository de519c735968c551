"""select-policy's picture, ``selection.png`` (issue 16, DESIGN principle 9): how sure the choice
(and, with ``value_release``, the released value) is.

Drawn from ``selection.json`` and the public outcome bounds only — post-processing of released
values and public parameters, no ε. Left: the exponential mechanism's guarantee,
P(chosen policy's DR value ≥ best − t) ≥ 1 − α(t), traced by evaluating the very formula of
``value_gap`` (:func:`dpcausal.commands.select_policy.penalty.value_gap`) over a grid of α, with the
plan's ``value_gap`` at 1 − α marked. Right (with ``value_release``): the released value, its noise
interval and the outcome bounds.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from dpcausal.commands.select_policy.penalty import value_gap
from dpcausal.intervals import band_title, band_wider_than_range, draw_error_bars
from dpcausal.mechanisms.noise_law import laplace_halfwidth

ALPHA_FLOOR = 1e-3
"""The curve is drawn down to α = min(α/10, this) (levels up to at least 99.9%)."""


def guarantee_curve(doc: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(t, 1 − α) along the guarantee: t = value_gap(Δ, n, ε, M, α) for α from (M − 1)/M (t = 0,
    the level of a uniform draw) down to :data:`ALPHA_FLOOR`, from the document's public fields."""
    priv, size = doc["privacy"], int(doc["library"]["size"])
    alpha = 1.0 - float(doc["accuracy"]["level"])
    floor = min(alpha / 10.0, ALPHA_FLOOR)
    if size < 2:  # one policy: it is the best, surely
        return np.array([0.0, float(doc["accuracy"]["value_gap"])]), np.ones(2)
    alphas = np.geomspace((size - 1) / size, floor, 400)
    t = np.array([value_gap(float(priv["sensitivity"]), int(priv["n"]), float(priv["epsilon"]),
                            size, float(a)) for a in alphas])
    return t, 1.0 - alphas


def plot_selection(doc: dict[str, Any], bounds: tuple[float, float]) -> bytes:
    """A PNG of the choice's guarantee (and the released value, if any); ``bounds``: the public
    range of the value (the outcome bounds on the outcome's scale; [−B, B] in regime fixed)."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    acc = doc["accuracy"]
    level, gap, units = float(acc["level"]), float(acc["value_gap"]), str(acc["units"])
    value = doc.get("value_release")
    panels = 2 if value is not None else 1
    fig = Figure(figsize=(5.0 * panels + 1.0, 4.0), dpi=100)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    ax = axes[0]
    t, lv = guarantee_curve(doc)
    span = bounds[1] - bounds[0]
    ax.plot(t, lv, color="tab:blue", linewidth=1.5,
            label="guaranteed probability (a bound, any utilities)")
    ax.plot([gap], [level], "o", color="tab:red",
            label=f"value_gap = {gap:.3g} at {level * 100:g}%")
    ax.axvline(gap, color="tab:red", linestyle="--", linewidth=0.8)
    ax.axhline(level, color="tab:red", linestyle="--", linewidth=0.8)
    if span <= float(t.max()):
        ax.axvline(span, color="grey", linestyle=":", linewidth=0.8,
                   label=f"width of the public range [{bounds[0]:g}, {bounds[1]:g}]")
    ax.set_xlabel(f"t ({units})")
    ax.set_ylabel("P(chosen policy's DR value ≥ best − t) ≥")
    ax.set_ylim(0.0, 1.02)
    ax.legend(loc="lower right", fontsize=7)
    ax.set_title(f"the choice among M = {doc['library']['size']} policies "
                 f"(ε = {doc['privacy']['epsilon']:g})", fontsize=8)
    title = band_title(f"select-policy chose '{doc['selected']['name']}'", wide=gap > span,
                       value_range=bounds, what=f"the {level * 100:g}% value gap")
    if value is not None:
        title = _draw_value(axes[1], value, str(doc["selected"]["name"]), bounds, title)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _draw_value(ax: Any, value: dict[str, Any], name: str, bounds: tuple[float, float],
                title: str) -> str:
    """The released value with its (clamped) noise interval and the bounds; returns the title."""
    iv = value["interval"]
    level, est = float(iv["level"]), float(value["estimate"])
    err = np.array([[est - float(iv["lo"])], [float(iv["hi"]) - est]])
    draw_error_bars(ax, [name], [est], err, level=level, label="released value")
    for b in bounds:
        ax.axvline(b, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("released DR value" + (" (clamped to the bounds)" if "clamped" in value else ""))
    ax.legend(loc="best", fontsize=7)
    ax.set_title(f"value_release (ε = {value['epsilon']:g}), dotted: the bounds", fontsize=8)
    h = laplace_halfwidth(float(value["laplace_scale"]), 1.0 - level)
    return band_title(title, wide=band_wider_than_range([h], bounds), value_range=bounds,
                      what="the value's noise interval")
