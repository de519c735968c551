"""Independent review of the outcome-scale fixes of the two certified solvers (cate's random-feature
second stage, 6d2ae27..082e17b; owl's weighted ERM, c1a02b3 and 693b1e1): their certificates take
every 2-norm as ‖s·x‖/s with a public power of two s, so no outcome scale makes the squares
underflow (a false certificate) or overflow (no certificate).

What is checked here, against the exact minimiser at the unit scale (both problems are
scale-equivariant: weights, bounds and penalties in outcome units scale, the minimiser's
coordinates scale (rff) or stay (owl)):

- the solve's result lies within the certified distance of the minimiser at outcome scales 2^k
  from the smallest to the largest the plan accepts (coarse steps, and every k near both ends of
  float64's range), in memory, on an engine of uneven batches and through the guaranteed fallback,
  for both losses of the random-feature stage and owl's Huber hinge;
- ``scaled_norm`` is ``np.linalg.norm`` bit for bit wherever the latter is exact (ordinary scales);
- the scale is a function of the public bound alone;
- a plan that accepts an outcome scale can run it: at a subnormal L_w the rff/exact-kernel plan
  accepted the spec and the solve then crashed (exit 1) in ``objective_scale`` — now refused at
  plan time (bounds.outcome, 45dd48e);
- the same squaring pattern in the default-penalty rule (``penalty.choose_penalty``): at outcome
  ranges ≲ 1e-150 every candidate's (noise sd)² + (shrinkage)² underflows to 0 and the rule picks
  the smallest penalty, whatever the noise — now compared in units of the effect (c24ac62).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cli_tests.helpers import invoke, write_yaml
from cli_tests.unit.test_engine_cate import ListEngine
from cli_tests.unit.test_engine_newton import BlockEngine
from dpcausal.commands.cate.krr_accuracy import KrrAccuracy
from dpcausal.commands.cate.rff import (
    FourierFeatures,
    exact_gradient,
    fit_rff_streaming,
    guaranteed_descent,
    solve_rff,
)
from dpcausal.commands.cate.rff_accuracy import RffAccuracy, feature_error
from dpcausal.learners.penalty import choose_penalty
from dpcausal.numerics import MIN_SCALED_BOUND, objective_scale, scaled_norm
from dpcausal.solvers import erm_accuracy
from dpcausal.solvers.backend import InMemory
from dpcausal.solvers.erm import solve_erm, solve_weighted_erm
from dpcausal.solvers.erm_accuracy import ERMAccuracy

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- the random-feature stage (cate)

RFF_N, RFF_M, RFF_H, RFF_LAM = 60, 32, 0.5, 1e-2
RFF_POWERS = [-1020, -1000, -900, -700, -600, -530, -520, -400, -170, -160, -150, 0, 150, 160,
              400, 700, 900, 1000, 1005]
"""Outcome scales 2^k: every band where an unscaled square underflows (k ≲ −511: the gradient,
≲ −537: ‖w‖ near T), is subnormal (k ≲ −1000) or overflows (k ≳ 511), up to the plan's limits."""


def _rff_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    s = rng.uniform(size=(RFF_N, 2))
    rho = rng.uniform(0.0, 0.9, RFF_N)
    phi = np.cos(3.0 * s[:, 1]) + 0.5 * rng.standard_cauchy(RFF_N)
    return s, rho, phi


