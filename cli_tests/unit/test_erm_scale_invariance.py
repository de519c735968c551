"""owl's weighted-ERM solve (dpcausal/solvers/erm*.py) is invariant to the outcome scale: the
weights w = B′/π and γ = λnW carry the outcome's units while θ does not, so scaling the weights,
W and γ by a power of two scales every gradient exactly and leaves every iterate unchanged. The
certified result must be the same θ, bit for bit — not a point the certificate accepted because
‖ĝ‖'s squares underflowed (outcome scales ≲ 1e-158: a false certificate, θ̃ up to ‖θ*‖ from the
minimiser while the sensitivity adds 2·D ≈ 5e-7), nor the guaranteed fallback because they
overflowed (≳ 1e154: every iterate refused). The logistic learners' certificate
(dpcausal/learners/rounding.py) has no such scale: pinned below."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cli_tests.helpers import invoke, read_json, write_yaml
from cli_tests.unit.test_engine_newton import BlockEngine
from dpcausal.learners import dp_logistic
from dpcausal.learners.logistic import CertifiedLogistic
from dpcausal.learners.rounding import LogisticAccuracy
from dpcausal.solvers.backend import InMemory
from dpcausal.solvers.erm import solve_erm, solve_weighted_erm
from dpcausal.solvers.erm_accuracy import ERMAccuracy, guaranteed_descent

N, D, W, LAM = 400, 5, 2.0, 0.004


def _rows(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    v = rng.uniform(-1.0, 1.0, (N, D))
    v /= float(np.linalg.norm(v, axis=1).max())
    y = np.where(rng.uniform(size=N) < 0.5, 1.0, -1.0)
    w = rng.uniform(0.1, 1.0, N) * (1.0 + (y > 0) * v[:, 0])  # in [0, W]: a signal in x1
    return v, y, w


def _acc(scale: float, n: int = N) -> ERMAccuracy:
    """owl's certificate (γ = λnW, τ = 1e-6·W) at the weight bound W·scale."""
    acc = ERMAccuracy(n, D, W * scale, LAM * n * W * scale, 0.5, 1e-6 * W * scale)
    assert acc.problem() is None
    return acc


@pytest.mark.parametrize("power", [-540, -600, -1000, 600, 900])
def test_solve_is_exactly_scale_equivariant(power: int) -> None:
    """Before: at 2^−540 (W ≈ 5.6e-163) the certificate accepted a point 0.14 from θ*, at 2^−600
    θ = 0 before any step; at 2^600 Newton saw ‖ĝ‖ = ∞ and the fallback ran its 2,000+ steps."""
    v, y, w = _rows()
    base = solve_weighted_erm(v, y, w, _acc(1.0))
    scaled = solve_weighted_erm(v, y, w * 2.0**power, _acc(2.0**power))
    assert base.certified and base.iterations < 20
    assert (scaled.certified, scaled.iterations) == (True, base.iterations)
    np.testing.assert_array_equal(scaled.theta, base.theta)
    assert scaled.grad_norm == base.grad_norm * 2.0**power


@pytest.mark.parametrize("power", [-600, 600])
def test_engine_solve_is_exactly_scale_equivariant(power: int) -> None:
    """The engine path certifies on one more pass of exactly added pieces (erm.certify); uneven
    batches of 97 rows."""
    v, y, w = _rows(1)
    runs = []
    for scale in (1.0, 2.0**power):
        engine = BlockEngine(v, y, w * scale)
        runs.append((solve_erm(engine, _acc(scale)), engine.passes))
    (base, base_passes), (scaled, scaled_passes) = runs
    assert base.certified
    assert (scaled.certified, scaled.iterations, scaled_passes) == (True, base.iterations,
                                                                    base_passes)
    np.testing.assert_array_equal(scaled.theta, base.theta)


@pytest.mark.parametrize("power", [-600, 600])
def test_fallback_is_exactly_scale_equivariant(power: int) -> None:
    """The guaranteed fallback from outside the ball (its first step projects) takes the same
    steps and stops at the same certified step at every scale."""
    v, y, w = _rows(2)
    thetas = []
    for scale in (1.0, 2.0**power):
        acc = _acc(scale)
        start = np.full(D, 10.0 * acc.radius)
        thetas.append(guaranteed_descent(InMemory((v, y, w * scale), N), start, acc))
    base, scaled = thetas
    assert float(np.linalg.norm(base)) > 0.0
    np.testing.assert_array_equal(scaled, base)


@pytest.mark.parametrize("power", [-540, -600, -1000])
def test_certificate_refuses_a_gradient_whose_squares_underflow(power: int) -> None:
    """The privacy bug: ‖ĝ‖ was computed unscaled, so at W ≲ 1e-156 a gradient 100× the stop
    tolerance had squares that underflowed (to 0 below ~1e-162) and was accepted, though it
    only bounds ‖θ̃ − θ*‖ by 100τ/γ ≫ D, the slack the sensitivity adds."""
    acc = _acc(2.0**power)
    grad = np.zeros(D)
    grad[:3] = 100.0 * acc.stop_tol
    assert not acc.accepts(np.zeros(D), grad)
    assert acc.accepts(np.zeros(D), grad * 1e-3)
    assert acc.grad_norm(grad) == pytest.approx(math.sqrt(3.0) * 100.0 * acc.stop_tol)


