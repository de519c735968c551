"""two-stage method: plan from public inputs, refusals, large-ε equality with a non-private reference."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpcausal.commands.two_stage import plan as ts_plan
from dpcausal.commands.two_stage.calibration import calibrate, uniform_bounds
from dpcausal.commands.two_stage.estimate import run
from dpcausal.commands.two_stage.rule import apply_rule
from dpcausal.commands.two_stage.setup import build_setup, prepare
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.commands.two_stage.stage1 import compute_weights
from dpcausal.errors import MissingBoundsError, PrivacyError, SpecError, UncertifiedModeError
from dpcausal.mechanisms import NoiseGuard

COVS = [f"x{j}" for j in range(1, 5)]


def make_spec(**two_stage: Any) -> TwoStageSpec:
    doc: dict[str, Any] = {
        "data": {"path": "unused.csv",
                 "columns": {"outcome": "y", "treatment": "a", "covariates": COVS}},
        "bounds": {"outcome": two_stage.pop("outcome", [-10.0, 10.0]), "covariates": [-1.0, 1.0]},
        "privacy": {"epsilon": two_stage.pop("epsilon", 1.0), "delta": two_stage.pop("delta", 0.0)},
        "two_stage": {"treated": 1, "weights": "ipw-rct", "ipw_rct": {"p_treated": 0.4},
                      "l1_radius": 5.0, "outcome_center": "midpoint", **two_stage},
    }
    if doc["two_stage"]["weights"] != "ipw-rct":
        doc["two_stage"].pop("ipw_rct")
    return TwoStageSpec.model_validate(doc)


def frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 4))
    a = (rng.uniform(size=n) < 1 / (1 + np.exp(-(0.8 * x[:, 0] - 0.6 * x[:, 1])))).astype(int)
    y = x[:, 2] + (2 * a - 1) * (3 * x[:, 0] - 2 * x[:, 3]) + rng.normal(size=n)
    out = pd.DataFrame(x, columns=COVS)
    out["a"], out["y"] = a, y
    return out


def test_plan_is_public_and_complete() -> None:
    spec = make_spec()
    plan = ts_plan.plan(spec, 500, {}, rng=np.random.default_rng(0))
    assert plan.dp_guarantee
    assert plan.guarantee == "pure"
    assert plan.neighbouring["relation"] == "replace-one"
    assert plan.neighbouring["n_public"] is True
    for key in ("gamma_required", "noise_scale", "noise_to_signal"):
        assert plan.details[key] > 0
    ev = plan.events[0]
    assert ev.epsilon == 1.0
    assert ev.kind == "l2_laplace"
    assert ev.params["epsilon_noise_term"] + ev.params["epsilon_jacobian_term"] == pytest.approx(1.0)


def test_centred_outcomes_stay_within_m_y_for_the_floats() -> None:
    """|fl(clip(y) − c)| ≤ M_y for every y, at bounds where rounding pushes fl(U − c) past
    (U − L)/2 (the old M_y, issue 13); the record bound |t| ≤ 2M_y enters ζ, the sensitivity."""
    for lo, hi in ((6.265404784005447, 14.415106957297374), (0.8724998293084578, 31.16126523152132)):
        setup = build_setup(make_spec(outcome=[lo, hi]))
        y = np.concatenate([[lo, hi], np.nextafter(hi, lo) - np.arange(50) * 1e-15, [1e9, -1e9]])
        yc = np.clip(y, setup.lower, setup.upper) - setup.center
        assert np.abs(yc).max() <= setup.m_y
        assert setup.m_y == pytest.approx(0.5 * (hi - lo), rel=1e-15)


@pytest.mark.parametrize("eps_split", [0.5, 1.0 - 1e-12])
@pytest.mark.parametrize("noise", ["gamma", "gaussian"])
def test_plan_event_is_composed_by_its_claim(eps_split: float, noise: str) -> None:
    """The receipted event is objective perturbation (marked), so every accountant composes it by
    its stated (ε, δ). Without the marker (the old plan), at eps_split → 1 the ℓ2-Laplace rebuilt
    from (ε, Δ) matched the noise scale and a PLD ledger composed the noise term alone (ε_b)."""
    from dpcausal.mechanisms.registry import claim_curve, claim_reason, release_curve

    delta = 1e-6 if noise == "gaussian" else 0.0
    spec = make_spec(eps_split=eps_split, noise=noise, delta=delta)
    ev = ts_plan.plan(spec, 500, {}, rng=np.random.default_rng(0)).events[0]
    assert ev.params["perturbation"] == "objective" and claim_reason(ev) is not None
    assert release_curve(ev) == claim_curve(1.0, delta)


def test_refusals() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(UncertifiedModeError, match="allow_uncertified"):
        ts_plan.plan(make_spec(calibration="paper"), 100, {}, rng=rng)
    plan = ts_plan.plan(make_spec(calibration="paper", allow_uncertified=True), 100, {}, rng=rng)
    assert plan.dp_guarantee is False
    with pytest.raises(UncertifiedModeError, match="universal"):
        ts_plan.plan(make_spec(weights="ebw"), 100, {}, rng=rng)
    assert ts_plan.plan(make_spec(weights="ebw", sensitivity="universal"), 100, {}, rng=rng).dp_guarantee
    with pytest.raises(UncertifiedModeError, match="arm_totals"):
        ts_plan.plan(make_spec(weights="ebw"), 100, {}, rng=rng)
    ebw = ts_plan.plan(make_spec(weights="ebw", ebw={"arm_totals": "sample", "radius": 0.5,
                                                "ridge": 10.0}), 2000, {}, rng=rng)
    assert ebw.dp_guarantee
    assert ebw.details["W1s_bar"] < 0.05 * 2 * 2000
    with pytest.raises(UncertifiedModeError, match="universal"):
        ts_plan.plan(make_spec(weights="mmd", mmd={"bandwidth": 1.0}), 100, {}, rng=rng)
    logit = ts_plan.plan(make_spec(weights="ipw-logit"), 400, {}, rng=rng)  # proven ratio bound
    assert logit.dp_guarantee
    assert logit.details["W1s_bar"] < 0.25 * 2 * 400
    # no l1_radius: the unit-free default l1_scale: total chooses the ball (issue 17)
    assert ts_plan.plan(make_spec(l1_radius=None), 100, {}, rng=rng).details["l1_radius"] > 0
    with pytest.raises(MissingBoundsError, match="ipw_known"):
        ts_plan.plan(make_spec(weights="ipw-known"), 100, {}, rng=rng)
    with pytest.raises(SpecError, match="delta"):
        ts_plan.plan(make_spec(noise="gaussian"), 100, {}, rng=rng)
    with pytest.raises(SpecError, match="delta"):
        ts_plan.plan(make_spec(delta=1e-6), 100, {}, rng=rng)
    with pytest.raises(PrivacyError, match="γ_required"):
        ts_plan.plan(make_spec(gamma=1e-9), 100, {}, rng=rng)
    with pytest.raises(SpecError, match="mmd"):
        ts_plan.plan(make_spec(weights="mmd", sensitivity="universal", mmd={"bandwidth": 1.0}),
                10_000, {}, rng=rng)
    with pytest.raises(SpecError, match="coefficients"):
        ts_plan.plan(make_spec(weights="ipw-known", ipw_known={"coefficients": {"zz": 1.0}}), 100, {},
                rng=rng)


def test_gaussian_plan_is_approximate() -> None:
    plan = ts_plan.plan(make_spec(noise="gaussian", delta=1e-6), 400, {}, rng=np.random.default_rng(0))
    assert plan.guarantee == "approximate"
    assert plan.events[0].kind == "gaussian"
    assert plan.events[0].delta == 1e-6


def _reference(x: np.ndarray, t: np.ndarray, w: np.ndarray, l1: float) -> np.ndarray:
    cp = pytest.importorskip("cvxpy")
    th = cp.Variable(x.shape[1])
    obj = cp.sum(cp.multiply(w, cp.square(t - x @ th))) / len(t)
    cp.Problem(cp.Minimize(obj), [cp.norm1(th) <= l1]).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return np.asarray(th.value)


@pytest.mark.parametrize("weights", ["uniform", "ipw-rct", "ipw-known", "ipw-logit", "ebw"])
@pytest.mark.parametrize("l1", [1.0, 500.0])
def test_large_epsilon_equals_nonprivate(weights: str, l1: float) -> None:
    extra: dict[str, Any] = {"weights": weights, "l1_radius": l1, "epsilon": 1e10}
    if weights == "ipw-known":
        extra["ipw_known"] = {"intercept": 0.0, "coefficients": {"x1": 0.8, "x2": -0.6}}
    if weights == "ebw":
        extra["sensitivity"] = "universal"
        extra["epsilon"] = 1e14
    spec = make_spec(**extra)
    df = frame(400)
    plan = ts_plan.plan(spec, 400, {}, rng=np.random.default_rng(0))
    release = run(spec, df, plan, {}, rng=np.random.default_rng(0),
                     noise=NoiseGuard(plan, test_seed=1))
    theta = np.array(release.documents["rule.json"]["theta"])
    setup = build_setup(spec)
    data = prepare(spec, setup, df, None)
    w = compute_weights(spec, setup, data)
    ref = _reference(data.x, data.t, w, l1)
    assert np.allclose(theta, ref, atol=1e-6)
    if l1 == 500.0:
        linear_model = pytest.importorskip("sklearn.linear_model")
        sk = linear_model.LinearRegression(fit_intercept=False).fit(data.x, data.t, sample_weight=w)
        assert np.allclose(theta, sk.coef_, atol=1e-6)


def test_rule_roundtrip_and_sign(tmp_path: Path) -> None:
    """Recommendations apply the same public map; a known-sign effect gives the right rule (P12)."""
    spec = make_spec(weights="uniform", epsilon=1e8, l1_radius=100.0)
    df = frame(2000, seed=4)
    plan = ts_plan.plan(spec, 2000, {}, rng=np.random.default_rng(0))
    rule = run(spec, df, plan, {}, rng=np.random.default_rng(0),
                  noise=NoiseGuard(plan, test_seed=1)).documents["rule.json"]
    new = pd.DataFrame({"x1": [0.9, -0.9], "x2": [0.0, 0.0], "x3": [0.0, 0.0], "x4": [-0.5, 0.5],
                        "id": ["p", "q"]})
    recs = apply_rule(rule, new, tmp_path / "new.csv")
    assert recs["recommended"].tolist() == [1, 0]  # effect 3x1 − 2x4: treat p, not q
    assert recs["id"].tolist() == ["p", "q"]
    with pytest.raises(Exception, match="not a valid"):
        apply_rule({"command": "owl"}, new, tmp_path / "x")


def test_zeta_bounds_every_record_gradient_and_is_attained() -> None:
    """ζ = 2M_x(2M_y + M_∞λ₁) with M_∞ = (1 − 8u)/√d ≥ ‖x‖_∞ for the feature map's rows: a
    search over corner and random rows, ℓ₁-ball vertices and random θ, and |t| = 2M_y never
    exceeds it, and the corner (1, …, 1) at θ = −λ₁e₀ attains it (the paper's ζ = 2M_x²λ₁ + 4M_xM_y
    is 2λ₁(1 − M_∞) larger, which this pins)."""
    spec = make_spec(l1_radius=5.0)
    setup = build_setup(spec)
    kw: dict[str, Any] = dict(n=500, dim=setup.fmap.dim, m_x=1.0, m_inf=setup.m_inf,
                              m_y=setup.m_y, l1_radius=5.0, epsilon=1.0, delta=0.0,
                              eps_split=0.5, noise="gamma", bounds=uniform_bounds(500))
    cal, paper = calibrate(**kw, mode="safe"), calibrate(**kw, mode="paper")
    assert cal.zeta == pytest.approx(2.0 * (2.0 * setup.m_y + setup.m_inf * 5.0))
    assert paper.zeta == pytest.approx(2.0 * 5.0 + 4.0 * setup.m_y)
    rng = np.random.default_rng(3)
    corners = np.array(list(itertools.product([-1.0, 1.0], repeat=len(COVS))))
    raw = np.vstack([corners, rng.uniform(-1.5, 1.5, size=(2000, len(COVS)))])
    x = setup.fmap.transform(raw)
    assert np.abs(x).max() <= setup.m_inf and np.linalg.norm(x, axis=1).max() <= 1.0
    d = setup.fmap.dim
    vertices = np.vstack([5.0 * np.eye(d), -5.0 * np.eye(d)])
    z = rng.standard_normal((200, d))
    thetas = np.vstack([vertices, 5.0 * z / np.abs(z).sum(axis=1, keepdims=True)])
    norms = np.linalg.norm(x, axis=1)
    worst = 0.0
    for t in (2.0 * setup.m_y, -2.0 * setup.m_y):
        grad = 2.0 * np.abs(t - x @ thetas.T) * norms[:, None]
        worst = max(worst, float(grad.max()))
    assert worst <= cal.zeta
    assert worst >= (1.0 - 1e-12) * cal.zeta


@pytest.mark.parametrize("scaling", ["maxabs", "minmax"])
@pytest.mark.parametrize("direction", ["higher", "lower"])
def test_prepare_maps_rows_bitwise_as_clip_scale_transform(scaling: str, direction: str) -> None:
    # issue 24: prepare reads the covariate columns without copying them, clips them into one
    # C-ordered array and maps the features block by block; scaled only when stage 1 asks. The
    # same bits as the former column_stack → clip → scale → transform, so the same release.
    spec = make_spec(scaling=scaling, outcome_direction=direction,
                     outcome=[-2.0, 3.0])
    setup = build_setup(spec)
    df = frame(20_011, seed=4)
    df[COVS] = df[COVS] * 1.7  # values outside the public box [-1, 1]
    df["x2"] = np.round(df["x2"] * 3).astype(int)  # an integer column (converted, not viewed)
    data = prepare(spec, setup, df, None)
    raw = np.clip(np.column_stack([df[c].to_numpy(dtype=np.float64) for c in COVS]), -1.0, 1.0)
    assert data.raw.flags.c_contiguous
    assert np.array_equal(data.raw, raw)
    assert np.array_equal(data.x, setup.fmap.transform(raw))
    assert np.array_equal(data.scaled, setup.fmap.scale(raw))
    y = df["y"].to_numpy(dtype=np.float64) * (-1.0 if direction == "lower" else 1.0)
    assert np.array_equal(data.y, np.clip(y, setup.lower, setup.upper))
    assert np.array_equal(df[COVS[0]].to_numpy(), frame(20_011, seed=4)[COVS[0]].to_numpy() * 1.7)
