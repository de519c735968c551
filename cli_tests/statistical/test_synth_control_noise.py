"""synth-control: noise laws of both steps (three-arm), the §5.5 error formula, privacy-loss checks.

The draws go through the same functions ``run`` uses (``counterfactual_path`` with a plan built by
``plan``, and the step-2 mechanism factory), so a wrong scale anywhere in the chain fails here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cli_tests.helpers import assert_three_arm, ks_three_arm
from dpcausal.commands.synth_control import dpsc as core
from dpcausal.commands.synth_control import plan as sc_plan
from dpcausal.commands.synth_control.estimate import counterfactual_path
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.mechanisms import NoiseGuard
from dpcausal.mechanisms._rng import noise_generator

pytestmark = pytest.mark.statistical


def setup(n: int, t0: int, h: int, eps: float, seed: int = 0, **section: Any) -> tuple[Any, ...]:
    """A mapped panel (X in [−1, 1], y public) and the plan for it."""
    rng = np.random.default_rng(seed)
    units = ["T", *[f"D{i}" for i in range(n)]]
    times = list(range(t0 + h))
    frame = pd.DataFrame({"unit": np.repeat(units, t0 + h), "time": np.tile(times, n + 1),
                          "y": rng.uniform(-1, 1, (n + 1) * (t0 + h))})
    spec = SynthControlSpec.model_validate({
        "data": {"path": "p.csv", "columns": {"unit": "unit", "time": "time", "outcome": "y"}},
        "bounds": {"outcome": [-1.0, 1.0]}, "privacy": {"epsilon": eps},
        "synth_control": {"target": "T", "treatment_time": t0, **section}})
    plan = sc_plan.plan(spec, len(frame), {"panel": frame}, rng=rng)
    piv = frame.pivot(index="unit", columns="time", values="y")
    x = piv.loc[[f"D{i}" for i in range(n)]].to_numpy()
    y = piv.loc["T"].to_numpy()
    return spec, plan, x, y


@pytest.mark.parametrize(("sensitivity", "n"), [("tight", 4), ("paper", 7)])
def test_step1_radius_law_through_the_run_path(sensitivity: str, n: int) -> None:
    spec, plan, x, y = setup(n, 6, 3, 3.0, sensitivity=sensitivity)
    f_reg = core.ridge_coefficients(x[:, :6], y[:6], float(plan.details["lambda"]))
    radii = np.array([
        np.linalg.norm(counterfactual_path(spec, x, y, 6, plan,
                                              noise=NoiseGuard(plan, test_seed=21_000 + i))[1]
                       - f_reg)
        for i in range(4000)])
    scale = plan.events[0].noise_scale
    assert scale == pytest.approx(plan.events[0].sensitivity / 1.5)
    pv = ks_three_arm(radii, lambda r, s: stats.gamma.cdf(r, a=n, scale=s), scale)
    assert_three_arm(pv)


def test_step2_entrywise_laplace_law() -> None:
    n, h, eps2 = 6, 4, 1.5
    mech = core.post_mechanism(core.choose_step2("auto", n, h), eps2, n, h)
    assert mech.scale == pytest.approx(2 * h / eps2)
    rng = noise_generator(22)
    x = rng.uniform(-1, 1, (n, h))
    w = (mech.release_many(x.ravel(), 800, rng=rng) - x.ravel()).ravel()
    pv = ks_three_arm(w, lambda v, s: stats.laplace.cdf(v, scale=s), 2 * h / eps2)
    assert_three_arm(pv)


def test_step2_matrix_l2_law() -> None:
    n, h, eps2 = 1, 5, 2.0  # the one case auto picks the joint draw
    assert core.choose_step2("auto", n, h) == "matrix-l2"
    mech = core.post_mechanism("matrix-l2", eps2, n, h)
    b = 2 * math.sqrt(h) / eps2
    rng = noise_generator(23)
    x = rng.uniform(-1, 1, (n, h))
    draws = np.array([mech.release(x.ravel(), rng=rng).reshape(x.shape) - x for _ in range(6000)])
    norms = np.linalg.norm(draws.reshape(len(draws), -1), axis=1)
    assert_three_arm(ks_three_arm(norms, lambda r, s: stats.gamma.cdf(r, a=n * h, scale=s), b))
    # per-entry variance (nh + 1)b², uncorrelated entries
    flat = draws.reshape(len(draws), -1)
    assert np.var(flat, axis=0).mean() == pytest.approx((n * h + 1) * b**2, rel=0.06)
    corr = np.corrcoef(flat.T)
    assert np.abs(corr[np.triu_indices(n * h, 1)]).max() < 0.06
    # a larger pool: the radius law at dimension n·h = 30
    mech30 = core.post_mechanism("matrix-l2", eps2, 6, 5)
    x30 = rng.uniform(-1, 1, (6, 5))
    r30 = np.array([np.linalg.norm(mech30.release(x30.ravel(), rng=rng) - x30.ravel())
                    for _ in range(6000)])
    assert_three_arm(ks_three_arm(r30, lambda r, s: stats.gamma.cdf(r, a=30, scale=s), b))


@pytest.mark.parametrize("section", [{"step2": "entrywise-l1"}, {"step2": "matrix-l2"},
                                     {"sensitivity": "paper", "step2": "entrywise-l1"}])
def test_expected_error_formula_matches_monte_carlo(section: dict[str, Any]) -> None:
    n, t0, h = 5, 8, 3
    spec, plan, x, y = setup(n, t0, h, 12.0, seed=3, **section)
    lam = float(plan.details["lambda"])
    f_reg = core.ridge_coefficients(x[:, :t0], y[:t0], lam)
    base = x[:, t0:].T @ f_reg
    coef = core.coefficient_mechanism(plan.events[0].epsilon, plan.events[0].sensitivity, n)
    post = core.post_mechanism(plan.details["step2"], plan.events[1].epsilon, n, h)
    expected = core.expected_sq_error(x[:, t0:], f_reg, core.coefficient_noise_variance(coef),
                                      core.post_noise_variance(post))
    sq = np.array([np.sum((counterfactual_path(spec, x, y, t0, plan,
                                                  noise=NoiseGuard(plan, test_seed=24_000 + i))[0]
                           - base) ** 2) for i in range(8000)])
    se = sq.std(ddof=1) / math.sqrt(len(sq))
    assert abs(sq.mean() - expected) < 4 * se, (sq.mean(), expected, se)
    # the public bound (what the plan prints) is an upper bound on the realised formula
    bound = core.public_error_bound(n, t0, h, lam, core.coefficient_noise_variance(coef),
                                    core.post_noise_variance(post))
    assert expected / h <= bound


def test_step1_pointwise_privacy_loss_is_at_most_epsilon1() -> None:
    """T8: (‖α − f(D′)‖ − ‖α − f(D)‖)/a ≤ ε1 at random outputs, on the extremal pair."""
    n, t0, eps1 = 3, 8, 0.7
    rng = np.random.default_rng(25)
    y = rng.choice([-1.0, 1.0], t0)
    lam = float(t0)
    x = np.zeros((n, t0))
    x[0] = math.sqrt(lam / (2 * t0)) * y
    xp = x.copy()
    xp[0] = -x[0]
    f, fp = core.ridge_coefficients(x, y, lam), core.ridge_coefficients(xp, y, lam)
    delta, _ = core.coefficient_sensitivity("tight", n, t0, lam)
    mech = core.coefficient_mechanism(eps1, delta, n)
    alpha = mech.release(np.zeros(n), rng=rng) + f + rng.normal(size=(20000, n))
    loss = (np.linalg.norm(alpha - fp, axis=1) - np.linalg.norm(alpha - f, axis=1)) / mech.scale
    assert loss.max() <= eps1 + 1e-12
    assert loss.max() > 0.9 * eps1  # the pair is extremal: the bound is nearly reached


def test_step1_neighbour_ratio_histogram() -> None:
    """Empirical log density ratio along the neighbours' line stays ≤ ε1 (+ sampling slack)."""
    n, t0, eps1 = 2, 6, 1.0
    y = np.ones(t0)
    lam = float(t0)
    x = np.zeros((n, t0))
    x[0] = math.sqrt(lam / (2 * t0)) * y
    xp = x.copy()
    xp[0] = -x[0]
    f, fp = core.ridge_coefficients(x, y, lam), core.ridge_coefficients(xp, y, lam)
    delta, _ = core.coefficient_sensitivity("tight", n, t0, lam)
    mech = core.coefficient_mechanism(eps1, delta, n)
    rng = np.random.default_rng(26)
    u = (f - fp) / np.linalg.norm(f - fp)
    a = np.array([mech.release(f, rng=rng) @ u for _ in range(100_000)])
    b = np.array([mech.release(fp, rng=rng) @ u for _ in range(100_000)])
    edges = np.linspace(-4, 4, 33)
    ca, _ = np.histogram(a, edges)
    cb, _ = np.histogram(b, edges)
    ok = (ca > 500) & (cb > 500)
    ratio = np.abs(np.log(ca[ok] / cb[ok]))
    assert ok.sum() >= 10
    assert ratio.max() <= eps1 + 0.15


