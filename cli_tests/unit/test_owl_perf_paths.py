"""The fast paths added for owl's speed give the same results as the plain code they replace."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from dpcausal.commands.common.linear_rule import FeatureMap, random_fourier_projection
from dpcausal.errors import DataError
from dpcausal.frames import numeric_column, numeric_columns, numeric_matrix
from dpcausal.numerics import SUM_CHUNK
from dpcausal.solvers import erm, erm_passes
from dpcausal.solvers.backend import InMemory
from dpcausal.solvers.erm import HuberHinge, gradient, objective, solve_weighted_erm
from dpcausal.solvers.erm_accuracy import ERMAccuracy


def _reference_transform(fmap: FeatureMap, x: np.ndarray) -> np.ndarray:
    s = fmap.scale(x)
    if fmap.intercept:
        s = np.hstack([np.ones((s.shape[0], 1)), s])
    return s * (1.0 / math.sqrt(s.shape[1]) * (1.0 - 8.0 * 2.0**-53))


@pytest.mark.parametrize("scaling", ["minmax", "maxabs"])
@pytest.mark.parametrize("intercept", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
def test_linear_transform_is_bitwise_the_reference(scaling: str, intercept: bool,
                                                   order: str) -> None:
    rng = np.random.default_rng(0)
    lo = rng.uniform(-3, 0, 5)
    hi = lo + rng.uniform(0.1, 5, 5)
    fmap = FeatureMap(tuple("abcde"), lo, hi, scaling, intercept)
    x = np.asarray(rng.normal(0, 4, size=(300, 5)), order=order)  # many values out of bounds
    got = fmap.transform(x)
    assert np.array_equal(got, _reference_transform(fmap, x))
    assert np.all(np.linalg.norm(got, axis=1) <= 1 + 1e-12)


@pytest.mark.parametrize("n", [0, 1, 8191, 8192, 8193, 20_000])
def test_linear_transform_block_boundaries(n: int) -> None:
    rng = np.random.default_rng(n)
    fmap = FeatureMap(("a", "b"), np.array([-1.0, 0.0]), np.array([2.0, 5.0]), "minmax", True)
    x = rng.normal(0, 3, size=(n, 2))
    assert np.array_equal(fmap.transform(x), _reference_transform(fmap, x))


@pytest.mark.parametrize("n", [0, 1, 8191, 8193, 20_000])
@pytest.mark.parametrize("scaling", ["minmax", "maxabs"])
@pytest.mark.parametrize("intercept", [True, False])
def test_transform_columns_equals_transform_of_the_stack(n: int, scaling: str,
                                                         intercept: bool) -> None:
    rng = np.random.default_rng(n + 7)
    lo = np.array([-1.0, 0.0, -4.0])
    hi = np.array([2.0, 5.0, -1.0])
    fmap = FeatureMap(("a", "b", "c"), lo, hi, scaling, intercept)
    cols = [rng.normal(0, 3, size=n) for _ in range(3)]
    assert np.array_equal(fmap.transform_columns(cols), fmap.transform(np.column_stack(cols)))


def test_transform_columns_with_random_features_falls_back() -> None:
    rng = np.random.default_rng(1)
    omega, offset = random_fourier_projection(2, 7, 1.0, rng=np.random.default_rng(3))
    fmap = FeatureMap(("a", "b"), np.zeros(2), np.ones(2), "minmax", True, omega, offset)
    cols = [rng.uniform(size=50) for _ in range(2)]
    assert np.array_equal(fmap.transform_columns(cols), fmap.transform(np.column_stack(cols)))


def test_numeric_columns_equal_numeric_column() -> None:
    frame = pd.DataFrame({"f": [1.0, 2.5, 3.0], "i": [1, 2, 3], "s": ["1", "2", "3"],
                          "inf": [1.0, np.inf, 2.0], "bad": ["1", "x", "3"]})
    got = numeric_columns(frame, ["f", "i", "s"], None)
    for arr, col in zip(got, ["f", "i", "s"], strict=True):
        assert arr.dtype == np.float64
        np.testing.assert_array_equal(arr, numeric_column(frame, col, None))
    for bad in ("inf", "bad"):
        with pytest.raises(DataError) as fast:
            numeric_columns(frame, ["f", bad], "d.csv")
        with pytest.raises(DataError) as plain:
            numeric_column(frame, bad, "d.csv")
        assert str(fast.value) == str(plain.value)


def test_numeric_matrix_equals_column_stack_and_keeps_errors() -> None:
    frame = pd.DataFrame({
        "f": [1.0, 2.5, 3.0], "i": [1, 2, 3], "b": [True, False, True], "s": ["1", "2", "3"],
        "bad_s": ["1", "x", "3"], "inf": [1.0, np.inf, 2.0], "nan": [1.0, 2.0, np.nan],
        "na": pd.array([1, None, 3], dtype="Int64"),
    })
    good = ["f", "i", "b", "s"]
    np.testing.assert_array_equal(
        numeric_matrix(frame, good, None),
        np.column_stack([numeric_column(frame, c, None) for c in good]),
    )
    for bad in ("bad_s", "inf", "nan", "na"):
        with pytest.raises(DataError) as fast:
            numeric_matrix(frame, ["f", bad], "d.csv")
        with pytest.raises(DataError) as plain:
            numeric_column(frame, bad, "d.csv")
        assert str(fast.value) == str(plain.value)
        assert f"column '{bad}'" in str(fast.value)


def test_numeric_column_fast_path_returns_a_fresh_array() -> None:
    frame = pd.DataFrame({"f": [1.0, 2.0], "i": np.array([3, 4], dtype=np.int32)})
    for col in ("f", "i"):
        arr = numeric_column(frame, col, None)
        assert arr.dtype == np.float64
        arr[0] = -99.0  # must not write through to the frame
        assert frame[col].iloc[0] != -99


def _reference_solve(v, y, w, gamma, loss) -> np.ndarray:  # type: ignore[no-untyped-def]
    res = optimize.minimize(objective, np.zeros(v.shape[1]), args=(v, y, w, gamma, loss),
                            jac=True, method="L-BFGS-B",
                            options={"maxiter": 5000, "gtol": 1e-12, "ftol": 0.0})
    return np.asarray(res.x)


@pytest.mark.parametrize("seed", range(12))
def test_newton_solver_reaches_tolerance_and_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 3000))
    d = int(rng.integers(2, 12))
    gamma = float(np.exp(rng.uniform(np.log(1e-2), np.log(1e4))))
    loss = HuberHinge(float(rng.choice([0.5, 0.1, 1.0])))
    v = rng.normal(size=(n, d))
    v /= np.maximum(1.0, np.linalg.norm(v, axis=1))[:, None]
    if seed % 3 == 0:
        v = np.round(v, 1)  # ties and duplicated rows
    y = rng.choice([-1.0, 1.0], size=n)
    w = rng.uniform(0, 30, n) * (rng.uniform(size=n) > 0.3)
    acc = ERMAccuracy(n, d, 30.0, gamma, loss.h, 30e-6)
    tol = acc.stop_tol
    sol = solve_weighted_erm(v, y, w, acc)
    assert sol.certified
    assert np.linalg.norm(gradient(sol.theta, v, y, w, gamma, loss)) <= tol
    ref = _reference_solve(v, y, w, gamma, loss)
    ref_g = float(np.linalg.norm(gradient(ref, v, y, w, gamma, loss)))
    # both are within (their gradient norm)/γ of the unique minimiser
    assert np.linalg.norm(sol.theta - ref) <= (tol + ref_g) / gamma + 1e-9


def test_degenerate_problem_falls_back_and_still_converges() -> None:
    # fewer rows than dimensions and a tiny γ: Newton from 0 stalls, the L-BFGS start finishes
    rng = np.random.default_rng(3)
    n, d, gamma, loss = 5, 16, 0.0064, HuberHinge(0.01)
    v = rng.normal(size=(n, d))
    v /= np.maximum(1.0, np.linalg.norm(v, axis=1))[:, None]
    y = rng.choice([-1.0, 1.0], size=n)
    w = rng.uniform(0, 1000, n)
    acc = ERMAccuracy(n, d, 1000.0, gamma, loss.h, 1e-3)
    sol = solve_weighted_erm(v, y, w, acc)
    assert sol.certified
    assert np.linalg.norm(gradient(sol.theta, v, y, w, gamma, loss)) <= acc.stop_tol


def test_dloss_equals_huber_derivative() -> None:
    z = np.linspace(-3, 4, 10_001)
    for h in (0.01, 0.5, 2.0):
        np.testing.assert_array_equal(erm_passes.huber_dloss(z, h), HuberHinge(h).derivative(z))


@pytest.mark.parametrize("nested", [5000, 30])  # the subsample's own warm start off, on
@pytest.mark.parametrize("gamma", [0.5, 50.0, 5000.0])
def test_subsample_warm_start_gives_a_certified_solution(monkeypatch: pytest.MonkeyPatch,
                                                         gamma: float, nested: int) -> None:
    monkeypatch.setattr(erm, "WARM_START_MIN_ROWS", 2000)
    monkeypatch.setattr(erm, "WARM_START_ROWS", 300)
    monkeypatch.setattr(erm, "WARM_START_NESTED_ROWS", nested)
    rng = np.random.default_rng(11)
    n, d = 6000, 6
    v = rng.uniform(size=(n, d)) / math.sqrt(d)
    y = rng.choice([-1.0, 1.0], size=n)
    w = rng.uniform(0, 30, n)
    loss = HuberHinge(0.5)
    acc = ERMAccuracy(n, d, 30.0, gamma, loss.h, 30e-6)
    tol = acc.stop_tol
    start = erm.warm_start(InMemory((v, y, w), n), acc)
    assert np.any(start != 0.0)  # the subsample's minimiser, not the cold start
    sol = solve_weighted_erm(v, y, w, acc)
    assert np.linalg.norm(gradient(sol.theta, v, y, w, gamma, loss)) <= tol
    cold, cold_g, _ = erm.newton(InMemory((v, y, w), n), np.zeros(d), acc, max_newton=100)
    assert np.linalg.norm(cold_g) <= tol
    assert np.linalg.norm(sol.theta - cold) <= 2 * tol / gamma


@pytest.mark.parametrize("scaling", ["maxabs", "minmax"])
@pytest.mark.parametrize("intercept", [True, False])
def test_maps_of_clipped_rows_are_bitwise_those_of_raw_rows(scaling: str,
                                                            intercept: bool) -> None:
    # two-stage's prepare clips its covariates once, maps the features from the clipped rows and
    # scales them again only when stage 1 asks: the same bits as clip → scale → transform
    rng = np.random.default_rng(3)
    lower, upper = np.array([-1.0, 0.0, -3.5]), np.array([2.0, 7.0, -0.5])
    fmap = FeatureMap(("a", "b", "c"), lower, upper, scaling, intercept)
    x = rng.uniform(-9.0, 9.0, (20_000, 3))
    clipped = np.clip(x, lower, upper)
    assert np.array_equal(fmap.scale_clipped(clipped), fmap.scale(x))
    assert np.array_equal(fmap.transform(clipped), fmap.transform(x))
    for block in (8192, 7, 20_000, 50_000):  # block edges inside, at and past the last row
        got_clipped, got = fmap.clip_transform_columns(list(x.T), block=block)
        assert got_clipped.flags.c_contiguous
        assert np.array_equal(got_clipped, clipped)
        assert np.array_equal(got, fmap.transform(x))


@pytest.mark.parametrize("n", [0, 1, 2047, 2049, 4097, 30_000])
def test_a_fused_sweep_gives_the_plain_blocked_statistics(n: int) -> None:
    """Issue 24: one sweep computes every statistic of a pass block by block. Its gradients are
    bit for bit the certificate's sum — margins from scratch at the named point, coefficients
    w·y·ℓ'(z), one product per block of ≤ SUM_CHUNK rows, the blocks added exactly rounded —
    whatever else the sweep computes; the Hessians and line sums (path only) equal the plain
    whole-piece expressions to rounding."""
    rng = np.random.default_rng(n)
    d, h = 6, 0.5
    v = rng.uniform(-1, 1, size=(n, d)) / math.sqrt(d)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    w = rng.uniform(0, 3, size=n)
    theta, step = rng.normal(0, 2, size=d), rng.normal(0, 0.5, size=d)
    at = np.stack([theta - 0.3 * step, theta - step])
    ts = np.array([0.0, 0.1, 0.5, 1.0])
    rows = erm_passes.FUSED_ROWS
    assert rows <= SUM_CHUNK

    def plain_gradients(points: np.ndarray, first: int) -> np.ndarray:
        """At columns first: of ``points`` (d × m): the sweep's one product per block for the
        margins, one for the gradients."""
        blocks = []
        for lo in range(0, max(n, 1), rows):
            vb, yb, wb = v[lo:lo + rows], y[lo:lo + rows], w[lo:lo + rows]
            zb = yb * (vb @ points).T[first:]
            blocks.append((wb * yb * -np.clip(((1.0 + h) - zb) / (2.0 * h), 0.0, 1.0)) @ vb)
        return blocks[0] if len(blocks) == 1 else np.array(
            [[math.fsum(b[k, j] for b in blocks) for j in range(d)] for k in range(len(blocks[0]))])

    grads, hess, line, scale = erm_passes.sweep((v, y, w), at, h=h, hessians=True, step=step,
                                                line=(theta, ts))
    assert np.array_equal(grads, plain_gradients(np.column_stack([step, theta, *at]), 2))
    for k, p in enumerate(at):
        np.testing.assert_allclose(grads[k], ((w * y * erm_passes.huber_dloss(y * (v @ p), h))
                                              @ v), rtol=1e-10, atol=1e-10)
        zp = y * (v @ p)
        act = np.abs(1.0 - zp) <= h
        np.testing.assert_allclose(hess[k], v[act].T @ (v[act] * (w[act] / (2 * h))[:, None]),
                                   rtol=1e-12, atol=1e-12)
    assert np.array_equal(erm_passes.gradient_pass((v, y, w), 0, theta=theta, h=h),
                          plain_gradients(theta[:, None], 0)[0])
    z, u = y * (v @ theta), y * (v @ step)
    dphi = [-(w * u) @ erm_passes.huber_dloss(z - t * u, h) for t in ts]
    d2phi = [(w * u * u / (2 * h)) @ (np.abs(1.0 - z + t * u) <= h) for t in ts]
    np.testing.assert_allclose(line[0], dphi, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(line[1], d2phi, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose([line[2, 0], scale], np.abs(w * u).sum(), rtol=1e-12, atol=0)
    crossings = np.concatenate([(z - (1.0 + h)) / u, (z - (1.0 - h)) / u])
    assert line[3].sum() == np.sum((crossings > ts[0]) & (crossings < ts[-1]))


@pytest.mark.parametrize("start", [0, 1, 6, 7, 13, 1000])
@pytest.mark.parametrize("k", [1, 3, 7])
def test_stride_rows_selects_the_global_multiples_of_k(start: int, k: int) -> None:
    m = 20
    v = np.arange(m, dtype=np.float64)[:, None]
    got = erm_passes.stride_rows((v, v[:, 0].copy(), v[:, 0].copy()), start, k=k)
    want = np.flatnonzero((np.arange(start, start + m) % k) == 0)
    assert np.array_equal(got[1], want.astype(np.float64))
    assert np.array_equal(got[0][:, 0], want.astype(np.float64))
