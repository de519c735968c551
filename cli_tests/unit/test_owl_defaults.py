"""owl's defaults (issue 17): the unit-free λ (γ = λ·n·W), η as a share of the outcome range,
the public total-error rule for λ, and the release's law unchanged when the outcome is rescaled
($ ↔ k$)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from dpcausal.commands.owl import plan as owl_plan
from dpcausal.commands.owl.estimate import fit_nonprivate
from dpcausal.commands.owl.penalty import KAPPA, LAMBDA_RANGE, choose_lambda, shrinkage
from dpcausal.commands.owl.setup import build_setup, prepare
from dpcausal.commands.owl.spec import OwlSpec


def make_spec(scale: float = 1.0, epsilon: float = 5.0, **owl: Any) -> OwlSpec:
    return OwlSpec.model_validate({
        "data": {"columns": {"outcome": "B", "treatment": "A", "covariates": ["x1", "x2"]}},
        "bounds": {"outcome": [0.0, 60000.0 * scale], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": epsilon},
        "owl": {"treated": 1, "propensity": 0.4, **owl}})


def make_frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, 2))
    a = rng.integers(0, 2, n)
    b = np.clip(5000 + 4000 * (2 * a - 1) * (0.5 - x[:, 0]) + rng.gamma(1.3, 3000, n), 0, 60000)
    return pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "A": a, "B": b})


def test_dollars_to_thousands_leave_the_release_law_unchanged() -> None:
    """lambda: total (the default): the same λ, θ̂ and noise law whether B is in $ or k$; the
    old form γ changes meaning with the units (γ = 75 is a different rule in $ and in k$)."""
    frame = make_frame(445, 3)
    thousands = frame.assign(B=frame["B"] / 1000)
    for eps in (1.0, 5.0, 1e9):
        usd, k = make_spec(epsilon=eps), make_spec(scale=1e-3, epsilon=eps)
        p_usd = owl_plan.plan(usd, len(frame), {}, rng=np.random.default_rng(0))
        p_k = owl_plan.plan(k, len(frame), {}, rng=np.random.default_rng(0))
        assert p_usd.details["lambda"] == pytest.approx(p_k.details["lambda"], rel=1e-12)
        assert p_usd.events[0].sensitivity == pytest.approx(p_k.events[0].sensitivity, rel=1e-12)
        assert p_usd.events[0].noise_scale == pytest.approx(p_k.events[0].noise_scale, rel=1e-12)
        s_usd, s_k = build_setup(usd), build_setup(k)
        t_usd = fit_nonprivate(s_usd, prepare(usd, s_usd, frame, None), p_usd.details["gamma"])
        t_k = fit_nonprivate(s_k, prepare(k, s_k, thousands, None), p_k.details["gamma"])
        np.testing.assert_allclose(t_usd, t_k, rtol=1e-6, atol=1e-9)
        assert p_usd.predicted().halfwidth == pytest.approx(p_k.predicted().halfwidth, rel=1e-12)
    g_usd = owl_plan.plan(make_spec(gamma=75.0), 445, {}, rng=np.random.default_rng(0))
    g_k = owl_plan.plan(make_spec(scale=1e-3, gamma=75.0), 445, {}, rng=np.random.default_rng(0))
    assert g_usd.details["lambda"] == pytest.approx(g_k.details["lambda"] / 1000)


def test_lambda_is_gamma_over_n_w_and_eta_a_share_of_the_range() -> None:
    spec = make_spec(**{"lambda": 0.01})
    setup = build_setup(spec)
    assert setup.eta == pytest.approx(1e-4 * 60000)
    plan = owl_plan.plan(spec, 445, {}, rng=np.random.default_rng(0))
    assert plan.details["gamma"] == pytest.approx(0.01 * 445 * setup.weight_bound)
    assert plan.events[0].sensitivity == pytest.approx((2 + 2e-6) / (445 * 0.01))
    assert build_setup(make_spec(eta=0.001)).eta == 0.001  # a number: outcome units
    with pytest.raises(ValidationError, match=r"at most one of owl\.lambda, owl\.gamma"):
        make_spec(gamma=1.0, **{"lambda": 0.1})


def test_rule_goes_to_the_unpenalised_fit_as_epsilon_grows_and_warns_of_shrinkage() -> None:
    setup = build_setup(make_spec())
    picks = [choose_lambda(setup, n=445, epsilon=e, alpha=0.05) for e in (0.1, 1, 5, 100, 1e9)]
    lams = [c.lam for c in picks]
    assert lams == sorted(lams, reverse=True) and lams[-1] < 1e-6 and lams[0] > 1e-2
    assert LAMBDA_RANGE[0] <= min(lams) and max(lams) <= LAMBDA_RANGE[1]
    # the smallest λ whose predicted margin noise is κ: the dry run's margin half-width
    assert all(c.margin_halfwidth == pytest.approx(KAPPA) for c in picks[:-1])
    assert picks[-1].lam == LAMBDA_RANGE[0] and picks[-1].margin_halfwidth < KAPPA  # clipped
    plan = owl_plan.plan(make_spec(epsilon=5.0), 445, {}, rng=np.random.default_rng(0))
    assert plan.predicted().halfwidth == pytest.approx(KAPPA, rel=1e-9)
    small = owl_plan.plan(make_spec(epsilon=0.05), 445, {}, rng=np.random.default_rng(0))
    assert shrinkage(small.details["lambda"]) > 0.5 and "warning_shrinkage" in small.details
    big = owl_plan.plan(make_spec(epsilon=1e9), 445, {}, rng=np.random.default_rng(0))
    assert "warning_shrinkage" not in big.details
    assert big.details["gamma_source"]["source"].startswith("total-error rule")


def test_max_halfwidth_below_a_half_sets_the_rule_s_target() -> None:
    """With lambda: total the margin half-width is κ = ½ by construction; a tighter
    accuracy.max_halfwidth becomes κ (the smallest λ meeting it), so the guard passes."""
    doc = make_spec().model_dump(by_alias=True)
    doc["accuracy"] = {"max_halfwidth": 0.2}
    plan = owl_plan.plan(OwlSpec.model_validate(doc), 445, {}, rng=np.random.default_rng(0))
    assert plan.predicted().halfwidth == pytest.approx(0.2, rel=1e-9)
    loose = {**doc, "accuracy": {"max_halfwidth": 3.0}}
    plan = owl_plan.plan(OwlSpec.model_validate(loose), 445, {}, rng=np.random.default_rng(0))
    assert plan.predicted().halfwidth == pytest.approx(KAPPA, rel=1e-9)