def _around_the_certificate(seed: int, dim: int, bound: float, tol: float
                            ) -> list[tuple[np.ndarray, np.ndarray]]:
    """(point, gradient) pairs on both sides of a certificate's two tests (‖point‖ ≤ bound,
    ‖gradient‖ ≤ tol), along random directions."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(20):
        direction = rng.standard_normal(dim)
        direction /= np.linalg.norm(direction)
        for g_mult, p_mult in itertools.product((0.5, 0.999, 1.001, 2.0, 1e3), (0.5, 2.0)):
            out.append((np.flip(direction) * bound * p_mult, direction * tol * g_mult))
    return out


def _rff_setup(squared: bool, power: int) -> tuple[Any, ...]:
    s, rho, phi = _rff_data()
    feats = FourierFeatures.draw(2, RFF_M, RFF_H, 3)
    scale = math.ldexp(1.0, power)
    c = None if squared else 0.5
    lw = 2.0 * float(np.max(rho * np.abs(phi))) if squared else 2.0 * 0.5 * 0.9
    acc = RffAccuracy(RFF_N, 2 * RFF_M, RFF_LAM, lw * scale, squared,
                      feature_error(feats.omega))
    return feats, s, rho, phi * scale, None if c is None else c * scale, acc


def _rff_distance_at_unit(squared: bool, w_unit: np.ndarray) -> tuple[float, float]:
    """(an upper bound on ‖w − w*‖ at the unit scale, the certified d* there): ‖∇J(w)‖/(2λ0)
    by strong convexity, ∇J from the exactly rounded gradient plus its rounding allowance."""
    feats, s, rho, phi, c, acc = _rff_setup(squared, 0)
    grad = exact_gradient(InMemory((s, rho, phi), RFF_N), feats, w_unit, n=RFF_N, lam0=RFF_LAM,
                          huber_c=c)
    bound = (float(np.linalg.norm(grad)) + acc.grad_allowance) / acc.strong
    return bound, acc.target


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("power", RFF_POWERS)
def test_rff_solve_is_within_the_certified_distance_at_every_scale(squared: bool,
                                                                  power: int) -> None:
    """In memory: the returned w, scaled back to the unit scale, is within d* of the minimiser
    (its gradient there certifies it). Before 6d2ae27 at 2^−600 w = 0 was accepted unchanged."""
    feats, s, rho, phi, c, acc = _rff_setup(squared, power)
    problem = acc.problem()
    if acc.lipschitz_w < MIN_SCALED_BOUND:  # refused by the plan (bounds.outcome): never solved
        assert problem is not None and problem.startswith("bounds.outcome"), problem
        return
    assert problem is None
    sc = acc.scale
    assert math.isfinite(sc) and sc > 0.0
    fit = fit_rff_streaming(feats, s, rho, phi, lam0=RFF_LAM, huber_c=c, accuracy=acc)
    dist, target = _rff_distance_at_unit(squared, fit.w / math.ldexp(1.0, power))
    assert dist <= target, (dist, target)


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("power", [-1000, -600, -160, 0, 600, 1000])
def test_rff_engine_solve_is_within_the_certified_distance(squared: bool, power: int) -> None:
    feats, s, rho, phi, c, acc = _rff_setup(squared, power)
    cuts = [0, 5, 6, 33, RFF_N]
    engine = ListEngine([(a, (s[a:b], rho[a:b], phi[a:b])) for a, b in itertools.pairwise(cuts)])
    fit = solve_rff(engine, feats, n=RFF_N, lam0=RFF_LAM, huber_c=c, accuracy=acc, rows=16)
    dist, target = _rff_distance_at_unit(squared, fit.w / math.ldexp(1.0, power))
    assert dist <= target, (dist, target)


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("power", [-1000, -600, -160, 600, 1000])
def test_rff_fallback_is_within_the_certified_distance(squared: bool, power: int) -> None:
    """The fallback from far outside the ball R (its first projection takes ‖w‖ at ~10R)."""
    feats, s, rho, phi, c, acc = _rff_setup(squared, power)
    start = np.full(feats.dim, 10.0 * acc.radius)
    fit = guaranteed_descent(InMemory((s, rho, phi), RFF_N), feats, start, n=RFF_N, lam0=RFF_LAM,
                             huber_c=c, accuracy=acc)
    dist, target = _rff_distance_at_unit(squared, fit.w / math.ldexp(1.0, power))
    assert dist <= target, (dist, target)


@pytest.mark.parametrize("power", [-1020, -1000, -600, -530, 530, 600, 1000])
def test_rff_certificate_decides_as_at_the_unit_scale(power: int) -> None:
    """accepts(w·s, g·s) at scale s = 2^k is accepts(w, g) at the unit scale, for gradients
    just below and just above the stop tolerance and w just inside and outside T."""
    *_, acc0 = _rff_setup(False, 0)
    *_, acc = _rff_setup(False, power)
    sc = math.ldexp(1.0, power)
    for w, g in _around_the_certificate(2, acc0.dim, acc0.w_bound, acc0.stop_tol):
        assert acc.accepts(w * sc, g * sc) == acc0.accepts(w, g)


# --------------------------------------------------------------------------- owl's weighted ERM

ERM_N, ERM_D, ERM_W, ERM_LAM = 300, 4, 2.0, 0.004
ERM_POWERS = [-1001, -1000, -990, -700, -600, -540, -520, -170, -160, 0, 160, 400, 700, 900, 1000]
"""W·2^k from 2^−1000 (the smallest W owl accepts) up; W·2^1000 ≈ 2e301."""


def _erm_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    v = rng.uniform(-1.0, 1.0, (ERM_N, ERM_D))
    v /= float(np.linalg.norm(v, axis=1).max())
    y = np.where(rng.uniform(size=ERM_N) < 0.4 + 0.3 * (v[:, 1] > 0), 1.0, -1.0)
    w = rng.uniform(0.0, 1.0, ERM_N) * ERM_W
    return v, y, w


def _erm_acc(power: int) -> ERMAccuracy:
    """owl's certificate (γ = λnW, τ = 1e-6·W) at the weight bound W·2^k."""
    wb = ERM_W * math.ldexp(1.0, power)
    return ERMAccuracy(ERM_N, ERM_D, wb, ERM_LAM * ERM_N * wb, 0.5, 1e-6 * wb)


