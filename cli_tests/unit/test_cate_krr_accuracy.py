"""The exact-kernel second stage's public accuracy (krr_accuracy.py): whichever way the solve ends
(Newton's certificate or the guaranteed fallback) the returned function is within the planned
distance of the exact minimiser, measured against a 40-digit reference; issue 13."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpcausal.commands.cate import krr
from dpcausal.commands.cate.krr_accuracy import KrrAccuracy, kernel_error
from dpcausal.mechanisms.gaussian_process import gaussian_kernel

mpmath.mp.dps = 40


def _mp_kernel(s: np.ndarray, h: float) -> mpmath.matrix:
    n = s.shape[0]
    k = mpmath.matrix(n, n)
    for i in range(n):
        for j in range(n):
            d2 = mpmath.fsum((mpmath.mpf(s[i, t]) - mpmath.mpf(s[j, t])) ** 2
                             for t in range(s.shape[1]))
            k[i, j] = mpmath.exp(-d2 / (2 * mpmath.mpf(h) ** 2))
    return k


def _reference(s: np.ndarray, rho: np.ndarray, phi: np.ndarray, h: float, lam0: float,
               c: float | None, guess: np.ndarray) -> tuple[mpmath.matrix, mpmath.matrix]:
    """(α*, K) in 40 digits: the active-set system at the sign pattern of ``guess``'s residuals,
    re-solved until the pattern is self-consistent (then it is the exact minimiser: KKT)."""
    n = s.shape[0]
    k = _mp_kernel(s, h)
    nl = n * mpmath.mpf(lam0)
    f = [mpmath.mpf(x) for x in gaussian_kernel(s, s, h) @ guess]
    for _ in range(50):
        r = [f[i] - mpmath.mpf(phi[i]) for i in range(n)]
        inside = [c is None or abs(r[i]) <= c for i in range(n)]
        alpha_out = {i: -mpmath.mpf(rho[i]) * c * mpmath.sign(r[i]) / nl
                     for i in range(n) if not inside[i]}
        a = mpmath.matrix(n, n)
        b = mpmath.matrix(n, 1)
        for i in range(n):
            a[i, i] = 1
            if i in alpha_out:
                b[i] = alpha_out[i]
                continue
            for j in range(n):
                a[i, j] += mpmath.mpf(rho[i]) * k[i, j] / nl
            b[i] = mpmath.mpf(rho[i]) * mpmath.mpf(phi[i]) / nl
        alpha = mpmath.lu_solve(a, b)
        f = [mpmath.fsum(k[i, j] * alpha[j] for j in range(n)) for i in range(n)]
        if all((c is None or abs(f[i] - mpmath.mpf(phi[i])) <= c) == inside[i]
               for i in range(n)):
            return alpha, k
    raise AssertionError("the reference active set did not settle")


def _rkhs_gap(alpha: np.ndarray, ref: mpmath.matrix, k: mpmath.matrix) -> float:
    d = [mpmath.mpf(alpha[i]) - ref[i] for i in range(len(alpha))]
    return float(mpmath.sqrt(mpmath.fsum(d[i] * k[i, j] * d[j]
                                         for i in range(len(d)) for j in range(len(d)))))


def _problem(seed: int, n: int, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.uniform(size=(n, 2))
    rho = rng.uniform(0.01, 0.9, n)
    phi = scale * (np.sin(4 * s[:, 0]) + rng.standard_cauchy(n))
    return s, rho, phi


@pytest.mark.parametrize(("squared", "lam0", "scale"),
                         [(False, 1e-2, 1.0), (False, 1e-3, 1e9), (True, 1e-2, 1e-6),
                          (True, 3e-3, 1e9)])
def test_both_ways_a_solve_ends_are_within_the_public_distance(
    monkeypatch: pytest.MonkeyPatch, squared: bool, lam0: float, scale: float
) -> None:
    """Newton's certified result and the fallback's (Newton forced to fail) are each within
    ``accuracy.target`` of the 40-digit minimiser in ℋ; the fallback ran the public steps."""
    n, h = 30, 0.4
    s, rho, phi = _problem(7, n, scale)
    c = None if squared else 0.5 * scale
    lw = (2.0 * float(np.max(rho * np.abs(phi))) if squared else 2.0 * c * 0.9)
    acc = KrrAccuracy(n, 2, h, lam0, lw, squared)
    assert acc.problem() is None
    newton = krr.fit_krr(s, rho, phi, bandwidth=h, lam0=lam0, huber_c=c, accuracy=acc)
    assert newton.iterations <= 100
    ref, k = _reference(s, rho, phi, h, lam0, c, newton.alpha)
    assert _rkhs_gap(newton.alpha, ref, k) <= acc.target
    monkeypatch.setattr(krr, "_newton", lambda *args: None)
    slow = krr.fit_krr(s, rho, phi, bandwidth=h, lam0=lam0, huber_c=c, accuracy=acc)
    assert 100 <= slow.iterations <= 100 + acc.steps
    assert _rkhs_gap(slow.alpha, ref, k) <= acc.target
    assert float(np.max(np.abs(slow.alpha))) <= acc.alpha_l1 / n  # the public box


def test_a_non_positive_definite_system_falls_back_instead_of_refusing(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the old code a Cholesky failure raised SolverError after the data was read."""
    from scipy import linalg

    n, h, lam0 = 25, 0.5, 1e-2
    s, rho, phi = _problem(3, n, 1.0)
    acc = KrrAccuracy(n, 2, h, lam0, 2.0 * 0.5 * 0.9, False)

    def fail(*args: object, **kwargs: object) -> None:
        raise linalg.LinAlgError("not positive definite")

    monkeypatch.setattr(linalg, "cho_factor", fail)
    fit = krr.fit_krr(s, rho, phi, bandwidth=h, lam0=lam0, huber_c=0.5, accuracy=acc)
    assert fit.iterations >= 100
    ref, k = _reference(s, rho, phi, h, lam0, 0.5, fit.alpha)
    assert _rkhs_gap(fit.alpha, ref, k) <= acc.target


