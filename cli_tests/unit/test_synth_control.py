"""synth-control: spec, panel structure, mapping, ridge, sensitivities, step 2 and the plan."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import optimize
from sklearn.linear_model import Ridge

from dpcausal.commands.synth_control import dpsc as core
from dpcausal.commands.synth_control import plan as sc_plan
from dpcausal.commands.synth_control.estimate import run
from dpcausal.commands.synth_control.layout import build_layout
from dpcausal.commands.synth_control.method import METHOD
from dpcausal.commands.synth_control.panel import OutcomeMap, value_matrix
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import DataError, MissingBoundsError, SpecError, UncertifiedModeError
from dpcausal.mechanisms import L2LaplaceMechanism, LaplaceMechanism, NoiseGuard


def make_spec(layout: str = "long", bounds: Any = (0.0, 10.0), privacy: Any = None,
              **section: Any) -> SynthControlSpec:
    cols = ({"unit": "unit", "time": "time", "outcome": "y"} if layout == "long"
            else {"time": "time"})
    doc: dict[str, Any] = {
        "data": {"path": "panel.csv", "columns": cols},
        "privacy": privacy or {"epsilon": 2.0},
        "synth_control": {"target": "A", "treatment_time": 5, "layout": layout, **section},
    }
    if bounds is not None:
        doc["bounds"] = {"outcome": list(bounds)}
    return SynthControlSpec.model_validate(doc)


def long_panel(units: list[Any], times: list[Any], rng: np.random.Generator) -> pd.DataFrame:
    return pd.DataFrame({
        "unit": np.repeat(units, len(times)),
        "time": np.tile(times, len(units)),
        "y": rng.uniform(0, 10, len(units) * len(times)).round(3),
    })


# --- spec -----------------------------------------------------------------------------------------

def test_spec_defaults_and_lambda_alias() -> None:
    spec = make_spec()
    sec = spec.synth_control
    assert (sec.method, sec.ridge_lambda, sec.sensitivity, sec.step2, sec.epsilon_split) == (
        "out", "total", "tight", "auto", 0.5)
    assert make_spec(**{"lambda": 7.5}).synth_control.ridge_lambda == 7.5


@pytest.mark.parametrize("section", [
    {"lambda": 0.0}, {"lambda": -1.0}, {"epsilon_split": 1.0}, {"step2": "entrywise"},
    {"donors": ["B", "B"]}, {"donors": ["A", "B"]}, {"c": 3.0}, {"sensitivity": "tight-y"},
    {"unknown": 1},
])
def test_spec_rejects_bad_fields(section: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - pydantic ValidationError is a ValueError
        make_spec(**section)


# --- panel structure ------------------------------------------------------------------------------

def test_long_layout_structure_and_matrix() -> None:
    rng = np.random.default_rng(0)
    frame = long_panel(["A", "B", "C", "D"], list(range(1, 9)), rng).sample(frac=1, random_state=1)
    spec = make_spec()
    layout = build_layout(spec, frame[["unit", "time"]], None)
    assert (layout.n, layout.t0, layout.h, layout.periods) == (3, 4, 4, 8)
    assert layout.donors == ("B", "C", "D") or set(layout.donors) == {"B", "C", "D"}
    x, y = value_matrix(spec, layout, frame, None)
    piv = frame.pivot(index="unit", columns="time", values="y")
    np.testing.assert_array_equal(y, piv.loc["A"].to_numpy())
    for i, d in enumerate(layout.donors):
        np.testing.assert_array_equal(x[i], piv.loc[d].to_numpy())


def test_explicit_donors_and_numeric_unit_ids() -> None:
    rng = np.random.default_rng(1)
    frame = long_panel([1, 2, 3, 4], list(range(1, 9)), rng)
    spec = make_spec(target="1", donors=[4, "2"])
    layout = build_layout(spec, frame, None)
    assert layout.donors == (4, 2)
    x, _ = value_matrix(spec, layout, frame, None)
    np.testing.assert_array_equal(x[0], frame.loc[frame.unit == 4, "y"].to_numpy())


def test_unbalanced_panel_names_unit_and_time() -> None:
    frame = long_panel(["A", "B", "C"], list(range(1, 9)), np.random.default_rng(2))
    frame = frame[~((frame.unit == "C") & (frame.time == 6))]
    with pytest.raises(DataError, match=r"missing panel cell.*unit 'C' at time 6"):
        build_layout(make_spec(), frame, None)


def test_duplicate_cell_refused() -> None:
    frame = long_panel(["A", "B"], list(range(1, 9)), np.random.default_rng(3))
    frame = pd.concat([frame, frame.iloc[[3]]])
    with pytest.raises(DataError, match=r"duplicated panel cell.*unit 'A' at time 4"):
        build_layout(make_spec(), frame, None)


@pytest.mark.parametrize(("value", "what"), [(np.nan, "missing"), ("abc", "non-numeric")])
def test_bad_cell_names_unit_and_time(value: Any, what: str) -> None:
    frame = long_panel(["A", "B", "C"], list(range(1, 9)), np.random.default_rng(4))
    frame["y"] = frame["y"].astype(object)
    frame.loc[(frame.unit == "B") & (frame.time == 7), "y"] = value
    spec = make_spec()
    layout = build_layout(spec, frame, None)
    with pytest.raises(DataError, match=rf"{what}.*unit 'B' at time 7"):
        value_matrix(spec, layout, frame, None)


def test_target_and_treatment_time_errors() -> None:
    frame = long_panel(["A", "B"], list(range(1, 9)), np.random.default_rng(5))
    with pytest.raises(SpecError, match=r"synth_control\.target"):
        build_layout(make_spec(target="Z"), frame, None)
    with pytest.raises(SpecError, match=r"synth_control\.donors"):
        build_layout(make_spec(donors=["Q"]), frame, None)
    for t in (1, 9, 100):
        with pytest.raises(SpecError, match="treatment_time"):
            build_layout(make_spec(treatment_time=t), frame, None)
    with pytest.raises(SpecError, match="holds numbers"):
        build_layout(make_spec(treatment_time="1989"), frame, None)


def test_date_and_text_times() -> None:
    rng = np.random.default_rng(6)
    dates = list(pd.date_range("2020-01-01", periods=6, freq="MS"))
    frame = long_panel(["A", "B"], dates, rng)
    layout = build_layout(make_spec(treatment_time="2020-04-01"), frame, None)
    assert layout.t0 == 3
    text = long_panel(["A", "B"], ["2020Q1", "2020Q2", "2020Q3"], rng)
    assert build_layout(make_spec(treatment_time="2020Q3"), text, None).t0 == 2


def test_wide_layout_matches_long(tmp_path: Any) -> None:
    rng = np.random.default_rng(7)
    frame = long_panel(["A", "B", "C"], list(range(1, 9)), rng)
    wide = frame.pivot(index="time", columns="unit", values="y").reset_index()
    wide.columns.name = None
    path = tmp_path / "wide.csv"
    wide.iloc[::-1].to_csv(path, index=False)
    doc = make_spec("wide").model_dump(by_alias=True)
    doc["data"]["path"] = path
    spec = SynthControlSpec.model_validate(doc)
    assert METHOD.data_columns(spec) == ["time", "A", "B", "C"]
    wframe = pd.read_csv(path)
    layout = build_layout(spec, wframe, path)
    x, y = value_matrix(spec, layout, wframe, path)
    np.testing.assert_array_equal(y, wide["A"].to_numpy())
    np.testing.assert_array_equal(x, wide[["B", "C"]].to_numpy().T)
    dup = pd.concat([wframe, wframe.iloc[[0]]])
    with pytest.raises(DataError, match="more than one row"):
        build_layout(spec, dup, path)


# --- mapping --------------------------------------------------------------------------------------

def test_outcome_map_scale_and_affine() -> None:
    scale = OutcomeMap.from_spec(make_spec(bounds=(-2.0, 4.0)))
    x = np.array([-5.0, -2.0, 0.0, 4.0, 9.0])
    np.testing.assert_allclose(scale.forward(x), [-0.5, -0.5, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(scale.inverse(scale.forward(x[1:4])), x[1:4])
    aff = OutcomeMap.from_spec(make_spec(bounds=(-2.0, 4.0), scaling="affine"))
    np.testing.assert_allclose(aff.forward(x), [-1.0, -1.0, -1 / 3, 1.0, 1.0])
    np.testing.assert_allclose(aff.inverse(aff.forward(x[1:4])), x[1:4])
    with pytest.raises(MissingBoundsError, match=r"bounds\.outcome"):
        OutcomeMap.from_spec(make_spec(bounds=None))


# --- ridge ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("n", "t0", "lam"), [(4, 10, 10.0), (12, 5, 5.0), (7, 7, 0.3)])
def test_ridge_closed_form_matches_sklearn_bfgs_and_dual(n: int, t0: int, lam: float) -> None:
    rng = np.random.default_rng(n * 100 + t0)
    x, y = rng.uniform(-1, 1, (n, t0)), rng.uniform(-1, 1, t0)
    f = core.ridge_coefficients(x, y, lam)
    ref = Ridge(alpha=lam / 2, fit_intercept=False, solver="cholesky", tol=1e-12).fit(x.T, y).coef_
    np.testing.assert_allclose(f, ref, atol=1e-10)
    primal = np.linalg.solve(x @ x.T + lam / 2 * np.eye(n), x @ y)
    dual = x @ np.linalg.solve(x.T @ x + lam / 2 * np.eye(t0), y)
    np.testing.assert_allclose(primal, dual, atol=1e-10)
    np.testing.assert_allclose(f, primal, atol=1e-10)

    def objective(g: np.ndarray) -> float:
        return float(np.sum((y - x.T @ g) ** 2) / t0 + lam / (2 * t0) * g @ g)

    bfgs = optimize.minimize(objective, np.zeros(n), method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(f, bfgs, atol=1e-6)
    assert np.linalg.norm(f) <= np.linalg.norm(y) / math.sqrt(2 * lam) + 1e-12  # T2
    with pytest.raises(ValueError, match="lambda"):
        core.ridge_coefficients(x, y, 0.0)


# --- sensitivities (closed-form constructions; the adversarial search is statistical/) ------------

@pytest.mark.parametrize(("n", "t0", "lam"), [(3, 8, 4.0), (10, 10, 10.0), (1, 5, 10.0), (20, 50, 30.0)])
def test_tight_bound_is_attained(n: int, t0: int, lam: float) -> None:
    rng = np.random.default_rng(t0)
    y = rng.choice([-1.0, 1.0], t0)
    kappa = math.sqrt(lam / (2 * t0))
    x = np.zeros((n, t0))
    x[0] = kappa * y
    xp = x.copy()
    xp[0] = -kappa * y
    gap = np.linalg.norm(core.ridge_coefficients(x, y, lam) - core.ridge_coefficients(xp, y, lam))
    delta, which = core.coefficient_sensitivity("tight", n, t0, lam)
    assert gap == pytest.approx(math.sqrt(2 * t0 / lam), abs=1e-9)
    assert delta == pytest.approx(gap, abs=1e-9)
    assert "R1" in which


@pytest.mark.parametrize(("n", "expected"), [(10, 1.5706), (100, 4.9995)])
def test_lemma_3_8_construction(n: int, expected: float) -> None:
    x = np.full((n, n), 1.0 / n)
    x[0] = 1.0
    xp = x.copy()
    xp[0] = 0.0
    y = np.ones(n)
    gap = np.linalg.norm(core.ridge_coefficients(x, y, 2.0) - core.ridge_coefficients(xp, y, 2.0))
    assert gap == pytest.approx(expected, abs=1e-4)


def test_paper_bound_dominates_tight_and_table_values() -> None:
    for n in (1, 2, 10, 100, 1000):
        for t0 in (1, 5, 10, 100):
            for lam in (0.1, 1.0, t0, 10.0 * t0, 1e4, 1e6):
                tight, _ = core.coefficient_sensitivity("tight", n, t0, lam)
                paper, _ = core.coefficient_sensitivity("paper", n, t0, lam)
                assert paper >= tight
    assert core.sensitivity_paper(10, 10, 10.0) == pytest.approx(16.97, abs=0.01)
    assert core.sensitivity_paper(100, 10, 10.0) == pytest.approx(41.57, abs=0.01)
    # at λ = T0 the tight bound is √2 for every n
    assert core.coefficient_sensitivity("tight", 500, 40, 40.0)[0] == pytest.approx(math.sqrt(2))
    # for λ ≫ T0 the gradient bound R2 takes over
    assert "R2" in core.coefficient_sensitivity("tight", 10, 10, 1e4)[1]


def test_reference_noise_scales() -> None:
    # spec §9 table: λ = T0, ε1 = ε2 = 50, h = 3
    for n, paper_a, sd_v, b, sd_w in ((10, 0.3394, 1.126, 0.06928, 0.3857),
                                      (100, 0.8314, 8.355, 0.06928, 1.2020)):
        delta, _ = core.coefficient_sensitivity("paper", n, 10, 10.0)
        mech = core.coefficient_mechanism(50.0, delta, n)
        assert mech.scale == pytest.approx(paper_a, abs=1e-4)
        assert math.sqrt(core.coefficient_noise_variance(mech)) == pytest.approx(sd_v, abs=1e-3)
        m2 = core.post_mechanism("matrix-l2", 50.0, n, 3)
        assert m2.scale == pytest.approx(b, abs=1e-5)
        assert math.sqrt(core.post_noise_variance(m2)) == pytest.approx(sd_w, abs=1e-4)
        tight = core.coefficient_mechanism(50.0, core.coefficient_sensitivity("tight", n, 10, 10.0)[0], n)
        assert tight.scale == pytest.approx(0.02828, abs=1e-5)
    e1 = core.post_mechanism("entrywise-l1", 50.0, 10, 3)
    assert isinstance(e1, LaplaceMechanism)
    assert e1.scale == pytest.approx(0.12)


# --- step 2 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("n", "h"), [(1, 1), (1, 2), (1, 12), (2, 1), (2, 5), (38, 12), (1000, 100)])
def test_step2_auto_picks_lower_variance(n: int, h: int) -> None:
    ent = core.post_noise_variance(core.post_mechanism("entrywise-l1", 1.0, n, h))
    mat = core.post_noise_variance(core.post_mechanism("matrix-l2", 1.0, n, h))
    assert mat / ent == pytest.approx(core.step2_variance_ratio(n, h))
    chosen = core.choose_step2("auto", n, h)
    assert chosen == ("matrix-l2" if mat < ent else "entrywise-l1")
    assert chosen == ("matrix-l2" if (n == 1 and h >= 2) else "entrywise-l1")
    assert core.choose_step2("matrix-l2", n, h) == "matrix-l2"


def test_post_mechanism_releases_the_flat_matrix() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 3))
    for kind in ("entrywise-l1", "matrix-l2"):
        mech = core.post_mechanism(kind, 1.0, 4, 3)
        out = mech.release(x.ravel(), rng=rng)  # the run releases vec(X_post), then reshapes
        assert out.shape == (12,)
        assert not np.allclose(out, x.ravel())
    assert isinstance(core.post_mechanism("matrix-l2", 1.0, 4, 3), L2LaplaceMechanism)


# --- DPSC_obj parameters (T13) --------------------------------------------------------------------

@pytest.mark.parametrize(("n", "c_over_t0", "q", "eps0", "beta_over_t0"), [
    (10, 13.0416, 5.2840, 44.716, 0.37952), (100, 40.8121, 7.4664, 42.534, 0.97733)])
def test_objective_parameters(n: int, c_over_t0: float, q: float, eps0: float,
                              beta_over_t0: float) -> None:
    t0 = 10
    p = core.objective_parameters(n, t0, float(t0), 50.0)
    assert p.c / t0 == pytest.approx(c_over_t0, abs=1e-4)
    assert p.q == pytest.approx(q, abs=1e-4)
    assert p.epsilon0 == pytest.approx(eps0, abs=1e-3)
    assert p.beta / t0 == pytest.approx(beta_over_t0, abs=1e-5)
    assert p.delta_reg == 0.0
    small = core.objective_parameters(n, t0, float(t0), q - 0.1)
    assert small.delta_reg > 0 and small.epsilon0 == pytest.approx((q - 0.1) / 2)


# --- plan -----------------------------------------------------------------------------------------

def plan_for(spec: SynthControlSpec, frame: pd.DataFrame) -> Any:
    return sc_plan.plan(spec, len(frame), {"panel": frame[["unit", "time"]]}, rng=np.random.default_rng(0))


def test_plan_events_and_public_details() -> None:
    frame = long_panel(["A", *[f"D{i}" for i in range(6)]], list(range(1, 11)), np.random.default_rng(8))
    plan = plan_for(make_spec(privacy={"epsilon": 4.0}, **{"lambda": "T0"}), frame)
    coef, post = plan.events
    assert plan.dp_guarantee and plan.guarantee == "pure"
    assert plan.neighbouring["relation"] == "replace-one donor"
    assert "whole series" in plan.neighbouring["unit"]
    assert plan.cost.epsilon == pytest.approx(4.0)
    assert coef.kind == "l2_laplace" and coef.sensitivity == pytest.approx(math.sqrt(2))
    assert coef.noise_scale == pytest.approx(math.sqrt(2) / 2)
    assert coef.params["dim"] == 6
    assert post.kind == "laplace" and post.sensitivity == pytest.approx(2 * 6)
    assert post.noise_scale == pytest.approx(12 / 2)
    paper = plan_for(make_spec(sensitivity="paper", step2="matrix-l2", epsilon_split=0.25,
                               **{"lambda": 2.0}), frame)
    coef, post = paper.events
    assert coef.sensitivity == pytest.approx(4 * 4 * math.sqrt(14) / 2.0)
    assert coef.epsilon == pytest.approx(0.5) and post.epsilon == pytest.approx(1.5)
    assert post.kind == "l2_laplace" and post.params["dim"] == 36
    assert post.sensitivity == pytest.approx(2 * math.sqrt(6))


def test_plan_refusals() -> None:
    frame = long_panel(["A", "B"], list(range(1, 9)), np.random.default_rng(9))
    with pytest.raises(UncertifiedModeError, match="allow_uncertified"):
        plan_for(make_spec(method="obj"), frame)
    with pytest.raises(MissingBoundsError):
        plan_for(make_spec(bounds=None), frame)
    with pytest.raises(SpecError, match=r"privacy\.delta"):
        plan_for(make_spec(privacy={"epsilon": 1.0, "delta": 1e-6}), frame)
    obj = plan_for(make_spec(method="obj", allow_uncertified=True), frame)
    assert not obj.dp_guarantee
    assert obj.events[0].params["certified"] is False
    assert obj.cost.epsilon == pytest.approx(2.0)


# --- large ε: the non-private closed form ---------------------------------------------------------

@pytest.mark.parametrize("section", [{}, {"step2": "matrix-l2", "sensitivity": "paper", "lambda": "T0"},
                                     {"lambda": 3.0, "scaling": "affine"}])
def test_huge_epsilon_equals_nonprivate_ridge(section: dict[str, Any]) -> None:
    rng = np.random.default_rng(10)
    frame = long_panel(["A", *[f"D{i}" for i in range(8)]], list(range(1, 13)), rng)
    spec = make_spec(privacy={"epsilon": 1e13}, release_weights=True, **section)
    plan = plan_for(spec, frame)
    release = run(spec, frame, plan, {}, rng=np.random.default_rng(0),
                     noise=NoiseGuard(plan, test_seed=1))
    table = release.tables["counterfactual"]
    piv = frame.pivot(index="unit", columns="time", values="y")
    omap = OutcomeMap.from_spec(spec)
    x = omap.forward(piv.drop(index="A").to_numpy())
    y = omap.forward(piv.loc["A"].to_numpy())
    lam = float(plan.details["lambda"])
    f = Ridge(alpha=lam / 2, fit_intercept=False, solver="cholesky").fit(x[:, :4].T, y[:4]).coef_
    raw = omap.inverse(x[:, 4:].T @ f)
    expected = np.clip(raw, omap.lo, omap.hi)  # released values are clamped to the bounds
    post = table[table.period == "post"]
    np.testing.assert_allclose(post["counterfactual"], expected, atol=1e-8)
    np.testing.assert_allclose(post["counterfactual_clamped"], raw != expected)
    np.testing.assert_allclose(post["effect"], piv.loc["A"].to_numpy()[4:] - expected, atol=1e-8)
    np.testing.assert_allclose(release.tables["weights"]["weight"], f, atol=1e-9)
    mean_y = float(np.mean(piv.loc["A"].to_numpy()[4:]))
    assert release.documents["effect.json"]["average_post_effect"]["estimate"] == pytest.approx(
        mean_y - float(np.clip(np.mean(raw), omap.lo, omap.hi)), abs=1e-8)
    assert table[table.period == "pre"]["counterfactual"].isna().all()
    assert release.figures["synth_control.png"][:4] == b"\x89PNG"


# --- the ridge penalty rule (issue #17) ----------------------------------------------------------

def test_total_rule_follows_epsilon_and_is_unit_free() -> None:
    """lambda: total (default) takes the grid's smallest safe λ when the noise vanishes and a
    large one when it dominates; rescaling the outcome and its bounds changes nothing in mapped
    units (the release's law is the same up to the unit)."""
    frame = long_panel(["A", *[f"D{i}" for i in range(6)]], list(range(1, 13)),
                       np.random.default_rng(3))
    big = plan_for(make_spec(privacy={"epsilon": 1e9}), frame)
    small = plan_for(make_spec(privacy={"epsilon": 0.5}), frame)
    assert big.details["lambda"] == pytest.approx(0.01 * 4)
    assert small.details["lambda"] >= 100 * 4
    assert "cannot give a useful counterfactual" in small.details["warning_shrinkage"]
    t0 = plan_for(make_spec(privacy={"epsilon": 5.0}, **{"lambda": "T0"}), frame)
    assert t0.details["lambda"] == 4.0 and "33%" in t0.details["warning_shrinkage"]
    for eps in (0.5, 5.0, 1e9):
        a = plan_for(make_spec(privacy={"epsilon": eps}), frame)
        b = plan_for(make_spec(privacy={"epsilon": eps}, bounds=(0.0, 10_000.0)), frame)
        assert a.details["lambda"] == b.details["lambda"]
        assert [e.noise_scale for e in a.events] == [e.noise_scale for e in b.events]
        assert b.predicted().halfwidth == pytest.approx(1000 * a.predicted().halfwidth)