def _erm_distance_at_unit(theta: np.ndarray) -> tuple[float, float]:
    """(a bound on ‖θ − θ*‖ at the unit scale from its gradient, the certified D there)."""
    v, y, w = _erm_rows()
    acc = _erm_acc(0)
    grad = erm_accuracy.exact_gradient(InMemory((v, y, w), ERM_N), theta, acc)
    return (float(np.linalg.norm(grad)) + acc.grad_allowance) / acc.gamma, acc.distance


@pytest.mark.parametrize("power", ERM_POWERS)
def test_erm_solve_is_within_the_certified_distance_at_every_scale(power: int) -> None:
    """θ is unit-free: at every accepted weight scale it is within D of the unit-scale θ*.
    Before c1a02b3, at W ≈ 1e-163 a point 0.14 from θ* (D ≈ 2.5e-7) was certified."""
    v, y, w = _erm_rows()
    acc = _erm_acc(power)
    assert acc.problem() is None
    sol = solve_weighted_erm(v, y, w * math.ldexp(1.0, power), acc)
    dist, bound = _erm_distance_at_unit(sol.theta)
    assert dist <= bound, (dist, bound)


@pytest.mark.parametrize("power", [-1000, -600, -160, 0, 600, 1000])
def test_erm_engine_and_fallback_are_within_the_certified_distance(power: int) -> None:
    v, y, w = _erm_rows()
    acc = _erm_acc(power)
    ws = w * math.ldexp(1.0, power)
    sol = solve_erm(BlockEngine(v, y, ws, rows=41), acc)
    dist, bound = _erm_distance_at_unit(sol.theta)
    assert dist <= bound, (dist, bound)
    theta = erm_accuracy.guaranteed_descent(InMemory((v, y, ws), ERM_N), np.full(ERM_D, 50.0),
                                            acc)
    dist, bound = _erm_distance_at_unit(theta)
    assert dist <= bound, (dist, bound)


@pytest.mark.parametrize("power", [-1000, -600, -540, 540, 600, 1000])
def test_erm_certificate_decides_as_at_the_unit_scale(power: int) -> None:
    """ĝ scales with W, θ does not: accepts(θ, ĝ·2^k) at W·2^k is accepts(θ, ĝ) at W."""
    acc0, acc = _erm_acc(0), _erm_acc(power)
    sc = math.ldexp(1.0, power)
    for theta, g in _around_the_certificate(3, ERM_D, acc0.theta_bound, acc0.stop_tol):
        assert acc.accepts(theta, g * sc) == acc0.accepts(theta, g)


# ------------------------------------------------------------------------- the scale itself

def test_scaled_norm_is_the_plain_norm_where_that_is_exact() -> None:
    """At ordinary scales the fix must change no decision: ‖s·x‖/s is np.linalg.norm(x) bit for
    bit (s a power of two from any public bound in [1e-100, 1e100])."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        bound = 10.0 ** rng.uniform(-100, 100)
        x = rng.standard_normal(int(rng.integers(1, 40))) * 10.0 ** rng.uniform(-60, 60)
        s = objective_scale(bound)
        assert math.frexp(s)[0] == 0.5  # a power of two
        assert scaled_norm(x, s) == float(np.linalg.norm(x))


def test_the_scale_is_a_function_of_the_public_bound_alone() -> None:
    """s depends on L_w (rff) and W̃, T (owl): two accuracies with equal public inputs give the
    same s, and s·bound is in [1/2, 1) — nothing else (no row, no iterate) enters it."""
    for lw in (1e-300, 2.0**-1000, 0.3, 1.0, 9.025, 1e200, 1e307):
        a = RffAccuracy(100, 64, 0.1, lw, False, 1e-7)
        b = RffAccuracy(100, 64, 0.1, lw, False, 1e-7)
        assert a.scale == b.scale and 0.5 <= a.scale * lw < 1.0
        e = ERMAccuracy(100, 3, lw, lw, 0.5, lw * 1e-6)
        assert 0.5 <= e.grad_scale * e.weight_max < 1.0


# ------------------------------------------------------------------- plan vs solve: no crash

@pytest.mark.parametrize("make", [
    lambda lw: RffAccuracy(1500, 1000, 0.03, lw, False, 1e-13),
    lambda lw: KrrAccuracy(1500, 2, 1.0, 0.03, lw, False),
], ids=["rff", "exact"])
def test_cate_accuracy_the_plan_accepts_has_a_scale(make: Any) -> None:
    """(Finding 1, mended in 45dd48e.) Below 2^-1000 the plan refuses, naming bounds.outcome;
    wherever it accepts, the certificate's power of two exists."""
    lw = 2.0**-1040  # a Huber L_w = 2c(1 − κ)² with c ≈ 5·2^-1040 (outcome bounds ~1e-313)
    problem = make(lw).problem()
    assert problem is not None and problem.startswith("bounds.outcome"), problem
    for ok in (MIN_SCALED_BOUND, 2.0**-900, 1.0, 2.0**1000):
        acc = make(ok)
        if acc.problem() is None:
            assert math.isfinite(objective_scale(acc.lipschitz_w))