def test_certificate_accepts_a_small_gradient_at_a_huge_scale() -> None:
    """‖ĝ‖'s squares overflowed beyond ~1.3e154: every gradient was refused."""
    acc = _acc(2.0**700)
    grad = np.full(D, 1e-3 * acc.stop_tol)
    assert acc.accepts(np.zeros(D), grad)
    assert not acc.accepts(np.zeros(D), grad * 1e4)


def _owl_spec(tmp: Path, power: int) -> Path:
    """configs/owl.yaml's data and bounds with the outcome scaled by 2^power (λ and η default:
    both unit-free)."""
    root = Path(__file__).resolve().parents[2]
    frame = pd.read_csv(root / "sample_data" / "owl_trial.csv")
    frame["B"] = frame["B"] * 2.0**power
    csv = tmp / f"owl_{power}.csv"
    frame.to_csv(csv, index=False, float_format="%.17g")
    doc: dict[str, Any] = {
        "data": {"path": str(csv), "columns": {"outcome": "B", "treatment": "A",
                                              "covariates": ["x1", "x2", "x3", "x4"]}},
        "bounds": {"outcome": [-7.6 * 2.0**power, 7.4 * 2.0**power], "covariates": [0.0, 1.0]},
        "privacy": {"epsilon": 5.0},
        "output": {"dir": str(tmp / f"out_{power}")},
        "owl": {"treated": 1, "propensity": 0.5},
    }
    return write_yaml(tmp / f"owl_{power}.yaml", doc)


def test_owl_release_is_the_same_at_outcome_scale_1e_minus_200(tmp_path: Path) -> None:
    """Through the CLI: outcome bounds [−7.6, 7.4]·2^−664 (≈ 1e-200) release the same θ, bit for
    bit, as the unit scale under one noise seed (the solve's θ is unit-free, and so are λ, Δ and
    the noise). Before, the solver returned θ = 0 there and the release was noise alone."""
    thetas = []
    for power in (0, -664):
        res = invoke(["owl", "--spec", _owl_spec(tmp_path, power), "--json",
                      "--test-noise-seed", "1"])
        assert res.exit_code == 0, res.stdout + res.stderr
        out = json.loads(res.stdout)
        thetas.append(read_json(Path(out["output_paths"][0]).parent / "rule.json")["theta"])
    assert thetas[1] == thetas[0]


@pytest.mark.parametrize("power", [-1015, -1040])
def test_owl_refuses_a_weight_bound_below_float64s_reach(tmp_path: Path, power: int) -> None:
    """Below W = 2^−1000 the rounding model of ε_g and the certificate's power of two 1/W fail
    (at a subnormal W it does not exist in float64). Before, such specs released noise alone
    (‖ĝ‖ underflowed to 0: θ = 0 certified); now the spec is refused before any row is read,
    with exit 2 and the field to change."""
    res = invoke(["owl", "--spec", _owl_spec(tmp_path, power), "--dry-run"])
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "bounds.outcome" in res.stderr and "2^-1000" in res.stderr
    assert ERMAccuracy(N, D, 2.0**power, LAM * N * 2.0**power, 0.5, 1e-6 * 2.0**power).problem()


@pytest.mark.parametrize("lam", [1e-3, 1.0, 1e150, 1e300])
@pytest.mark.parametrize("make", [
    lambda lam: CertifiedLogistic(lam, 0.05).accuracy(1000, 6),
    lambda lam: dp_logistic.accuracy(1000, 7, lam),
])
def test_logistic_certificate_has_no_user_scale(lam: float, make: Any) -> None:
    """Why LogisticAccuracy.accepts may take its norms unscaled: its objective's units are fixed.
    The labels are 0/1 and the rows have ‖x̃‖ ≤ R = √p or 1 whatever the spec's bounds (no
    outcome enters), so a gradient at ‖θ‖ ≤ T has ‖∇F‖ ≤ R + λT; the only user scale is λ, and
    τ ≥ 4ε_g ≥ R·γ_{SUM_TERMS} ≫ 1e-154 at every λ. So a gradient the certificate must refuse
    (‖ĝ‖ > τ) never has squares that underflow, and one it should accept (‖ĝ‖ ≤ τ ≪ 1e154 at an
    accepted λ) never overflows; nor can θ's norm (‖θ‖ ≤ T ≥ 1) pass for one below T.
    Should R or the labels ever carry a spec's units, this fails and the norms need the
    scaling of ERMAccuracy.grad_norm."""
    acc: LogisticAccuracy = make(lam)
    assert acc.radius in (1.0, math.sqrt(acc.p))
    assert 1e-100 < 4.0 * acc.grad_allowance <= acc.stop_tol
    assert acc.theta_bound >= 1.0
    if acc.problem() is None and acc.stop_tol < 1e100:
        grad = np.full(acc.p, 0.5 * acc.stop_tol / math.sqrt(acc.p))
        assert acc.accepts(np.zeros(acc.p), grad)
        assert not acc.accepts(np.zeros(acc.p), grad * 4.0)