def test_dpsc_obj_privacy_loss_is_unbounded() -> None:
    """Documents spec §4.6: the exact privacy loss of DPSC_obj grows linearly in ‖α‖."""
    n, t0, eps1 = 4, 5, 5.0
    rng = np.random.default_rng(27)
    x = rng.choice([-1.0, 1.0], (n, t0))
    y = rng.choice([-1.0, 1.0], t0)
    xp = x.copy()
    xp[0] = -x[0]
    lam = float(t0)
    p = core.objective_parameters(n, t0, lam, eps1)
    big_a = 2 * x @ x.T + (lam + p.delta_reg) * np.eye(n)
    big_ap = 2 * xp @ xp.T + (lam + p.delta_reg) * np.eye(n)
    evals, evecs = np.linalg.eigh(big_ap @ big_ap - big_a @ big_a)
    if evals[-1] <= 0:
        big_a, big_ap, x, xp = big_ap, big_a, xp, x
        evals, evecs = np.linalg.eigh(big_ap @ big_ap - big_a @ big_a)
    u = evecs[:, -1]

    def loss(alpha: np.ndarray) -> float:
        lhs = np.linalg.norm(2 * xp @ y - big_ap @ alpha) - np.linalg.norm(2 * x @ y - big_a @ alpha)
        return float(lhs / p.beta + np.linalg.slogdet(big_a)[1] - np.linalg.slogdet(big_ap)[1])

    assert loss(1000 * u) > 10 * eps1
    assert loss(10_000 * u) > 9 * loss(1000 * u)


