"""Issue 16 plumbing: the output convention (intervals, clamping), the band plot, the planner, the
guard and the spec fields, on their own (the commands' wiring is tested with each command)."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcausal.accounting.events import PrivacyEvent
from dpcausal.accounting.plan import PredictedAccuracy, PrivacyPlan
from dpcausal.errors import AccuracyRefusedError, SpecError
from dpcausal.intervals import (
    add_interval_columns,
    band_title,
    band_wider_than_range,
    clamp,
    draw_band,
    draw_error_bars,
    interval_record,
    summary_interval,
)
from dpcausal.planner import check_accuracy, plan_target, smallest_epsilon, smallest_n
from dpcausal.spec.base import AccuracySpec, PrivacySpec

finite = st.floats(-1e6, 1e6, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=20), finite, st.floats(0, 1e6))
def test_clamping_never_moves_a_value_inside_the_bounds(vals: list[float], lo: float,
                                                        width: float) -> None:
    bounds = (lo, lo + width)
    out, moved = clamp(vals, bounds)
    v = np.asarray(vals)
    inside = (v >= bounds[0]) & (v <= bounds[1])
    assert np.array_equal(out[inside], v[inside])  # bit for bit
    assert not moved[inside].any()
    assert moved[~inside].all()
    assert np.all((out >= bounds[0]) & (out <= bounds[1]))


def test_interval_record_and_clamp_record() -> None:
    rec = interval_record(0.4, 0.1, alpha=0.05, law="Laplace(b=1)")
    assert rec == {"estimate": 0.4, "interval": {"lo": pytest.approx(0.3), "hi": 0.5,
                                                 "level": 0.95, "kind": "noise",
                                                 "law": "Laplace(b=1)", "bound": False}}
    rec = interval_record(1.3, 0.5, alpha=0.1, law="x", bounds=(0.0, 1.0), bound=True)
    assert rec["estimate"] == 1.0
    assert rec["clamped"] == {"bounds": [0.0, 1.0], "unclamped": 1.3}
    assert rec["interval"]["lo"] == pytest.approx(0.8) and rec["interval"]["hi"] == 1.0
    assert rec["interval"]["bound"] is True
    total = interval_record(2.0, 1.0, alpha=0.05, law="y", kind="total")
    assert "interval" not in total and total["total_interval"]["kind"] == "total"
    assert "clamped" in summary_interval(interval_record(5.0, 1.0, alpha=0.05, law="z",
                                                         bounds=(0.0, 1.0)))


def test_clamped_interval_still_covers() -> None:
    """If |noise| ≤ h and the value without noise lies in the bounds, the clamped interval holds
    it: clamping never lowers the coverage."""
    rng = np.random.default_rng(0)
    truth = rng.uniform(0.0, 1.0, 5000)
    noise = rng.uniform(-0.3, 0.3, 5000)
    frame = add_interval_columns(pd.DataFrame({"q": truth + noise}), "q", 0.3, bounds=(0.0, 1.0))
    assert np.all((frame["q_noise_lo"] <= truth) & (truth <= frame["q_noise_hi"]))
    assert list(frame.columns) == ["q", "q_noise_lo", "q_noise_hi", "q_clamped"]
    assert frame["q"].between(0.0, 1.0).all()
    assert frame["q_clamped"].to_numpy().tolist() == ((truth + noise < 0) |
                                                      (truth + noise > 1)).tolist()


def test_band_plot_says_when_the_band_is_wider_than_the_range() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    assert band_wider_than_range([0.2, 0.6], (0.0, 1.0))
    assert not band_wider_than_range([0.2, 0.4], (0.0, 1.0))
    assert not band_wider_than_range([5.0], None)
    fig = Figure()
    ax1, ax2 = fig.subplots(1, 2)
    wide = draw_band(ax1, [1, 2, 3], [0.2, 1.5, 0.4], [0.1, 0.9, 0.1], bounds=(0.0, 1.0),
                     level=0.95)
    assert wide
    title = band_title("path", wide=wide, value_range=(0.0, 1.0))
    assert "wider than the public range [0, 1]" in title
    assert band_title("path", wide=False, value_range=(0.0, 1.0)) == "path"
    draw_error_bars(ax2, ["a", "b"], [0.1, -0.2], [0.05, 0.3], level=0.95)
    fig.savefig(io.BytesIO(), format="png")


def _plan(halfwidth: float, *, headline: bool = True) -> PrivacyPlan:
    ev = PrivacyEvent("laplace", "s", 1.0, 0.0, 1.0, "l1", 1.0)
    acc = (PredictedAccuracy("q", "units", halfwidth, 0.05, "noise", "law", headline=headline),
           PredictedAccuracy("other", "units", 2 * halfwidth, 0.05, "noise", "law"))
    return PrivacyPlan("test", (ev,), {}, "pure", True, accuracy=acc)


def _replan(eps: float | None, n: int | None) -> PrivacyPlan:
    """Half-width 3/(ε·sqrt(n)), refused (a SpecError, as a plan does) below ε = 1e-3."""
    e = 1.0 if eps is None else eps
    if e < 1e-3:
        raise SpecError("ε too small")
    return _plan(3.0 / (e * math.sqrt(n or 100)))


def test_smallest_epsilon_and_n() -> None:
    # 3/(ε·10) ≤ 0.05 ⇔ ε ≥ 6
    assert smallest_epsilon(_replan, "q", 0.05, 1.0) == 6.0
    assert smallest_epsilon(_replan, "q", 0.05, 100.0) == 6.0
    eps = smallest_epsilon(_replan, "q", 0.0123, 1.0)
    assert eps is not None and 3.0 / (eps * 10) <= 0.0123 and eps <= 24.4 * 1.002
    assert smallest_epsilon(_replan, "q", 1e-12, 1.0) is None  # beyond ε = 1e6
    assert smallest_epsilon(_replan, "q", 1e9, 1.0) == 1e-3  # the plan refuses below it
    # 3/sqrt(n) ≤ 0.1 ⇔ n ≥ 900
    assert smallest_n(_replan, "q", 0.1, 100) == 900
    assert smallest_n(_replan, "q", 0.3, 5000) == 100


def test_plan_target_and_guard() -> None:
    plan = _replan(None, None)
    report = plan_target(plan, _replan, target=0.05, quantity=None, epsilon=1.0, n_rows=100)
    assert (report.quantity, report.epsilon, report.n) == ("q", 6.0, 3600)
    assert report.to_dict()["smallest_epsilon"] == 6.0
    assert any("smallest ε that meets it: 6" in line for line in report.lines())
    other = plan_target(plan, _replan, target=0.05, quantity="other", epsilon=1.0, n_rows=100)
    assert other.epsilon == 12.0
    check_accuracy(plan, _replan, max_halfwidth=None, quantity=None, epsilon=1.0)
    check_accuracy(plan, _replan, max_halfwidth=0.3, quantity=None, epsilon=1.0)
    with pytest.raises(AccuracyRefusedError, match=r"ε = 6 would meet it") as exc:
        check_accuracy(plan, _replan, max_halfwidth=0.05, quantity=None, epsilon=1.0)
    assert exc.value.exit_code == 3 and exc.value.field == "accuracy.max_halfwidth"
    with pytest.raises(SpecError, match="not a quantity of test; choose one of: q, other"):
        check_accuracy(plan, _replan, max_halfwidth=0.05, quantity="nope", epsilon=1.0)
    bare = PrivacyPlan("bare", plan.events, {}, "pure", True)
    with pytest.raises(SpecError, match="does not predict the accuracy"):
        check_accuracy(bare, _replan, max_halfwidth=0.05, quantity=None, epsilon=1.0)
    with pytest.raises(SpecError, match="--target-halfwidth"):
        plan_target(plan, _replan, target=-1.0, quantity=None, epsilon=1.0, n_rows=100)


def test_accuracy_spec_and_epsilon_override() -> None:
    assert AccuracySpec().alpha == 0.05 and AccuracySpec().max_halfwidth is None
    with pytest.raises(ValueError, match="alpha"):
        AccuracySpec(alpha=0.7)
    with pytest.raises(ValueError, match="max_halfwidth"):
        AccuracySpec(max_halfwidth=0.0)
    priv = PrivacySpec(epsilon=1.0)
    assert priv.with_epsilon(2.5).epsilon == 2.5
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(SpecError, match="--epsilon"):
            priv.with_epsilon(bad)


def test_n_search_when_the_plan_refuses_the_largest_n() -> None:
    """A plan may refuse a huge n (cate: δ must stay < 1/n); the planner still finds the n that
    meets a target below it (regression: it reported that more rows do not help)."""

    def capped(eps: float | None, n: int | None) -> PrivacyPlan:
        if (n or 100) > 20_000:
            raise SpecError("δ is not < 1/n")
        return _replan(eps, n)

    assert smallest_n(capped, "q", 0.1, 100) == 900
    report = plan_target(capped(None, None), capped, target=0.05, quantity=None, epsilon=1.0,
                         n_rows=100)
    assert report.n == 3600