def _cate_spec(tmp: Path, power: int, features: str, ridge: float | None = None) -> Path:
    """configs/cate.yaml's data and bounds with the outcome (and huber_c) times 2^power."""
    frame = pd.read_csv(ROOT / "sample_data" / "cate_obs.csv")
    scale = math.ldexp(1.0, power)
    frame["Y"] = frame["Y"] * scale
    csv = tmp / f"cate_{power}.csv"
    frame.to_csv(csv, index=False, float_format="%.17g")
    cate: dict[str, Any] = {"mode": "function", "learner": "r", "grid": {"vary": ["x0"],
                            "points": 11, "fixed": {"x1": 0.5}}, "bandwidth": 1.0,
                            "loss": "huber", "features": features, "huber_c": 5.0 * scale,
                            "plot": False, "split": {"kind": "seeded", "seed": 0}}
    if ridge is not None:
        cate["ridge"] = ridge
    doc: dict[str, Any] = {
        "data": {"path": str(csv), "columns": {"outcome": "Y", "treatment": "A",
                                              "covariates": ["x0", "x1"]}},
        "bounds": {"outcome": [-1.0 * scale, 9.0 * scale], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 5.0, "delta": 1e-5},
        "output": {"dir": str(tmp / f"out_{power}_{features}")},
        "cate": cate,
    }
    return write_yaml(tmp / f"cate_{power}_{features}.yaml", doc)


@pytest.mark.parametrize("features", ["rff", "exact"])
def test_cate_run_at_a_tiny_outcome_scale_is_not_an_internal_error(tmp_path: Path,
                                                                   features: str) -> None:
    spec = _cate_spec(tmp_path, -1040, features, ridge=0.03)
    dry = invoke(["cate", "--spec", spec, "--dry-run"])
    run = invoke(["cate", "--spec", spec, "--test-noise-seed", "7"])
    assert run.exit_code in (0, 2), run.stdout + run.stderr
    assert dry.exit_code == run.exit_code or run.exit_code == 0  # refused in the plan, if at all


# -------------------------------------------------- the same squaring in the default penalties

@pytest.mark.parametrize("power", [-600, 600])
def test_default_penalty_rule_is_unit_free(power: int) -> None:
    """The rule's own docstring (cate/setup.second_stage_ridge): rescaling the outcome rescales
    σ and B alike and leaves λ0 unchanged."""
    grid = [10.0 ** (k / 8.0) for k in range(-32, 1)]
    noise = {lam: 0.12 * (0.0316 / lam) for lam in grid}  # σ(λ) ∝ 1/λ, as the GP's
    base = choose_penalty(noise, 0.2, 2.5, "r")
    sc = math.ldexp(1.0, power)
    scaled = choose_penalty({lam: sd * sc for lam, sd in noise.items()}, 0.2, 2.5 * sc, "r")
    assert 1e-3 < base.l2 < 1.0
    assert scaled.l2 == base.l2


def test_cate_default_second_stage_ridge_is_unit_free(tmp_path: Path) -> None:
    from dpcausal.commands.cate.setup import build_setup
    from dpcausal.commands.cate.spec import CateSpec
    from dpcausal.spec.load import load_spec

    lams = []
    for power in (0, -600):
        spec, _ = load_spec(_cate_spec(tmp_path, power, "rff"), CateSpec)
        lams.append(build_setup(spec, 3000).lam0)
    assert lams[1] == lams[0]
