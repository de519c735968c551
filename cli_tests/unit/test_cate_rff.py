"""Random-Fourier-feature variant of the function release: features, exact solve, sensitivity."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats
from sklearn.linear_model import Ridge

from cli_tests.helpers import assert_three_arm, ks_three_arm
from cli_tests.unit.test_cate_method import dataset1, make_spec
from dpcausal.commands.cate import rff as cate_rff
from dpcausal.commands.cate import rff_features as rff_feature_map
from dpcausal.commands.cate import rff_pass
from dpcausal.commands.cate.estimate import prepare, run, second_stage_rff
from dpcausal.commands.cate.krr import huber_value, pseudo_outcomes
from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.privacy import function_mechanism, nuisance_learners
from dpcausal.commands.cate.rff import FourierFeatures, fit_rff_streaming
from dpcausal.commands.cate.setup import build_setup, rff_features
from dpcausal.learners.dp_logistic import PropensityModel
from dpcausal.learners.dp_ridge import OutcomeModel
from dpcausal.mechanisms import GaussianProcessMechanism, NoiseGuard
from dpcausal.mechanisms.gaussian_process import gaussian_kernel


class FixedTol:
    """A stand-in accuracy for Newton-exactness tests: certify at ‖ĝ‖ ≤ tol (never falls back
    here; the proven constants are tested in test_engine_cate and test_cate_rff_accuracy)."""

    def __init__(self, tol: float) -> None:
        self.stop_tol = tol
        self.scale = 1.0  # the line search's public power of two (RffAccuracy.scale): unscaled

    def accepts(self, w: np.ndarray, grad: np.ndarray) -> bool:
        return bool(np.linalg.norm(grad) <= self.stop_tol)


def test_features_have_unit_norm_and_approximate_the_gaussian_kernel() -> None:
    feats = FourierFeatures.draw(3, 4000, 0.5, seed=1)
    s = np.random.default_rng(2).uniform(size=(20, 3))
    z = feats.transform(s)
    assert z.shape == (20, 8000) and np.allclose(np.linalg.norm(z, axis=1), 1.0)
    assert np.max(np.abs(z @ z.T - gaussian_kernel(s, s, 0.5))) < 0.05


def test_fit_is_exact_for_squared_and_huber_losses() -> None:
    rng = np.random.default_rng(3)
    n = 400
    feats, s = FourierFeatures.draw(2, 30, 0.4, seed=4), rng.uniform(size=(n, 2))
    z = feats.transform(s)
    rho, phi = rng.uniform(0.05, 0.9, n), rng.standard_cauchy(n)
    sq = fit_rff_streaming(feats, s, rho, phi, lam0=0.01, huber_c=None, accuracy=FixedTol(1e-12))
    ref = Ridge(alpha=n * 0.01, fit_intercept=False, solver="cholesky").fit(z, phi, sample_weight=rho)
    assert np.allclose(sq.w, ref.coef_, atol=1e-8)
    hub = fit_rff_streaming(feats, s, rho, phi, lam0=0.01, huber_c=0.7, accuracy=FixedTol(1e-12))

    def obj(w: np.ndarray) -> float:
        return float(rho @ huber_value(z @ w - phi, 0.7)) / n + 0.01 * float(w @ w)

    best = optimize.minimize(obj, np.zeros(z.shape[1]), method="BFGS", options={"gtol": 1e-12})
    assert obj(hub.w) <= best.fun + 1e-12
    assert np.allclose(hub.w, best.x, atol=1e-4)


def test_weight_sensitivity_holds_over_adversarial_neighbours() -> None:
    spec = make_spec(features="rff", rff_dim=40, bandwidth=0.3, ridge=0.02)
    n = 150
    setup = build_setup(spec, 2 * n)
    rng = np.random.default_rng(5)
    prop = PropensityModel(setup.box, rng.normal(0, 2, 3), setup.kappa)
    outm = OutcomeModel(setup.box, rng.normal(0, 3, (2, 3)), 4.0, setup.y_bounds)
    frame = dataset1(n, 6)
    x, a, y = frame[["x0", "x1"]].to_numpy(), frame["A"].to_numpy(), frame["Y"].to_numpy()
    feats = rff_features(spec, setup)
    base = second_stage_rff(setup, feats, prop, outm, x, a, y)
    worst = 0.0
    for t in range(120):
        j = int(rng.integers(n))
        x2, a2, y2 = x.copy(), a.copy(), y.copy()
        x2[j] = (rng.uniform(size=2) < 0.5).astype(float)
        a2[j], y2[j] = float(t % 2), [-1.0, 9.0][(t // 2) % 2]
        other = second_stage_rff(setup, feats, prop, outm, x2, a2, y2)
        worst = max(worst, float(np.linalg.norm(other - base)))
    assert 0.1 * setup.rkhs_sensitivity < worst <= setup.rkhs_sensitivity


def test_release_weights_noise_law() -> None:
    mech = GaussianProcessMechanism(1.0, 1e-5, 0.05, bandwidth=1.0)
    w = np.linspace(-1, 1, 50)
    rng = np.random.default_rng(7)
    noise = np.concatenate([mech.release_weights(w, rng=rng) - w for _ in range(200)])
    assert_three_arm(ks_three_arm(noise, lambda v, s: stats.norm.cdf(v / s), mech.sigma))


def test_rff_release_document_reproduces_the_table() -> None:
    frame = dataset1(500, 8)
    spec = make_spec(features="rff", rff_dim=50, privacy={"epsilon": 3.0})
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    assert "random Fourier" in pl.events[2].params["kernel"]
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0),
                   noise=NoiseGuard(pl, test_seed=9))
    doc = rel.documents["cate_function.json"]
    table = rel.tables["cate"]
    s = table[["x0", "x1"]].to_numpy()  # box [0, 1]: s(x) = x
    proj = s @ np.array(doc["omega"])
    zeta = np.hstack([np.cos(proj), np.sin(proj)]) / np.sqrt(doc["m"])
    assert np.allclose(zeta @ np.array(doc["weights"]), table["cate"])
    with pytest.raises(ValueError, match="function-mode"):
        make_spec(features="rff", mode="queries")


def _dense_reference_fit(z: np.ndarray, rho: np.ndarray, phi: np.ndarray, lam0: float,
                         c: float | None, grad_tol: float) -> np.ndarray:
    """The pre-streaming solver (all of Z in memory, Hessian rebuilt each iteration), verbatim."""
    from dpcausal.commands.cate.krr import huber_derivative

    n, p = z.shape

    def obj(w: np.ndarray) -> float:
        return float(rho @ huber_value(z @ w - phi, c)) / n + lam0 * float(w @ w)

    w = np.zeros(p)
    val = obj(w)
    for _ in range(100):
        r = z @ w - phi
        inside = np.ones(n, dtype=bool) if c is None else np.abs(r) <= c
        zs, ws = z[inside], rho[inside]
        lhs = (zs * ws[:, None]).T @ zs / n + lam0 * np.eye(p)
        rhs = zs.T @ (ws * phi[inside]) / n
        if c is not None and not inside.all():
            out = ~inside
            rhs -= c * z[out].T @ (rho[out] * np.sign(r[out])) / n
        step = np.linalg.solve(lhs, rhs) - w
        t = 1.0
        while True:
            cand = w + t * step
            cval = obj(cand)
            if cval <= val + 1e-12 * abs(val) or t < 1e-8:
                break
            t *= 0.5
        w, val = cand, cval
        grad = z.T @ (rho * huber_derivative(z @ w - phi, c)) / n + 2.0 * lam0 * w
        if np.linalg.norm(grad) <= grad_tol:
            return w
    raise AssertionError("reference did not converge")


@pytest.mark.parametrize("huber_c", [None, 1.5])
def test_streamed_fit_equals_the_in_memory_fit(huber_c: float | None) -> None:
    rng = np.random.default_rng(11)
    n = 1003
    feats = FourierFeatures.draw(3, 40, 0.5, seed=12)
    s = rng.uniform(size=(n, 3))
    rho, phi = rng.uniform(0.05, 0.9, n), 3.0 * rng.standard_cauchy(n)
    ref = _dense_reference_fit(feats.transform(s), rho, phi, 0.01, huber_c, 1e-11)
    for rows, cache_mb in ((97, 0.0), (97, 0.1), (5000, 0.0)):
        fit = fit_rff_streaming(feats, s, rho, phi, lam0=0.01, huber_c=huber_c, accuracy=FixedTol(1e-11),
                                rows=rows, cache_mb=cache_mb)
        assert np.allclose(fit.w, ref, rtol=0, atol=1e-9)
    assert np.allclose(feats.evaluate(s, ref), feats.transform(s) @ ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("huber_c", [None, 0.7])
def test_the_returned_weights_meet_the_tolerance_at_z_w_computed_from_scratch(
    huber_c: float | None,
) -> None:
    """The certificate ‖∇J(w)‖ ≤ tol (on which Δ's tol/λ0 term rests) holds for the returned w
    itself, with f = Zw recomputed here, not only at the solver's accumulated f."""
    from dpcausal.commands.cate.krr import huber_derivative

    rng = np.random.default_rng(21)
    n, lam0, tol = 800, 0.01, 1e-11
    feats, s = FourierFeatures.draw(2, 25, 0.4, seed=22), rng.uniform(size=(n, 2))
    z = feats.transform(s)
    rho, phi = rng.uniform(0.05, 0.9, n), 2.0 * rng.standard_cauchy(n)
    w = fit_rff_streaming(feats, s, rho, phi, lam0=lam0, huber_c=huber_c, accuracy=FixedTol(tol),
                          rows=111).w
    grad = z.T @ (rho * huber_derivative(z @ w - phi, huber_c)) / n + 2.0 * lam0 * w
    assert float(np.linalg.norm(grad)) <= tol


def test_streamed_release_equals_the_in_memory_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same data, same noise seed: the streamed pipeline releases what the in-memory one did."""
    frame = dataset1(700, 13)
    spec = make_spec(features="rff", rff_dim=30, privacy={"epsilon": 3.0})
    pl = plan(spec, len(frame), {}, rng=np.random.default_rng(0))
    monkeypatch.setattr(rff_feature_map, "BLOCK_BYTES", 8 * 60 * 41)  # 41-row blocks
    monkeypatch.setattr(cate_rff, "CACHE_MB", 0.0)
    rel = run(spec, frame, pl, {}, rng=np.random.default_rng(0),
                   noise=NoiseGuard(pl, test_seed=9))
    streamed = rel.tables["cate"]["cate"].to_numpy()
    # the in-memory path, step by step
    setup = build_setup(spec, len(frame))
    data = prepare(spec, setup, frame)
    noise = NoiseGuard(pl, test_seed=9)
    prop_l, out_l = nuisance_learners(spec, setup)
    prop = prop_l.fit(data.x1, data.a1, clip=setup.kappa, noise=noise)
    outm = out_l.fit(data.x1, data.a1, data.y1, noise=noise)
    rho, phi = pseudo_outcomes(setup.learner, data.a2, data.y2, prop.predict(data.x2),
                               outm.predict(data.x2, 0), outm.predict(data.x2, 1))
    feats = rff_features(spec, setup)
    w = _dense_reference_fit(feats.transform(setup.box.unit(data.x2)), rho, phi, setup.lam0,
                             setup.huber_c, setup.grad_tol)
    weights = noise.release_weights(function_mechanism(spec, setup), w)
    table = rel.tables["cate"]
    sq = setup.box.unit(table[["x0", "x1"]].to_numpy())
    assert np.allclose(streamed, feats.transform(sq) @ weights, rtol=0, atol=1e-9)


def test_kept_margins_and_worker_count_change_no_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: a pass reuses the margins Zv of the previous pass (same features, same product)
    and shares its blocks out to Z_THREADS workers; neither changes the solve beyond rounding,
    and reusing the margins changes nothing at all."""
    rng = np.random.default_rng(31)
    n = 2003
    feats = FourierFeatures.draw(3, 40, 0.5, seed=32)
    s = rng.uniform(size=(n, 3))
    rho, phi = rng.uniform(0.05, 0.9, n), 3.0 * rng.standard_cauchy(n)

    def fit() -> np.ndarray:
        return fit_rff_streaming(feats, s, rho, phi, lam0=0.01, huber_c=1.5,
                                 accuracy=FixedTol(1e-11), rows=97, cache_mb=0.1).w

    calls: list[bool] = []
    real = cate_rff.FeatureCache.margins_at

    def spy(self: cate_rff.FeatureCache, key: tuple[int, int], w: np.ndarray) -> np.ndarray | None:
        out = real(self, key, w)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(cate_rff.FeatureCache, "margins_at", spy)
    reused = fit()
    assert any(calls)  # some full steps reused the kept margins
    monkeypatch.setattr(cate_rff.FeatureCache, "margins_at", lambda self, key, w: None)
    assert np.array_equal(fit(), reused)
    monkeypatch.setattr(rff_pass, "Z_THREADS", 1)
    # one worker sums the float32 Gram blocks in another order: another point with ‖∇J‖ ≤ 1e-11
    assert np.allclose(fit(), reused, rtol=0, atol=1e-11 / (2 * 0.01))
