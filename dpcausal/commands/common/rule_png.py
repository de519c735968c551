"""rule.png of a released linear rule (``owl``, ``two-stage``), drawn with Pillow (issue 24).

The picture is the one the commands drew with matplotlib until issue 24: the coefficients with
their noise intervals as horizontal error bars and, with recommendations, the scored rows'
released margins sorted, with their noise band. Importing ``matplotlib.figure`` alone cost
0.25-0.33 CPU-s and laying out and drawing this figure 0.1 s more: a sixth of owl's whole run at
10⁶ rows, to draw a few dozen lines. Pillow (already installed: matplotlib needs it) imports in
0.01 s and draws it in a few milliseconds.

Everything here is post-processing of the released rule document and of the recommendations
for public rows: it reads no sensitive value. The text uses DejaVu Sans, the font matplotlib
ships (found without importing matplotlib; Pillow's own default font if it is not there), drawn
at twice the size and reduced, so lines and markers are antialiased.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas as pd
    from PIL import ImageDraw, ImageFont

FloatArray = npt.NDArray[np.float64]

DPI = 100
"""Pixels per inch of the written PNG (matplotlib's default figure dpi)."""
SCALE = 2
"""Drawn at this multiple of the final size, then reduced (antialiasing)."""
MAX_ROWS_INCHES = 40.0
"""The coefficient rows take 0.35 in each up to this height (114 rows); more rows share it, and
then only every n-th is labelled (owl's random features reach 4,097 coefficients: a 1,436 in
tall picture took matplotlib ~20 CPU-s and 850 MB)."""
BLUE = (31, 119, 180)
"""matplotlib's ``tab:blue``."""
BAND = (210, 227, 240)
"""``tab:blue`` at alpha 0.2 on white."""
GREY = (128, 128, 128)
BLACK = (0, 0, 0)
WHITE = (255, 255, 255)
MINUS = "\u2212"


def px(points: float) -> int:
    """Typographic points → pixels of the drawing (before the reduction)."""
    return max(1, round(points * DPI / 72.0 * SCALE))


@functools.cache
def font_file() -> str | None:
    """matplotlib's DejaVu Sans (wide Unicode coverage: θ, ε, ±, any covariate name), found
    through the package's location without importing it; None when it is not installed."""
    spec = importlib.util.find_spec("matplotlib")
    for where in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(where) / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
        if path.is_file():
            return str(path)
    return None


@functools.cache
def font(points: float) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """The text font at ``points`` (Pillow's default font when DejaVu Sans is missing)."""
    from PIL import ImageFont

    path = font_file()
    if path is None:
        return ImageFont.load_default(px(points))
    return ImageFont.truetype(path, px(points))


def nice_ticks(lo: float, hi: float, most: int = 8) -> tuple[FloatArray, int]:
    """Round tick values inside [lo, hi] (steps 1, 2, 2.5 or 5 × 10^k, at most ``most`` of them)
    and the number of decimals that labels them exactly."""
    span = hi - lo
    if not (math.isfinite(span) and span > 0.0):
        ends = np.array([lo, hi], dtype=np.float64)
        return ends[np.isfinite(ends)], 6
    power = math.floor(math.log10(span / most))
    mantissa = next(m for m in (1.0, 2.0, 2.5, 5.0, 10.0, 20.0)
                    if span / (m * 10.0 ** power) <= most)
    step = mantissa * 10.0 ** power
    first = math.ceil(lo / step - 1e-9)
    ticks = (first + np.arange(math.floor(hi / step + 1e-9) - first + 1, dtype=np.float64)) * step
    exponent = power + (1 if mantissa >= 10.0 else 0)
    return ticks, max(0, -exponent + (1 if mantissa == 2.5 else 0))


def tick_label(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` decimals, a typographic minus, and no "−0"."""
    text = f"{value:.{decimals}f}"
    if float(text) == 0.0:
        text = text.lstrip("-")
    return text.replace("-", MINUS)


def view(values: list[FloatArray], *, include_zero: bool) -> tuple[float, float]:
    """The data range of the finite ``values`` (and 0), widened by 5 % on each side (a range of
    zero width by one unit)."""
    finite = [v[np.isfinite(v)] for v in values]
    parts = [f for f in finite if f.size] + ([np.zeros(1)] if include_zero else [])
    if not parts:
        return -1.0, 1.0
    lo = float(min(p.min() for p in parts))
    hi = float(max(p.max() for p in parts))
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    return lo - pad, hi + pad


@dataclass(frozen=True)
class Axes:
    """A plotting box on the drawing (pixels) and the data range it shows."""

    left: float
    top: float
    right: float
    bottom: float
    xlim: tuple[float, float]
    ylim: tuple[float, float]

    def x(self, v: npt.ArrayLike) -> FloatArray:
        """Data x → pixel column."""
        x0, x1 = self.xlim
        return np.asarray(self.left + (np.asarray(v, dtype=np.float64) - x0) / (x1 - x0)
                          * (self.right - self.left), dtype=np.float64)

    def y(self, v: npt.ArrayLike) -> FloatArray:
        """Data y → pixel row."""
        y0, y1 = self.ylim
        return np.asarray(self.bottom - (np.asarray(v, dtype=np.float64) - y0) / (y1 - y0)
                          * (self.bottom - self.top), dtype=np.float64)

    def frame(self, draw: ImageDraw.ImageDraw) -> None:
        """The four spines, on whole pixels of the reduced image."""
        draw.rectangle((snap(self.left), snap(self.top), snap(self.right) + SCALE - 1,
                        snap(self.bottom) + SCALE - 1), outline=BLACK, width=SCALE)

    def xticks(self, draw: ImageDraw.ImageDraw) -> float:
        """Ticks and labels under the box; returns the pixel row below the labels."""
        ticks, decimals = nice_ticks(*self.xlim)
        f = font(10)
        tick = px(3.5)
        for t, xp in zip(ticks, self.x(ticks), strict=True):
            draw.line((xp, self.bottom, xp, self.bottom + tick), fill=BLACK, width=px(0.8))
            draw.text((xp, self.bottom + tick + px(3.5)), tick_label(float(t), decimals),
                      fill=BLACK, font=f, anchor="ma")
        return self.bottom + tick + px(3.5) + line_height(10)

    def yticks(self, draw: ImageDraw.ImageDraw, labels: list[str] | None = None,
               positions: npt.ArrayLike | None = None) -> float:
        """Ticks and labels left of the box (``labels`` at ``positions``, else round numbers);
        returns the pixel column left of the widest label."""
        if labels is None or positions is None:
            ticks, decimals = nice_ticks(*self.ylim)
            positions = ticks
            labels = [tick_label(float(t), decimals) for t in ticks]
        f = font(10)
        tick = px(3.5)
        xp = self.left - tick - px(3.5)
        for label, yp in zip(labels, self.y(positions), strict=True):
            draw.line((self.left - tick, yp, self.left, yp), fill=BLACK, width=px(0.8))
            draw.text((xp, yp), label, fill=BLACK, font=f, anchor="rm")
        return xp - max((text_width(s, 10) for s in labels), default=0.0)


def snap(v: float) -> float:
    """The nearest multiple of :data:`SCALE`: a line of width ``SCALE`` there stays one sharp
    pixel wide after the reduction."""
    return float(SCALE * round(v / SCALE))


def text_width(text: str, points: float) -> float:
    """Width of ``text`` in drawing pixels."""
    return float(font(points).getlength(text))


def line_height(points: float) -> int:
    """Height of one line of text in drawing pixels."""
    return round(px(points) * 1.2)


def ylabel(image: Any, text: str, x_right: float, y_mid: float, points: float = 10) -> None:
    """``text`` turned a quarter left, its right edge at ``x_right``, centred on ``y_mid``."""
    from PIL import Image, ImageDraw

    width = math.ceil(text_width(text, points)) + 2
    strip = Image.new("RGB", (width, line_height(points)), WHITE)
    ImageDraw.Draw(strip).text((0, 0), text, fill=BLACK, font=font(points), anchor="la")
    turned = strip.rotate(90, expand=True)
    image.paste(turned, (round(x_right - turned.width), round(y_mid - turned.height / 2)))


def error_bar_panel(draw: ImageDraw.ImageDraw, box: tuple[float, float, float, float],
                    names: list[str], est: FloatArray, half: FloatArray, xlabel: str) -> None:
    """The coefficients (rows, top to bottom) with their intervals, a zero line, in ``box``
    (left, top, right, bottom of the panel's whole area)."""
    left, top, right, bottom = box
    k = len(names)
    pitch = (bottom - top) / max(k, 1)  # about the drawing height of one row
    every = max(1, math.ceil(line_height(10) / pitch))  # label every row, or every n-th
    shown = list(range(0, k, every))
    label_w = max((text_width(names[i], 10) for i in shown), default=0.0)
    axes = Axes(left + label_w + px(3.5) * 2 + px(6), top,
                right - px(10), bottom - px(3.5) * 2 - line_height(10) * 2 - px(4),
                view([est - half, est + half, est], include_zero=True), (-0.6, k - 0.4))
    pos = np.arange(k)[::-1].astype(np.float64)
    xp0 = snap(float(axes.x(0.0)))
    draw.rectangle((xp0, axes.top, xp0 + SCALE - 1, axes.bottom), fill=GREY)
    ys = axes.y(pos)
    cap = min(px(3), max(pitch / 3, 1.0))
    r = min(px(2), max(pitch / 3, 1.0))
    for e, h, yp in zip(est, half, ys, strict=True):
        if np.isfinite(e) and np.isfinite(h):
            a, b = axes.x([e - h, e + h])
            draw.line((a, yp, b, yp), fill=BLUE, width=px(1.5))
            for end in (a, b):
                draw.line((end, yp - cap, end, yp + cap), fill=BLUE, width=px(1.5))
        if np.isfinite(e):
            xe = float(axes.x(e))
            draw.ellipse((xe - r, yp - r, xe + r, yp + r), fill=BLUE)
    axes.frame(draw)
    below = axes.xticks(draw)
    axes.yticks(draw, [names[i] for i in shown], pos[shown])
    draw.text(((axes.left + axes.right) / 2, below + px(2)), xlabel, fill=BLACK, font=font(10),
              anchor="ma")


def margin_panel(image: Any, draw: ImageDraw.ImageDraw, box: tuple[float, float, float, float],
                 m: FloatArray, lo: FloatArray, hi: FloatArray, level: float) -> None:
    """The sorted released margins with their noise band, a zero line and a legend, in ``box``.
    Rows that share a pixel column are drawn as that column's envelope (the same picture as
    every row drawn, whatever the number of rows)."""
    left, top, right, bottom = box
    n = m.size
    ylim = view([lo, hi, m], include_zero=True)
    ticks, decimals = nice_ticks(*ylim)
    label_w = max(text_width(tick_label(float(t), decimals), 10) for t in ticks)
    axes = Axes(left + line_height(10) + px(4) + label_w + px(3.5) * 2, top, right - px(10),
                bottom - px(3.5) * 2 - line_height(10) * 2 - px(4),
                (1.0 - 0.05 * max(n - 1, 1), n + 0.05 * max(n - 1, 1)), ylim)
    cols = np.round(axes.x(np.arange(1, n + 1))).astype(np.int64)
    starts = np.flatnonzero(np.diff(cols, prepend=cols[0] - 1))
    ends = np.append(starts[1:], n) - 1
    xs = cols[starts].astype(np.float64)
    top_edge = axes.y(np.maximum.reduceat(np.where(np.isfinite(hi), hi, ylim[1]), starts))
    low_edge = axes.y(np.minimum.reduceat(np.where(np.isfinite(lo), lo, ylim[0]), starts))
    if xs.size == 1:  # one column: a bar of one pixel's width
        xs = np.array([xs[0] - SCALE, xs[0] + SCALE])
        top_edge, low_edge = np.repeat(top_edge, 2), np.repeat(low_edge, 2)
    draw.polygon([*zip(xs, top_edge, strict=True), *zip(xs[::-1], low_edge[::-1], strict=True)],
                 fill=BAND)
    y0 = snap(float(axes.y(0.0)))
    draw.rectangle((axes.left, y0, axes.right, y0 + SCALE - 1), fill=GREY)
    path = np.column_stack([np.repeat(cols[starts], 2),
                            axes.y(np.column_stack([m[starts], m[ends]]).ravel())])
    draw.line([tuple(p) for p in path], fill=BLUE, width=px(1.2), joint="curve")
    axes.frame(draw)
    below = axes.xticks(draw)
    right_of_labels = axes.yticks(draw)
    draw.text(((axes.left + axes.right) / 2, below + px(2)), "scored rows, sorted by margin",
              fill=BLACK, font=font(10), anchor="ma")
    ylabel(image, "margin (treat when > 0)", right_of_labels - px(4),
           (axes.top + axes.bottom) / 2)
    legend(draw, axes, [(f"{level * 100:g}% noise band", "band"),
                        ("released margin v(x)·θ", "line")])


def legend(draw: ImageDraw.ImageDraw, axes: Axes, entries: list[tuple[str, str]]) -> None:
    """A framed legend in the upper left corner of ``axes``: a filled patch or a line each."""
    size = 7
    pad, key = px(4), px(14)
    width = key + pad * 3 + max(text_width(t, size) for t, _ in entries)
    height = pad * 2 + line_height(size) * len(entries)
    x0, y0 = axes.left + pad, axes.top + pad
    draw.rectangle((x0, y0, x0 + width, y0 + height), fill=WHITE, outline=(204, 204, 204),
                   width=px(0.8))
    for i, (text, kind) in enumerate(entries):
        yc = y0 + pad + line_height(size) * (i + 0.5)
        if kind == "band":
            draw.rectangle((x0 + pad, yc - px(3), x0 + pad + key, yc + px(3)), fill=BAND)
        else:
            draw.line((x0 + pad, yc, x0 + pad + key, yc), fill=BLUE, width=px(1.2))
        draw.text((x0 + pad * 2 + key, yc), text, fill=BLACK, font=font(size), anchor="lm")


def plot_rule(rule: dict[str, Any], recs: pd.DataFrame | None, *, command: str) -> bytes:
    """A PNG of the released rule's coefficients with their noise intervals, and (with
    recommendations) the sorted margins of the scored rows with their band."""
    from PIL import Image, ImageDraw

    iv = rule["intervals"]
    level = float(iv["level"])
    coefs = iv["coefficients_original_units"] or {f"theta[{j}]": r
                                                  for j, r in enumerate(iv["theta"])}
    names = list(coefs)
    est = np.array([coefs[k]["estimate"] for k in names], dtype=np.float64)
    half = np.array([coefs[k]["interval"]["hi"] - coefs[k]["estimate"] for k in names],
                    dtype=np.float64)
    panels = 2 if recs is not None and len(recs) else 1
    what = "a bound" if iv["bound"] else "exact"
    title = [f"{command} rule, ε = {rule['privacy']['epsilon']:g}: "
             f"{level * 100:g}% noise intervals ({what})"]
    if panels == 2:
        assert recs is not None
        share = float(recs["noise_could_flip"].mean())
        title.append(f"{share:.0%} of {len(recs)} recommendations could be flipped by the noise")
    width = round((5.0 * panels + 1.0) * DPI) * SCALE
    height = round((min(0.35 * len(names), MAX_ROWS_INCHES) + 2.4) * DPI) * SCALE
    image = Image.new("RGB", (width, height), WHITE)
    draw = ImageDraw.Draw(image)
    y = px(6)
    for line in title:
        draw.text((width / 2, y), line, fill=BLACK, font=font(9), anchor="ma")
        y += line_height(9)
    top = y + px(10)
    bottom = height - px(4)
    split = width / panels
    error_bar_panel(draw, (px(6), top, split, bottom), names, est, half,
                    ("coefficient, score per unit of x" if iv["coefficients_original_units"]
                     else "θ (mapped features)") + f" ± {level * 100:g}% noise interval")
    if panels == 2:
        assert recs is not None
        order = np.argsort(recs["margin"].to_numpy())
        margin_panel(image, draw, (split + px(6), top, width - px(2), bottom),
                     recs["margin"].to_numpy(dtype=np.float64)[order],
                     recs["margin_noise_lo"].to_numpy(dtype=np.float64)[order],
                     recs["margin_noise_hi"].to_numpy(dtype=np.float64)[order], level)
    buf = io.BytesIO()
    image.reduce(SCALE).save(buf, format="png")
    return buf.getvalue()