def test_error_falls_with_epsilon_and_default_beats_paper() -> None:
    """Utility improves with ε (exact §5.5 formula and Monte Carlo), and at equal ε the default
    (tight Δ, step 2 auto) is never worse than the paper's calibration."""
    n, t0, h = 6, 12, 3
    rng = np.random.default_rng(28)
    prev_mc = math.inf
    for eps in (5.0, 50.0, 500.0, 5000.0):
        spec, plan, x, y = setup(n, t0, h, eps, seed=4, **{"lambda": "T0"})
        f_reg = core.ridge_coefficients(x[:, :t0], y[:t0], float(plan.details["lambda"]))
        base = x[:, t0:].T @ f_reg
        mc = float(np.mean([np.sum((counterfactual_path(
            spec, x, y, t0, plan, noise=NoiseGuard(plan, test_seed=int(rng.integers(2**31))))[0]
                                    - base) ** 2) for _ in range(400)]))
        assert mc < prev_mc
        prev_mc = mc
        errs = {}
        for sens, step2 in (("tight", "auto"), ("paper", "matrix-l2")):
            _, p, _, _ = setup(n, t0, h, eps, seed=4, sensitivity=sens, step2=step2,
                               **{"lambda": "T0"})
            coef = core.coefficient_mechanism(p.events[0].epsilon, p.events[0].sensitivity, n)
            post = core.post_mechanism(p.details["step2"], p.events[1].epsilon, n, h)
            errs[sens] = core.expected_sq_error(x[:, t0:], f_reg, core.coefficient_noise_variance(coef),
                                                core.post_noise_variance(post))
        assert errs["tight"] < errs["paper"]
