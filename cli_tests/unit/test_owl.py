"""owl: loss, solver, feature map, sensitivity, tuning and the rule file."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from dpcausal.commands.common.linear_rule import FeatureMap
from dpcausal.commands.owl import plan as owl_plan
from dpcausal.commands.owl.estimate import fit_nonprivate, run
from dpcausal.commands.owl.rule import apply_rule
from dpcausal.commands.owl.setup import build_setup, prepare
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.commands.owl.tune import tune_gamma
from dpcausal.errors import DataError, MissingBoundsError, SpecError
from dpcausal.mechanisms import NoiseGuard
from dpcausal.solvers.erm import HuberHinge, solve_weighted_erm
from dpcausal.solvers.erm_accuracy import ERMAccuracy


def make_spec(**owl_fields: Any) -> OwlSpec:
    doc: dict[str, Any] = {
        "data": {"path": "train.csv",
                 "columns": {"outcome": "B", "treatment": "A", "covariates": ["x1", "x2", "x3"]}},
        "bounds": {"outcome": [-3.0, 3.0], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 1.0},
        "owl": {"treated": 1, "propensity": 0.5, "gamma": 5.0, **owl_fields},
    }
    return OwlSpec.model_validate(doc)


def make_frame(n: int, rng: np.random.Generator, p: int = 3) -> pd.DataFrame:
    x = rng.uniform(0, 1, size=(n, p))
    a = rng.integers(0, 2, size=n)
    f = 0.5 + x[:, 0] - 1.5 * x[:, 1]
    b = rng.normal(2 * (2 * a - 1) * f, 0.5)
    frame = pd.DataFrame(x, columns=[f"x{j + 1}" for j in range(p)])
    frame["A"], frame["B"] = a, b
    return frame


# --- the loss -------------------------------------------------------------------------------------

def test_huber_hinge_values_and_derivatives() -> None:
    loss, h = HuberHinge(0.5), 0.5
    z = np.array([1 - h, 1.0, 1 + h])
    np.testing.assert_allclose(loss.value(z), [h, h / 4, 0.0])
    np.testing.assert_allclose(loss.derivative(z), [-1.0, -0.5, 0.0])
    grid = np.linspace(-3, 4, 7001)
    assert np.all(np.abs(loss.derivative(grid)) <= 1.0)
    assert np.all(np.diff(loss.value(grid), 2) >= -1e-12)  # convex
    fd = (loss.value(grid + 1e-6) - loss.value(grid - 1e-6)) / 2e-6
    np.testing.assert_allclose(fd, loss.derivative(grid), atol=1e-5)


def test_objective_is_gamma_strongly_convex() -> None:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(50, 4)) / 3
    y = rng.choice([-1.0, 1.0], 50)
    w = rng.uniform(0, 2, 50)
    gamma, loss = 2.0, HuberHinge()

    def g(t: np.ndarray) -> float:
        return float(w @ loss.value(y * (v @ t))) + gamma / 2 * float(t @ t)

    for _ in range(200):
        a, b, al = rng.normal(size=4), rng.normal(size=4), rng.uniform()
        lhs = g(al * a + (1 - al) * b)
        rhs = al * g(a) + (1 - al) * g(b) - 0.5 * gamma * al * (1 - al) * float((a - b) @ (a - b))
        assert lhs <= rhs + 1e-9


def test_solver_matches_independent_scipy_reference() -> None:
    rng = np.random.default_rng(1)
    spec = make_spec()
    setup = build_setup(spec)
    data = prepare(spec, setup, make_frame(400, rng), None)
    theta = fit_nonprivate(setup, data, 5.0)
    h = 0.5

    def ref(t: np.ndarray) -> float:  # written independently of dpcausal's loss code
        z = data.y * (data.v @ t)
        ell = np.piecewise(z, [z > 1 + h, z < 1 - h], [0.0, lambda q: 1 - q,
                                                       lambda q: (1 + h - q) ** 2 / (4 * h)])
        return float(np.mean(data.w * ell)) + 5.0 / (2 * len(z)) * float(t @ t)

    ref_theta = optimize.minimize(ref, np.zeros(setup.fmap.dim), method="Nelder-Mead",
                                  options={"xatol": 1e-11, "fatol": 1e-15, "maxiter": 200_000,
                                           "maxfev": 200_000}).x
    np.testing.assert_allclose(theta, ref_theta, atol=1e-6)


def test_closed_form_in_heavy_regularisation_regime() -> None:
    # If ‖(1/γ)Σ w y v‖ < 1 − h every margin is in the linear region, so θ̂ = (1/γ)Σ w_i y_i v_i.
    rng = np.random.default_rng(2)
    spec = make_spec()
    setup = build_setup(spec)
    data = prepare(spec, setup, make_frame(60, rng), None)
    gamma = 2000.0
    closed = (data.v.T @ (data.w * data.y)) / gamma
    assert np.linalg.norm(closed) < 0.5
    np.testing.assert_allclose(fit_nonprivate(setup, data, gamma), closed, atol=1e-10)


def test_solver_refuses_negative_weights() -> None:
    with pytest.raises(ValueError, match="weights"):
        solve_weighted_erm(np.ones((2, 1)), np.ones(2), np.array([1.0, -1.0]),
                           ERMAccuracy(2, 1, 1.0, 1.0, 0.5, 1e-9))


# --- the public feature map ------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", ["linear", "rff"])
@pytest.mark.parametrize("scaling", ["minmax", "maxabs"])
def test_every_mapped_row_is_in_the_unit_ball(kernel: str, scaling: str) -> None:
    spec = make_spec(kernel=kernel, scaling=scaling)
    fmap = build_setup(spec).fmap
    x = np.random.default_rng(3).normal(0, 10, size=(5000, 3))  # far outside the bounds
    assert np.all(np.linalg.norm(fmap.transform(x), axis=1) <= 1 + 1e-12)


@pytest.mark.parametrize("intercept", [True, False])
@pytest.mark.parametrize("scaling", ["minmax", "maxabs"])
def test_mapped_rows_are_in_the_unit_ball_exactly_for_the_floats(intercept: bool,
                                                                  scaling: str) -> None:
    """‖v‖₂ ≤ 1 for the computed floats (summed exactly in rationals), at the corners of the box
    where every coordinate is ±1, for linear and random-feature maps of every dimension up to 40.
    On the old map (divide by √d) the norm exceeded 1 by a few ulp at d = 2, 3, 5, ... (issue 13)."""
    from fractions import Fraction

    for q in range(1, 41):
        names = tuple(f"x{i}" for i in range(q))
        lo, hi = -np.ones(q), np.ones(q)
        corners = np.vstack([hi, lo, np.where(np.arange(q) % 2, 1.0, -1.0), hi * 7])
        maps = [FeatureMap(names, lo, hi, scaling, intercept),
                FeatureMap(names, lo, hi, scaling, intercept, np.zeros((q, q)), np.zeros(q))]
        for fmap in maps:
            rows = [fmap.transform(corners), fmap.transform_columns(list(corners.T))]
            for v in np.vstack(rows):
                assert sum(Fraction(float(a)) ** 2 for a in v) <= 1, (q, fmap.kernel)


def test_feature_map_is_data_independent() -> None:
    # Two different data sets: the map (bounds, scaling, random features) is identical.
    a = build_setup(make_spec(kernel="rff", rff={"dim": 8, "seed": 4})).fmap
    b = build_setup(make_spec(kernel="rff", rff={"dim": 8, "seed": 4})).fmap
    assert a.to_dict() == b.to_dict()
    assert FeatureMap.from_dict(a.to_dict()).to_dict() == a.to_dict()


def test_rff_approximates_gaussian_kernel() -> None:
    fmap = build_setup(make_spec(kernel="rff", intercept=False,
                                     rff={"dim": 4000, "bandwidth": 0.7, "seed": 5})).fmap
    x = np.random.default_rng(6).uniform(0, 1, size=(2, 3))
    v = fmap.transform(x)
    exact = math.exp(-np.sum((x[0] - x[1]) ** 2) / (2 * 0.7**2))
    assert 2 * float(v[0] @ v[1]) == pytest.approx(exact, abs=0.05)


def test_original_units_reproduce_scores_within_bounds() -> None:
    setup = build_setup(make_spec(scaling="minmax"))
    theta = np.array([0.3, -1.0, 2.0, 0.5])
    coef = setup.fmap.original_units(theta)
    assert coef is not None
    x = np.random.default_rng(7).uniform(0, 1, size=(20, 3))
    direct = setup.fmap.transform(x) @ theta
    via = coef["(intercept)"] + x @ np.array([coef["x1"], coef["x2"], coef["x3"]])
    np.testing.assert_allclose(direct, via, atol=1e-12)


# --- sensitivity: observed change over neighbours stays below the Δ used ---------------------------

def _neighbour_ratio(spec: OwlSpec, frame: pd.DataFrame, replacement: dict[str, float],
                     index: int, gamma: float) -> float:
    setup = build_setup(spec)
    other = frame.copy()
    for k, val in replacement.items():
        other.loc[index, k] = val
    t1 = fit_nonprivate(setup, prepare(spec, setup, frame, None), gamma)
    t2 = fit_nonprivate(setup, prepare(spec, setup, other, None), gamma)
    return float(np.linalg.norm(t1 - t2)) / setup.sensitivity(gamma, len(frame))


@pytest.mark.parametrize("kernel", ["linear", "rff"])
def test_neighbour_search_stays_below_sensitivity(kernel: str) -> None:
    rng = np.random.default_rng(8)
    worst = 0.0
    for trial in range(60):
        n = int(rng.choice([2, 5, 20, 80]))
        gamma = float(rng.choice([0.05, 0.5, 5.0, 50.0]))
        spec = make_spec(kernel=kernel, rff={"dim": 6, "seed": trial} if kernel == "rff" else None,
                         gamma=gamma)
        frame = make_frame(n, rng)
        idx = int(rng.integers(n))
        if trial % 2:  # adversarial: extreme corner, flipped arm, max outcome (max weight)
            repl = {"x1": float(rng.choice([0.0, 1.0])), "x2": float(rng.choice([0.0, 1.0])),
                    "x3": float(rng.choice([0.0, 1.0])), "A": 1 - int(frame.loc[idx, "A"]),
                    "B": float(rng.choice([-3.0, 3.0, 99.0]))}
        else:
            repl = {"x1": rng.uniform(), "x2": rng.uniform(), "x3": rng.uniform(),
                    "A": int(rng.integers(2)), "B": rng.normal(0, 3)}
        worst = max(worst, _neighbour_ratio(spec, frame, repl, idx, gamma))
    assert worst <= 1.0
    assert worst > 0.2  # the search does reach a sizeable fraction of the bound


def test_neighbour_with_design_propensity_column_stays_below_sensitivity() -> None:
    rng = np.random.default_rng(9)
    spec = make_spec(propensity={"column": "p", "floor": 0.2}, gamma=0.3)
    worst = 0.0
    for _ in range(30):
        frame = make_frame(10, rng)
        frame["p"] = rng.uniform(0.2, 0.8, size=10)
        repl = {"p": 0.2, "A": 1, "B": 3.0, "x1": 1.0, "x2": 0.0, "x3": 1.0}
        spec_cols = spec.model_copy(update={"data": spec.data.model_copy(update={
            "columns": spec.data.columns})})
        worst = max(worst, _neighbour_ratio(spec_cols, frame, repl, 0, 0.3))
    assert worst <= 1.0


# --- spec/data validation --------------------------------------------------------------------------

def test_missing_bounds_are_refused() -> None:
    doc = make_spec().model_dump()
    doc["bounds"] = {"outcome": None, "covariates": [0, 1]}
    with pytest.raises(MissingBoundsError, match=r"bounds\.outcome"):
        build_setup(OwlSpec.model_validate(doc))
    doc["bounds"] = {"outcome": [0, 1], "covariates": {"x1": [0, 1]}}
    with pytest.raises(MissingBoundsError, match="x2, x3"):
        build_setup(OwlSpec.model_validate(doc))


def test_plan_refuses_delta() -> None:
    doc = make_spec().model_dump()
    doc["privacy"]["delta"] = 1e-6
    with pytest.raises(SpecError, match="pure"):
        owl_plan.plan(OwlSpec.model_validate(doc), 100, {}, rng=np.random.default_rng(0))


def test_three_arms_and_bad_propensities_are_refused() -> None:
    rng = np.random.default_rng(10)
    spec = make_spec()
    setup = build_setup(spec)
    frame = make_frame(10, rng)
    frame.loc[3, "A"] = 2
    with pytest.raises(DataError, match=r"'A' has 1 value\(s\) that are neither"):
        prepare(spec, setup, frame, Path("t.csv"))
    spec = make_spec(propensity={"column": "p", "floor": 0.1})
    frame = make_frame(10, rng)
    frame["p"] = 0.95
    with pytest.raises(DataError, match="outside"):
        prepare(spec, build_setup(spec), frame, Path("t.csv"))


def test_string_arm_labels() -> None:
    spec = make_spec(treated="drug", control="placebo")
    frame = make_frame(20, np.random.default_rng(11))
    frame["A"] = np.where(frame["A"] == 1, "drug", "placebo")
    data = prepare(spec, build_setup(spec), frame, None)
    np.testing.assert_array_equal(data.y, np.where(frame["A"] == "drug", 1.0, -1.0))


def test_weights_use_public_shift_and_bound() -> None:
    spec = make_spec(propensity=0.25, eta=0.001)  # η in outcome units (explicit)
    setup = build_setup(spec)
    assert setup.weight_bound == pytest.approx((3 - -3 + 0.001) / 0.25)
    frame = pd.DataFrame({"x1": [0.5] * 3, "x2": [0.5] * 3, "x3": [0.5] * 3, "A": [1, 0, 1],
                          "B": [100.0, -100.0, 0.0]})
    data = prepare(spec, setup, frame, None)
    np.testing.assert_allclose(data.w, [6.001 / 0.25, 0.001 / 0.75, 3.001 / 0.25])
    assert np.all(data.w <= setup.weight_bound)


def test_scale_invariance() -> None:
    # Multiplying outcome, its bounds, η and γ by c leaves θ̂ and Δ/‖θ̂‖ unchanged.
    frame = make_frame(200, np.random.default_rng(12))
    spec1 = make_spec(gamma=4.0, eta=0.001)
    doc = spec1.model_dump()
    doc["bounds"]["outcome"] = (-30.0, 30.0)
    doc["owl"]["gamma"], doc["owl"]["eta"] = 40.0, 0.01
    spec2 = OwlSpec.model_validate(doc)
    s1, s2 = build_setup(spec1), build_setup(spec2)
    f2 = frame.assign(B=frame["B"] * 10)
    t1 = fit_nonprivate(s1, prepare(spec1, s1, frame, None), 4.0)
    t2 = fit_nonprivate(s2, prepare(spec2, s2, f2, None), 40.0)
    np.testing.assert_allclose(t1, t2, atol=1e-8)
    assert s1.sensitivity(4.0, 3) == pytest.approx(s2.sensitivity(40.0, 3))


# --- tuning (Algorithm 2) --------------------------------------------------------------------------

def test_tune_gamma_is_deterministic_and_picks_from_grid() -> None:
    public = make_frame(300, np.random.default_rng(13))
    spec = make_spec(gamma=None, tune={"public_data": "pub.csv", "grid": [50, 1, 10],
                                       "repeats": 5, "seed": 3})
    setup = build_setup(spec)
    a = tune_gamma(spec, setup, public, n=100, epsilon=1.0)
    b = tune_gamma(spec, setup, public, n=100, epsilon=1.0)
    assert a == b
    assert a["gamma"] in (1.0, 10.0, 50.0) and a["grid"] == [1.0, 10.0, 50.0]
    # bootstrap branch (n > n0 − m) also works
    c = tune_gamma(spec, setup, public, n=1000, epsilon=1.0)
    assert c["gamma"] in (1.0, 10.0, 50.0) and c["validation_size"] == 60


def test_tune_rejects_oversized_validation() -> None:
    public = make_frame(40, np.random.default_rng(14))
    spec = make_spec(gamma=None, tune={"public_data": "p.csv", "grid": [1], "validation_size": 40})
    with pytest.raises(SpecError, match="validation_size"):
        tune_gamma(spec, build_setup(spec), public, n=10, epsilon=1.0)


# --- the rule --------------------------------------------------------------------------------------

def test_rule_round_trip_and_no_prenoise_fit() -> None:
    rng = np.random.default_rng(15)
    spec = make_spec(apply_to="new.csv")
    frame, new = make_frame(300, rng), make_frame(50, rng).drop(columns=["A", "B"])
    plan = owl_plan.plan(spec, len(frame), {}, rng=rng)
    release = run(spec, frame, plan, {"apply_to": new}, rng=rng,
                      noise=NoiseGuard(plan, test_seed=16))
    rule = release.documents["rule.json"]
    recs = apply_rule(rule, new, Path("new.csv"))
    pd.testing.assert_frame_equal(recs, release.tables["recommendations"])
    assert set(recs["recommended"]) <= {0, 1}
    setup = build_setup(spec)
    theta_hat = fit_nonprivate(setup, prepare(spec, setup, frame, None), 5.0)
    assert not np.allclose(rule["theta"], theta_hat)
    text = str(rule)
    assert all(f"{t:.6f}"[:8] not in text for t in theta_hat)


def test_load_rule_rejects_malformed() -> None:
    with pytest.raises(DataError, match="not a valid dpcausal owl rule"):
        apply_rule({"command": "owl", "format_version": 1}, pd.DataFrame({"x": [1]}), Path("r"))
