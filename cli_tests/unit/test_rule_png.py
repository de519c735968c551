"""rule.png drawn with Pillow (issue 24): the picture's size, where its marks fall, its round
ticks, and that odd inputs (zero or infinite half-widths, one row, many rows, any covariate name)
still give a PNG."""

from __future__ import annotations

import io
import math
import subprocess
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from dpcausal.commands.common.rule_png import BAND, BLUE, GREY, nice_ticks, plot_rule, tick_label


def _rule(estimates: list[float], halfwidths: list[float], names: list[str] | None = None,
          *, original_units: bool = True) -> dict[str, Any]:
    names = names or [f"x{j}" for j in range(len(estimates))]
    recs = [{"estimate": e, "interval": {"lo": e - h, "hi": e + h}}
            for e, h in zip(estimates, halfwidths, strict=True)]
    return {"privacy": {"epsilon": 1.0},
            "intervals": {"level": 0.95, "bound": False, "theta": recs,
                          "coefficients_original_units": dict(zip(names, recs, strict=True))
                          if original_units else None}}


def _recs(n: int, seed: int = 0) -> pd.DataFrame:
    m = np.random.default_rng(seed).normal(size=n)
    return pd.DataFrame({"margin": m, "margin_noise_lo": m - 0.5, "margin_noise_hi": m + 0.5,
                         "noise_could_flip": np.abs(m) <= 0.5})


def _image(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as im:
        assert im.format == "PNG"
        return np.asarray(im.convert("RGB"))


def _columns_of(rgb: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    return np.flatnonzero(np.all(rgb == np.array(colour, dtype=np.uint8), axis=2).any(axis=0))


@pytest.mark.parametrize(("k", "recs", "size"), [(3, None, (600, 345)), (21, None, (600, 975)),
                                                  (3, 50, (1100, 345))])
def test_the_figure_has_the_size_of_its_panels_and_rows(k: int, recs: int | None,
                                                        size: tuple[int, int]) -> None:
    png = plot_rule(_rule([0.1] * k, [0.2] * k), None if recs is None else _recs(recs),
                    command="owl")
    rgb = _image(png)
    assert (rgb.shape[1], rgb.shape[0]) == size
    assert png == plot_rule(_rule([0.1] * k, [0.2] * k), None if recs is None else _recs(recs),
                            command="owl")  # the same bytes each time (no time stamp)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_an_interval_is_drawn_on_its_side_of_the_zero_line(sign: float) -> None:
    rgb = _image(plot_rule(_rule([sign * 2.0], [0.5]), None, command="owl"))
    zero = int(np.argmax(np.all(rgb == np.array(GREY, dtype=np.uint8), axis=2).sum(axis=0)))
    blue = _columns_of(rgb, BLUE)
    assert blue.size
    if sign > 0:
        assert blue.min() > zero
    else:
        assert blue.max() < zero
    # the interval [1.5, 2.5] is half as long as the distance from 0 to its middle
    span = blue.max() - blue.min()
    centre = (blue.max() + blue.min()) / 2
    assert abs(abs(centre - zero) / span - 2.0) < 0.15


def test_the_margin_panel_draws_the_band_and_the_margins() -> None:
    rgb = _image(plot_rule(_rule([0.1, 0.2], [0.1, 0.1]), _recs(200), command="two-stage"))
    right = rgb[:, rgb.shape[1] // 2:]
    assert _columns_of(right, BAND).size > 300  # the band spans the panel
    assert _columns_of(right, BLUE).size > 300


@pytest.mark.parametrize(("estimates", "halfwidths", "n_recs"), [
    ([0.0, 0.0], [0.0, 0.0], None),  # nothing to scale by
    ([1.0], [math.inf], 1),  # an unbounded interval, one scored row
    ([1e-12, -1e-12], [1e-13, 1e-13], 2),
    ([3e5, -2e5, 1.0], [1e4, 1e4, 1e4], 200_000),  # more rows than pixels
])
def test_odd_inputs_still_give_a_figure(estimates: list[float], halfwidths: list[float],
                                        n_recs: int | None) -> None:
    recs = None if n_recs is None else _recs(n_recs)
    assert _image(plot_rule(_rule(estimates, halfwidths), recs, command="owl")).size


def test_any_covariate_name_and_the_theta_labels() -> None:
    names = ["âge", "体重", "x" * 60, "(intercept)"]
    assert _image(plot_rule(_rule([0.1, 0.2, 0.3, 0.4], [0.1] * 4, names), None,
                            command="owl")).size
    assert _image(plot_rule(_rule([0.1, 0.2], [0.1] * 2, original_units=False), None,
                            command="owl")).size


@given(st.floats(-1e6, 1e6), st.floats(1e-6, 1e6))
def test_ticks_are_round_inside_the_range_and_labelled_exactly(lo: float, width: float) -> None:
    hi = lo + width
    ticks, decimals = nice_ticks(lo, hi)
    assert 1 <= ticks.size <= 9
    # a millionth of the range (well inside a pixel), plus the rounding of ticks near |lo|, |hi|
    slack = 1e-6 * width + 1e-12 * max(abs(lo), abs(hi))
    assert np.all(ticks >= lo - slack) and np.all(ticks <= hi + slack)
    labels = [tick_label(float(t), decimals) for t in ticks]
    assert len(set(labels)) == len(labels)  # distinct ticks read differently
    assert "−0" not in [s.rstrip("0").rstrip(".") for s in labels]


def test_drawing_the_rule_does_not_import_matplotlib() -> None:
    script = ("import sys\nimport pandas as pd\n"
              "from dpcausal.commands.common.rule_png import plot_rule\n"
              "r = {'estimate': 1.0, 'interval': {'lo': 0.5, 'hi': 1.5}}\n"
              "rule = {'privacy': {'epsilon': 1.0}, 'intervals': {'level': 0.95, 'bound': False, "
              "'theta': [r], 'coefficients_original_units': {'x': r}}}\n"
              "recs = pd.DataFrame({'margin': [1.0], 'margin_noise_lo': [0.0], "
              "'margin_noise_hi': [2.0], 'noise_could_flip': [True]})\n"
              "plot_rule(rule, recs, command='owl')\n"
              "print('matplotlib' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "False"


def test_thousands_of_coefficients_share_a_bounded_height() -> None:
    """owl's random features reach 4,097 coefficients: the picture stays a few thousand pixels
    tall and is drawn in well under a second (not 1,436 in tall: ~20 CPU-s, 850 MB)."""
    import time

    k = 4097
    start = time.process_time()
    rgb = _image(plot_rule(_rule([0.1] * k, [0.2] * k, original_units=False), None,
                           command="owl"))
    assert rgb.shape[:2] == (4240, 600)
    assert time.process_time() - start < 5.0
    assert _columns_of(rgb, BLUE).size > 10
