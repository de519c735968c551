"""cate with K = 3 arms (each arm against a declared control, released jointly): the contrasts'
inputs, the K-arm nuisances' sensitivities, a neighbour search over the stacked release, the joint
release's noise law and the proof that it never needs more noise than splitting ε."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cli_tests.helpers import assert_three_arm, ks_three_arm
from dpcausal.commands.cate.krr import fit_krr, rkhs_distance
from dpcausal.commands.cate.multi_arm import contrast_indices, contrast_inputs
from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.privacy import function_mechanism, split_alternative
from dpcausal.commands.cate.setup import build_setup, noise_factor
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.learners.dp_features import BoxFeatures
from dpcausal.learners.dp_multinomial import DPMultinomial
from dpcausal.learners.dp_ridge import DPRidgeArms
from dpcausal.mechanisms import GaussianProcessMechanism, NoiseGuard
from dpcausal.mechanisms._rng import noise_generator
from dpcausal.mechanisms.gaussian_process import gaussian_kernel

ARMS = ["placebo", "low", "high"]
BOX = BoxFeatures(np.zeros(2), np.ones(2))


def make_spec(**cate_over: Any) -> CateSpec:
    doc: dict[str, Any] = {
        "data": {"path": "unused.csv",
                 "columns": {"outcome": "Y", "treatment": "A", "covariates": ["x0", "x1"]}},
        "bounds": {"outcome": [0.0, 1.0], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 1.0, "delta": 1e-6},
        "cate": {"arms": ARMS, "control": "placebo",
                 "grid": {"vary": ["x0"], "points": 11, "fixed": {"x1": 0.5}},
                 "split": {"kind": "seeded", "seed": 0}},
    }
    doc["cate"].update(cate_over)
    return CateSpec.model_validate(doc)


def test_contrasts_are_every_other_arm_in_declared_order() -> None:
    spec = make_spec(control="low")
    assert spec.cate.contrast_arms() == ("placebo", "high")
    assert contrast_indices(spec) == ([0, 2], 1)


def test_contrast_inputs_r_and_dr_by_hand() -> None:
    codes = np.array([0, 1, 2])  # a control, a "low" and a "high" row
    y = np.array([0.9, 0.2, 0.6])
    pi = np.array([[0.5, 0.25, 0.25]] * 3)
    mu = np.array([[0.4, 0.3, 0.8]] * 3)
    rho, phi = contrast_inputs("r", codes, y, pi, mu, 2, 0, 0.05)
    e = 0.25 / 0.75  # P(A = high | A in {high, placebo}, x)
    np.testing.assert_allclose(rho, [e**2, 0.0, (1 - e) ** 2])  # the "low" row is out
    np.testing.assert_allclose(phi[[0, 2]], [(0.9 - 0.4) / -e + 0.4,
                                             (0.6 - 0.8) / (1 - e) + 0.4])
    rho, phi = contrast_inputs("dr", codes, y, pi, mu, 2, 0, 0.05)
    np.testing.assert_allclose(rho, 1.0)
    np.testing.assert_allclose(phi, [0.4 - 0.5 / 0.5, 0.4, 0.4 + (0.6 - 0.8) / 0.25])


def test_k_arm_ridge_and_multinomial_neighbour_search() -> None:
    """Replace one nuisance row (any arm to any arm, covariates at corners, y at the bounds): the
    stacked (θ̂₀, θ̂₁, θ̂₂) and the multinomial Θ̂ move by at most their stated sensitivities."""
    rng = np.random.default_rng(3)
    m = 60
    ridge = DPRidgeArms(BOX, 0.05, (0.0, 1.0), 1.0, 1e-6, m, arms=3)
    mult = DPMultinomial(BOX, 0.05, 1.0, 1e-6, m, 3)
    worst_r = worst_m = 0.0
    for _ in range(40):
        x = rng.uniform(size=(m, 2))
        codes = rng.integers(0, 3, m)
        y = rng.choice([0.0, 1.0], m)
        base_r = ridge.fit_nonprivate(x, codes.astype(float), y)
        base_m = mult.fit_nonprivate(x, codes)
        for _ in range(3):
            i = int(rng.integers(m))
            x2, c2, y2 = x.copy(), codes.copy(), y.copy()
            x2[i] = rng.choice([0.0, 1.0], 2)
            c2[i] = (codes[i] + rng.integers(0, 3)) % 3
            y2[i] = 1.0 - y[i]
            worst_r = max(worst_r, float(np.linalg.norm(
                ridge.fit_nonprivate(x2, c2.astype(float), y2) - base_r)))
            worst_m = max(worst_m, float(np.linalg.norm(mult.fit_nonprivate(x2, c2) - base_m)))
    assert 0.0 < worst_r <= ridge.sensitivity
    assert 0.0 < worst_m <= mult.sensitivity
    assert mult.sensitivity < 2.0 * 2.0 * math.sqrt(2.0) / (m * 0.05)


def _stacked_fits(setup: Any, s: np.ndarray, codes: np.ndarray, y: np.ndarray, pi: np.ndarray,
                  mu: np.ndarray, learner: str) -> list[Any]:
    kmat = gaussian_kernel(s, s, setup.bandwidth)
    out = []
    for k in (1, 2):
        rho, phi = contrast_inputs(learner, codes, y, pi, mu, k, 0, setup.kappa)  # type: ignore[arg-type]
        out.append(fit_krr(s, rho, phi, bandwidth=setup.bandwidth, lam0=setup.lam0,
                           huber_c=setup.huber_c, accuracy=setup.krr_accuracy, kmat=kmat))
    return out


@pytest.mark.parametrize("learner", ["r", "dr"])
def test_neighbour_search_never_exceeds_the_stacked_sensitivity(learner: str) -> None:
    """K = 3, fixed nuisances in their public ranges: replacing one second-stage row (any arm to any
    arm, covariates at box corners or random, y at the bounds) moves the stacked pair of contrast
    functions by ‖(ĝ₁ − ĝ₁′, ĝ₂ − ĝ₂′)‖_{ℋ²} ≤ √2·Δ_ℋ — and a control row, which enters both
    contrasts, moves it beyond the single-contrast Δ_ℋ, so splitting the sensitivity per contrast
    without composing would under-noise."""
    n = 40
    spec = make_spec(learner=learner, ridge=2.0, huber_c=0.05, bandwidth=0.5,
                     sensitivity_formula="corrected")
    setup = build_setup(spec, 2 * n)
    bound = function_mechanism(spec, setup).rkhs_sensitivity
    assert bound == pytest.approx(math.sqrt(2.0) * setup.rkhs_sensitivity)
    rng = np.random.default_rng(7)
    worst = worst_control = 0.0
    for trial in range(25):
        s = rng.uniform(size=(n, 2))
        codes = rng.integers(0, 3, n)
        y = rng.choice([0.0, 1.0], n)
        # adversarial nuisances: propensities at the clip, outcome models at the bounds
        pi = np.clip(rng.dirichlet([0.3, 0.3, 0.3], n), setup.kappa, 1 - setup.kappa)
        mu = rng.choice([0.0, 1.0], (n, 3))
        i = int(rng.integers(n))
        s2, c2, y2 = s.copy(), codes.copy(), y.copy()
        if trial % 3 == 0:  # a control row stays in the control arm: it enters both contrasts
            codes[i] = c2[i] = 0
            pi[i] = [setup.kappa, 0.5, 0.5]  # the weight of a control row near its sup
            mu[i] = 0.5
        else:
            s2[i] = rng.choice([0.0, 1.0], 2) if trial % 2 else rng.uniform(size=2)
            c2[i] = int(rng.integers(0, 3))
        y2[i] = 1.0 - y[i]
        base = _stacked_fits(setup, s, codes, y, pi, mu, learner)
        moved = _stacked_fits(setup, s2, c2, y2, pi, mu, learner)
        dist = math.sqrt(sum(rkhs_distance(a, b) ** 2 for a, b in zip(base, moved, strict=True)))
        worst = max(worst, dist)
        if trial % 3 == 0:
            worst_control = max(worst_control, dist)
    assert worst <= bound * (1 + 1e-9)
    assert worst_control > setup.rkhs_sensitivity


@pytest.mark.parametrize("calibration", ["classic", "analytic"])
@pytest.mark.parametrize("r", [2, 3, 9])
@pytest.mark.parametrize(("eps", "delta"), [(0.1, 1e-6), (1.0, 1e-6), (5.0, 1e-5), (30.0, 1e-8)])
def test_joint_release_never_needs_more_noise_than_splitting_epsilon(
        calibration: str, r: int, eps: float, delta: float) -> None:
    joint = GaussianProcessMechanism(eps, delta, math.sqrt(r), 1.0, calibration,  # type: ignore[arg-type]
                                     paths=r)
    split = GaussianProcessMechanism(eps / r, delta / r, 1.0, 1.0, calibration)  # type: ignore[arg-type]
    assert joint.sigma <= split.sigma


def test_plan_states_the_joint_release_and_each_contrast() -> None:
    spec = make_spec()
    p = plan(spec, 400, {}, rng=np.random.default_rng(0))
    ev = {e.stage: e for e in p.events}
    fn = ev["cate.second_stage.function"]
    assert fn.params["paths"] == 2
    setup = build_setup(spec, 400)
    assert fn.sensitivity == pytest.approx(
        math.sqrt(2.0) * (noise_factor(spec, setup) * setup.rkhs_sensitivity
                          + setup.query_rounding))
    lam = setup.propensity_l2.l2  # the total-error rule's (test_cate_defaults.py)
    assert ev["cate.nuisance.propensity"].sensitivity > 2 * math.sqrt(2.0) / (200 * lam)
    assert "'low' vs control 'placebo'" in p.details["contrast 1"]
    assert "'high' vs control 'placebo'" in p.details["contrast 2"]
    assert f"{split_alternative(spec, setup).sigma:.4g}" in p.details["contrasts_release"]
    assert p.assumptions["treatment_values"] == {"arms": ARMS, "control": "placebo"}


@pytest.mark.statistical
def test_joint_release_noise_law_three_arm() -> None:
    """Each of the two paths has sd σ at every point (true scale passes, 0.7x and 1.3x fail), the
    paths are independent, and each path has the k0 covariance along the points."""
    mech = GaussianProcessMechanism(1.0, 1e-6, 0.4, 0.5, paths=2)
    pts = np.array([[0.1, 0.2], [0.15, 0.2], [0.9, 0.9]])
    values = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]])
    draws = mech.release_many(values, 8000, rng=noise_generator(21), points=pts) - values
    assert draws.shape == (8000, 2, 3)
    for path in (0, 1):
        assert_three_arm(ks_three_arm(draws[:, path, 2],
                                      lambda x, s: stats.norm.cdf(x, scale=s), mech.sigma))
    corr = np.corrcoef(draws[:, 0, 0], draws[:, 1, 0])[0, 1]
    assert abs(corr) < 0.05
    k01 = gaussian_kernel(pts[:1], pts[1:2], 0.5)[0, 0]
    within = np.corrcoef(draws[:, 0, 0], draws[:, 0, 1])[0, 1]
    assert within == pytest.approx(k01, abs=0.03)


def test_spec_refusals() -> None:
    with pytest.raises(ValueError, match="name the control arm"):
        make_spec(control=None)
    with pytest.raises(ValueError, match=r"must be one of cate\.arms"):
        make_spec(control="other")
    with pytest.raises(ValueError, match="mode: function only"):
        make_spec(mode="queries", loss="squared")
    with pytest.raises(ValueError, match="estimand ate with K ≥ 3 arms is not implemented"):
        CateSpec.model_validate({
            "data": {"columns": {"outcome": "Y", "treatment": "A", "covariates": ["x0"]}},
            "bounds": {"outcome": [0, 1], "covariates": [0, 1]},
            "privacy": {"epsilon": 1.0, "delta": 1e-6},
            "cate": {"arms": ARMS, "control": "placebo", "estimand": "ate"}})


def test_frame_round_trip_release_names_each_contrast() -> None:
    """An in-memory K = 3 release at a huge ε: cate.csv stacks one block per contrast, labelled
    with the arm and the control, in the declared order, near the true contrasts 0.1 and 0.3."""
    from dpcausal.commands.cate.multi_arm import run

    rng = np.random.default_rng(0)
    n = 1200
    x = rng.uniform(size=(n, 2))
    arm = rng.integers(0, 3, n)
    y = 0.3 + np.array([0.0, 0.1, 0.3])[arm] + 0.1 * x[:, 1] + rng.uniform(-0.2, 0.2, n)
    frame = pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1], "A": np.array(ARMS)[arm], "Y": y})
    spec = make_spec(ridge=0.002, bandwidth=2.0)
    spec = spec.model_copy(update={"privacy": spec.privacy.model_copy(update={"epsilon": 1e9})})
    p = plan(spec, n, {}, rng=rng)
    rel = run(spec, frame, p, {}, rng=rng, noise=NoiseGuard(p, test_seed=1))
    table = rel.tables["cate"]
    assert list(table.columns[:2]) == ["arm", "control"]
    assert list(table["arm"].unique()) == ["low", "high"]
    assert set(table["control"]) == {"placebo"}
    means = table.groupby("arm", sort=False)["cate"].mean()
    assert means["low"] == pytest.approx(0.1, abs=0.04)
    assert means["high"] == pytest.approx(0.3, abs=0.04)