def test_kernel_error_bounds_the_computed_gram() -> None:
    """e_K bounds |k̂0 − k0| on [0, 1]^q (40-digit reference, points at the box's corners too)."""
    rng = np.random.default_rng(1)
    for q, h in ((1, 0.05), (3, 1.2), (8, 2.0)):
        s = np.vstack([rng.uniform(size=(6, q)), np.zeros(q), np.ones(q)])
        got = gaussian_kernel(s, s, h)
        ref = _mp_kernel(s, h)
        worst = max(abs(mpmath.mpf(got[i, j]) - ref[i, j])
                    for i in range(len(s)) for j in range(len(s)))
        assert float(worst) <= kernel_error(q, h)


def test_the_constants_are_public_and_scale_free() -> None:
    """τ, the target and N depend on public inputs only; τ/L_w is the same at any outcome scale
    (so extreme ranges never change what is refused), and the plan-time refusal names the ridge."""
    a = KrrAccuracy(500, 3, 1.2, 1e-2, 1.0, False)
    b = KrrAccuracy(500, 3, 1.2, 1e-2, 1e9, False)
    assert math.isclose(a.tol * 1e9, b.tol, rel_tol=1e-12) and a.steps == b.steps
    assert a.stop_tol > 0 and a.target <= a.radius / a.n
    tiny = KrrAccuracy(80, 3, 1.2, 1e-6, 1.0, False).problem()
    assert tiny is not None and "cate.ridge" in tiny


@pytest.mark.parametrize("features", ["exact", "rff"])
def test_the_function_release_adds_the_query_rounding_of_the_exact_kernel(features: str) -> None:
    """The exact kernel releases fl(K̂_q α), within ε_f of ĝ(x_q) per point and outside ℋ: the
    release's sensitivity carries 2ε_f/√1e-10 on top of the formula's Δ (random features: no term,
    their noise is on the weights). Dropping the term fails this test."""
    from pathlib import Path

    import yaml

    from dpcausal.commands.cate.privacy import function_mechanism, noise_factor
    from dpcausal.commands.cate.setup import build_setup
    from dpcausal.commands.cate.spec import CateSpec

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "cate.yaml").read_text())
    doc["cate"].update(features=features, loss="squared")
    spec = CateSpec.model_validate(doc)
    setup = build_setup(spec, 4000)
    mech = function_mechanism(spec, setup)
    term = setup.query_rounding
    if features == "exact":
        assert setup.krr_accuracy is not None
        assert term == pytest.approx(2.0 * setup.krr_accuracy.f_error / math.sqrt(1e-10))
        assert term > 0.0
    else:
        assert term == 0.0
    assert mech.rkhs_sensitivity == pytest.approx(
        noise_factor(spec, setup) * setup.rkhs_sensitivity + term, rel=1e-12)
