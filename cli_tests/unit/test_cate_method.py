"""cate: learner identities, the exact KRR solver, large-ε equality with a reference fit, guards."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import optimize
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import LogisticRegression, Ridge

from dpcausal.commands.cate.estimate import halves, run
from dpcausal.commands.cate.krr import fit_krr, huber_value, pseudo_outcomes
from dpcausal.commands.cate.krr_accuracy import KrrAccuracy
from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.privacy import nuisance_learners
from dpcausal.commands.cate.queries import query_points, side_inputs
from dpcausal.commands.cate.setup import build_setup, noise_factor
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.errors import DataError, MissingBoundsError, SpecError, UncertifiedModeError
from dpcausal.mechanisms import NoiseGuard
from dpcausal.mechanisms.gaussian_process import gaussian_kernel


def theta1(x: np.ndarray) -> np.ndarray:
    return np.exp(2 * x[:, 0]) + 3 * np.sin(4 * x[:, 0])


def dataset1(n: int, seed: int) -> pd.DataFrame:
    """Dataset 1 of the paper (App. G.1), Y in [-1, 8.45]."""
    rng = np.random.default_rng(seed)
    beta, gamma = np.array([0.2, 0.25]), np.array([0.6, 0.3])
    x = rng.uniform(size=(n, 2))
    a = (x @ beta >= rng.uniform(-1, 1, n)).astype(float)
    y = theta1(x) * a + x @ gamma + rng.uniform(-1, 1, n)
    return pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1], "A": a, "Y": y})


def make_spec(**cate_over: Any) -> CateSpec:
    doc: dict[str, Any] = {
        "data": {"path": "unused.csv",
                 "columns": {"outcome": "Y", "treatment": "A", "covariates": ["x0", "x1"]}},
        "bounds": {"outcome": [-1.0, 9.0], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 1.0, "delta": 1e-6},
        # seeded: releases are compared with references and across runs (the default is secret)
        "cate": {"grid": {"vary": ["x0"], "points": 21, "fixed": {"x1": 0.5}},
                 "split": {"kind": "seeded", "seed": 0}},
    }
    privacy = cate_over.pop("privacy", None)
    if privacy:
        doc["privacy"].update(privacy)
    doc["cate"].update(cate_over)
    return CateSpec.model_validate(doc)


def test_r_and_dr_pseudo_outcomes_identities() -> None:
    rng = np.random.default_rng(0)
    n = 200
    a = rng.integers(0, 2, n).astype(float)
    y, pi = rng.uniform(-1, 9, n), rng.uniform(0.05, 0.95, n)
    mu0, mu1, g = rng.uniform(-1, 9, n), rng.uniform(-1, 9, n), rng.normal(size=n)
    rho, phi = pseudo_outcomes("r", a, y, pi, mu0, mu1)
    assert np.allclose(rho, (a - pi) ** 2, atol=1e-12)
    mu_a = np.where(a > 0.5, mu1, mu0)
    # bounded identity and the Nie–Wager form with m = π μ1 + (1 − π) μ0
    assert np.allclose(rho * (phi - g), (a - pi) * (y - mu_a) + (a - pi) ** 2 * (mu1 - mu0 - g))
    m = pi * mu1 + (1 - pi) * mu0
    assert np.allclose(rho * (phi - g) ** 2, ((y - m) - (a - pi) * g) ** 2)
    rho_dr, phi_dr = pseudo_outcomes("dr", a, y, pi, mu0, mu1)
    assert np.all(rho_dr == 1.0)
    aipw = np.where(a > 0.5, (y - mu1) / pi, -(y - mu0) / (1 - pi)) + mu1 - mu0
    assert np.allclose(phi_dr, aipw)


def test_squared_loss_krr_equals_sklearn_and_closed_form() -> None:
    rng = np.random.default_rng(1)
    n, h, lam0 = 300, 0.3, 0.02
    s = rng.uniform(size=(n, 2))
    rho, phi = rng.uniform(0.01, 0.9, n), rng.normal(size=n) * 3
    acc = KrrAccuracy(n, 2, h, lam0, 2.0 * float(np.max(rho * np.abs(phi))), squared=True)
    fit = fit_krr(s, rho, phi, bandwidth=h, lam0=lam0, huber_c=None, accuracy=acc)
    assert fit.iterations == 1  # the one Newton solve certifies
    k = gaussian_kernel(s, s, h)
    alpha = np.linalg.solve(np.diag(rho) @ k + n * lam0 * np.eye(n), rho * phi)
    assert np.allclose(fit.alpha, alpha, atol=1e-10)
    ref = KernelRidge(alpha=n * lam0, kernel="rbf", gamma=1 / (2 * h * h))
    ref.fit(s, phi, sample_weight=rho)
    q = rng.uniform(size=(40, 2))
    assert np.allclose(fit.predict(q), ref.predict(q), atol=1e-9)
    # invariance (spec T2): the paper's normalised kernel c·k0 with λ = c·λ0 gives the same fit
    c = 7.3
    alpha_c = np.linalg.solve(np.diag(rho) @ (c * k) + n * (c * lam0) * np.eye(n), rho * phi)
    assert np.allclose(c * alpha_c, alpha, atol=1e-10)


def test_huber_krr_is_the_exact_minimiser() -> None:
    rng = np.random.default_rng(2)
    n, h, lam0, c = 120, 0.4, 0.01, 0.8
    s = rng.uniform(size=(n, 2))
    rho, phi = rng.uniform(0.05, 0.9, n), rng.standard_cauchy(n)
    acc = KrrAccuracy(n, 2, h, lam0, 2.0 * c * 0.9, squared=False)
    fit = fit_krr(s, rho, phi, bandwidth=h, lam0=lam0, huber_c=c, accuracy=acc)
    assert fit.iterations < 100  # Newton certifies
    k = gaussian_kernel(s, s, h)
    w, v = np.linalg.eigh(k)
    root = (v * np.sqrt(np.clip(w, 0, None))) @ v.T  # g = K^{1/2} b parametrisation

    def obj(b: np.ndarray) -> float:
        return float(rho @ huber_value(root @ b - phi, c)) / n + lam0 * float(b @ b)

    ref = optimize.minimize(obj, np.zeros(n), method="L-BFGS-B", options={"gtol": 1e-12,
                                                                          "maxiter": 50_000})
    assert np.max(np.abs(root @ ref.x - k @ fit.alpha)) < 1e-4
    assert np.sum(np.abs(k @ fit.alpha - phi) > c) > 5  # the Huber part is active


def _reference_tau(frame: pd.DataFrame, spec: CateSpec, grid: np.ndarray) -> np.ndarray:
    """An independent R/DR-learner: sklearn nuisances on D̃, sklearn KernelRidge on D."""
    setup = build_setup(spec, len(frame))
    first, second = halves(spec, setup)
    d1, d2 = frame.iloc[first], frame.iloc[second]
    box = setup.box
    prop_l, out_l = nuisance_learners(spec, setup)
    m = setup.n_nuisance
    lr = LogisticRegression(C=1 / (m * prop_l.l2), fit_intercept=False, tol=1e-12,
                            max_iter=10_000)
    lr.fit(box.transform(d1[["x0", "x1"]].to_numpy()), d1["A"].to_numpy())
    c = 4.0
    mus = []
    for arm in (0, 1):
        rg = Ridge(alpha=m * out_l.l2, fit_intercept=False, solver="cholesky")
        rg.fit(box.transform(d1[["x0", "x1"]].to_numpy()), np.clip(d1["Y"], -1, 9) - c,
               sample_weight=(d1["A"] == arm).astype(float))
        mus.append(rg)
    x2 = d2[["x0", "x1"]].to_numpy()
    pi = np.clip(lr.predict_proba(box.transform(x2))[:, 1], 0.05, 0.95)
    mu0, mu1 = (np.clip(c + rg.predict(box.transform(x2)), -1, 9) for rg in mus)
    rho, phi = pseudo_outcomes(spec.cate.learner, d2["A"].to_numpy(), np.clip(d2["Y"], -1, 9),
                               pi, mu0, mu1)
    kr = KernelRidge(alpha=setup.n * setup.lam0, kernel="rbf", gamma=1 / (2 * setup.bandwidth**2))
    kr.fit(x2, phi, sample_weight=rho)
    return kr.predict(grid)


@pytest.mark.parametrize("learner", ["r", "dr"])
def test_at_huge_epsilon_the_release_equals_a_reference_learner(learner: str) -> None:
    frame = dataset1(600, 3)
    spec = make_spec(learner=learner, huber_c=1e4, bandwidth=0.3, ridge=0.01,
                     nuisance={"propensity_l2": 0.05, "outcome_l2": 0.05},
                     privacy={"epsilon": 1e20, "delta": 1e-6})
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0),
                   noise=NoiseGuard(pl, test_seed=1))
    table = rel.tables["cate"]
    ref = _reference_tau(frame, spec, table[["x0", "x1"]].to_numpy())
    assert np.allclose(table["cate"], ref, atol=1e-6, rtol=1e-6)
    assert "cate.png" in rel.figures and rel.figures["cate.png"][:4] == b"\x89PNG"


def test_plan_events_and_parallel_composition() -> None:
    spec = make_spec(privacy={"epsilon": 2.0, "delta": 1e-6})
    pl = plan(spec, 1000, {}, rng=np.random.default_rng(0))
    kinds = [e.kind for e in pl.events]
    assert kinds == ["gaussian", "gaussian", "gaussian_process"]
    assert [e.partition for e in pl.events] == ["cate.halves/nuisance"] * 2 + [
        "cate.halves/second-stage"]
    assert [e.epsilon for e in pl.events] == [1.0, 1.0, 2.0]
    assert pl.cost.epsilon == pytest.approx(2.0) and pl.cost.delta == pytest.approx(1e-6)
    assert pl.guarantee == "approximate" and pl.neighbouring["relation"] == "replace-one"
    # σ0 = max(1, 4√c_K)·L_w·√(2 ln(2/δ))/(λ0 n ε) with h = 1, q = 2, Huber c = 5, κ = 0.05
    setup = build_setup(spec, 1000)
    lw = 2 * 5 * 0.95**2
    factor = max(1.0, 4 / (math.sqrt(2 * math.pi) * 1.0))
    expected = factor * lw * math.sqrt(2 * math.log(2 / 1e-6)) / (setup.lam0 * 500 * 2.0)
    assert pl.events[2].noise_scale == pytest.approx(expected, rel=1e-5)
    assert setup.ridge_choice is not None  # the total-error rule (test_cate_defaults.py)
    assert setup.lam0 == setup.ridge_choice.l2


@pytest.mark.parametrize(("q", "h", "paper_safe"), [(2, 1.0, True), (2, 5.0, False),
                                                    (5, 1.0, False), (5, 0.3, True)])
def test_sensitivity_formula_max_is_never_below_corrected_and_paper_refused_when_unsafe(
        q: int, h: float, paper_safe: bool) -> None:
    names = [f"x{i}" for i in range(q)]
    base = dict(bandwidth=h, grid={"vary": ["x0"], "points": 5})
    doc = make_spec(**base).model_dump(mode="json")
    doc["data"]["columns"]["covariates"] = names
    spec = CateSpec.model_validate(doc)
    setup = build_setup(spec, 400)
    assert noise_factor(spec, setup) >= 1.0
    assert noise_factor(spec, setup) >= setup.printed_factor
    doc["cate"]["sensitivity_formula"] = "paper"
    if paper_safe:
        build_setup(CateSpec.model_validate(doc), 400)
    else:
        with pytest.raises(UncertifiedModeError, match="sensitivity_formula"):
            build_setup(CateSpec.model_validate(doc), 400)


def test_queries_mode_is_asymptotic_and_scales_like_one_over_epsilon() -> None:
    spec = make_spec(mode="queries", gamma_method="certified")
    pl = plan(spec, 1000, {}, rng=np.random.default_rng(0))
    assert pl.guarantee == "asymptotic"
    ev = pl.events[2]
    assert ev.kind == "gaussian" and ev.partition == "cate.halves/second-stage"
    spec2 = make_spec(mode="queries", gamma_method="certified", privacy={"epsilon": 2.0})
    ev2 = plan(spec2, 1000, {}, rng=np.random.default_rng(0)).events[2]
    assert ev2.noise_scale == pytest.approx(ev.noise_scale / 2)
    search = plan(make_spec(mode="queries"), 1000, {}, rng=np.random.default_rng(0))
    assert "per unit of gamma" in search.events[2].params["scale_is"]


def test_queries_mode_search_release_is_close_at_large_epsilon() -> None:
    frame = dataset1(400, 4)
    spec = make_spec(mode="queries", bandwidth=0.3, ridge=0.01, search_points=256,
                     privacy={"epsilon": 1e9, "delta": 1e-6})
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0),
                   noise=NoiseGuard(pl, test_seed=2))
    t = rel.tables["cate"]
    err = np.sqrt(np.mean((t["cate"] - theta1(t[["x0", "x1"]].to_numpy())) ** 2))
    assert err < 1.0


@pytest.mark.parametrize(
    ("over", "exc", "match"),
    [
        (dict(privacy={"delta": 0.0}), SpecError, "privacy.delta"),
        (dict(privacy={"delta": 0.01}), SpecError, "privacy.delta"),
        (dict(mode="queries"), DataError, "needs >= 100 rows"),
        (dict(privacy={"delta": 1e-9}), DataError, "at most 12000 rows"),
    ],
)
def test_guards(over: dict, exc: type, match: str) -> None:
    n = 150 if over.get("mode") == "queries" else 1000
    if over.get("privacy", {}).get("delta") == 1e-9:
        n = 30_000
    with pytest.raises(exc, match=match):
        plan(make_spec(**over), n, {}, rng=np.random.default_rng(0))


def test_missing_bounds_and_bad_treatment() -> None:
    doc = make_spec().model_dump(mode="json")
    doc["bounds"]["outcome"] = None
    with pytest.raises(MissingBoundsError, match=r"bounds\.outcome"):
        plan(CateSpec.model_validate(doc), 1000, {}, rng=np.random.default_rng(0))
    doc = make_spec().model_dump(mode="json")
    doc["bounds"]["covariates"] = {"x0": [0, 1]}
    with pytest.raises(MissingBoundsError, match="x1"):
        plan(CateSpec.model_validate(doc), 1000, {}, rng=np.random.default_rng(0))
    frame = dataset1(200, 5)
    frame.loc[7, "A"] = 2
    spec = make_spec()
    pl = plan(spec, 200, {}, rng=np.random.default_rng(0))
    with pytest.raises(DataError, match=r"column 'A' has 1 value.s. that are neither the treated "
                                        r"value 1 nor the control value 0"):
        run(spec, frame, pl, {}, rng=np.random.default_rng(0),
                 noise=NoiseGuard(pl, test_seed=0))


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match=r"exactly one of cate\.queries"):
        make_spec(queries="q.csv")
    with pytest.raises(ValueError, match="DR-learner needs"):
        make_spec(learner="dr", propensity_clip=0.01)
    with pytest.raises(ValueError, match="squared"):
        make_spec(mode="queries", loss="huber")


def test_query_file_must_not_be_the_data(tmp_path: Path) -> None:
    doc = make_spec().model_dump(mode="json")
    doc["cate"]["grid"] = None
    doc["cate"]["queries"] = str(tmp_path / "d.csv")
    doc["data"]["path"] = str(tmp_path / "d.csv")
    with pytest.raises(SpecError, match="sensitive data file"):
        side_inputs(CateSpec.model_validate(doc))


def test_two_dimensional_grid_and_fixed_covariates() -> None:
    frame = dataset1(300, 6)
    spec = make_spec(grid={"points": 9}, privacy={"epsilon": 2.0})
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    assert pl.details["queries"] == 81
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0),
                   noise=NoiseGuard(pl, test_seed=1))
    table = rel.tables["cate"]
    assert list(table.columns) == ["x0", "x1", "cate", "cate_noise_lo", "cate_noise_hi",
                                   "cate_clamped"] and len(table) == 81
    assert rel.figures["cate.png"][:4] == b"\x89PNG"
    doc = make_spec().model_dump(mode="json")
    doc["data"]["columns"]["covariates"] = ["x0", "x1", "x2"]
    doc["cate"]["grid"] = {"points": 4}
    with pytest.raises(SpecError, match=r"cate\.grid\.vary"):
        plan(CateSpec.model_validate(doc), 500, {}, rng=np.random.default_rng(0))
    doc["cate"]["grid"] = {"vary": ["x2"], "fixed": {"x0": 0.25}}
    grid = query_points(CateSpec.model_validate(doc), build_setup(
        CateSpec.model_validate(doc), 500), {})
    assert len(grid) == 101 and np.all(grid["x0"] == 0.25) and np.all(grid["x1"] == 0.5)
