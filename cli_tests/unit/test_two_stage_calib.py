"""Calibration of two-stage: golden numbers, exact sups, closed-form dominance, monotonicity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcausal.commands.two_stage import calibration
from dpcausal.commands.two_stage.calibration import (
    calibrate,
    chi_norm_quantile,
    enumerate_two_level,
    ipw_known_bounds,
    ipw_rct_bounds,
    noise_to_signal,
    uniform_bounds,
    universal_bounds,
)


def test_uniform_golden() -> None:
    b = uniform_bounds(1000)
    assert b.w1s == pytest.approx(2.0)
    assert b.w2aug == pytest.approx(2.0)
    assert b.w1_paper == pytest.approx(1.0)
    assert b.w2_paper == pytest.approx(math.sqrt(2.0))


def test_universal_golden() -> None:
    n = 1000
    b = universal_bounds(n)
    assert b.w1s == 2 * n
    assert b.w2aug == pytest.approx(math.sqrt(2) * n * math.sqrt(n + 1))
    assert b.w1_paper == 3 * n
    assert b.w2_paper == pytest.approx(math.sqrt(6) * (n + 1) ** 1.5)


def test_spec_worked_example_universal_paper() -> None:
    """Spec §3.4: n=1000, p=5, M_x=M_y=λ₁=1: universal (Cor 3.4) 1/β = 36000, γ = 310.30."""
    cal = calibrate(n=1000, dim=5, m_x=1, m_y=1, l1_radius=1, epsilon=1.0, delta=0.0, eps_split=0.5,
                    noise="gamma", bounds=universal_bounds(1000), mode="paper")
    assert cal.zeta == 6.0
    assert cal.lambda_h == 2.0
    assert cal.scale == pytest.approx(36000.0)
    assert cal.gamma_required == pytest.approx(310.30, abs=0.01)


def test_l_tilde_golden() -> None:
    assert chi_norm_quantile(5, 1e-5) == pytest.approx(6.57268, abs=1e-5)


def test_gaussian_safe_sigma_solves_e3() -> None:
    """(2σL̃Δ + Δ²)/(2σ²) = ε_b exactly at the safe σ."""
    cal = calibrate(n=500, dim=4, m_x=1, m_y=2, l1_radius=3, epsilon=0.7, delta=1e-6,
                    eps_split=0.4, noise="gaussian", bounds=uniform_bounds(500), mode="safe")
    d, s, lt = cal.shift_bound, cal.scale, cal.l_tilde
    assert (2 * s * lt * d + d * d) / (2 * s * s) == pytest.approx(0.4 * 0.7, rel=1e-12)
    paper = calibrate(n=500, dim=4, m_x=1, m_y=2, l1_radius=3, epsilon=0.7, delta=1e-6,
                      eps_split=0.4, noise="gaussian", bounds=uniform_bounds(500), mode="paper")
    assert paper.scale < cal.scale


@pytest.mark.parametrize("p", [0.5, 0.7, 0.3, 0.9, 0.05])
@pytest.mark.parametrize("n", [2, 3, 10, 101, 1000])
def test_ipw_rct_exact_vs_closed_forms(n: int, p: float) -> None:
    """Exact sups are below the spec's valid closed forms and match the W₁ˢ formula 2nρ/(n−1+ρ)."""
    b = ipw_rct_bounds(n, p)
    rho = max(p, 1 - p) / min(p, 1 - p)
    assert b.w1s <= 3 * rho - 1 + 1e-9
    closed_w2 = math.sqrt((rho - 1) ** 2 * rho**2 / n + 2 * rho**2) * math.sqrt(n + 1)
    assert b.w2aug <= max(closed_w2, 2.0 * rho) + 1e-9
    assert b.w1s == pytest.approx(2 * n * rho / (n - 1 + rho), rel=1e-12)


def test_ipw_rct_half_is_uniform() -> None:
    assert ipw_rct_bounds(200, 0.5).w2aug == pytest.approx(2.0)
    assert ipw_rct_bounds(200, 0.5).w1s == pytest.approx(2.0)


def test_ipw_known_bound_is_tight() -> None:
    for n in (5, 50, 400, 100_000):
        b = ipw_known_bounds(n, 1.3, 4.0)
        assert b.attained_w2aug is not None
        assert b.attained_w2aug <= b.w2aug <= b.attained_w2aug * (1 + 5.0 / n)
        rho = 4.0 / 1.3
        assert b.w1s == pytest.approx(2 * n * rho / (n - 1 + rho))


def test_enumeration_matches_brute_force() -> None:
    """O(n) enumeration == brute force over every arm configuration for tiny n."""
    import itertools

    for n in (2, 3, 4, 5):
        u_vals = (1.0, 2.5)
        best = {"w1s": 0.0, "w2aug": 0.0}
        for conf in itertools.product(u_vals, repeat=n + 1):
            u = np.array(conf[:n])
            up = np.array((*conf[: n - 1], conf[n]))
            w, wp = n * u / u.sum(), n * up / up.sum()
            dw = w[:-1] - wp[:-1]
            changed = int(np.sum(dw != 0))
            best["w1s"] = max(best["w1s"], np.abs(dw).sum() + w[-1] + wp[-1])
            best["w2aug"] = max(best["w2aug"], math.sqrt((dw**2).sum() + w[-1] ** 2 + wp[-1] ** 2)
                                * math.sqrt(changed + 2))
        e = enumerate_two_level(n, 2.5, 1.0)
        assert e["w1s"] == pytest.approx(best["w1s"], rel=1e-12)
        assert e["w2aug"] == pytest.approx(best["w2aug"], rel=1e-9)


def test_monotone_in_epsilon_and_n() -> None:
    def cal(eps: float, n: int):
        return calibrate(n=n, dim=11, m_x=1, m_y=10, l1_radius=5, epsilon=eps, delta=0.0,
                         eps_split=0.5, noise="gamma", bounds=ipw_rct_bounds(n, 0.3), mode="safe")

    assert 1 / cal(2.0, 400).scale > 1 / cal(1.0, 400).scale  # β rises with ε
    assert cal(2.0, 400).gamma_required < cal(1.0, 400).gamma_required
    assert cal(1.0, 4000).gamma_required < cal(1.0, 400).gamma_required
    assert noise_to_signal(cal(1.0, 4000), 4000) < noise_to_signal(cal(1.0, 400), 400)


def test_safe_vs_paper_uniform() -> None:
    """For w ≡ 1 safe doubles the noise scale and raises γ by √2 (W₁ˢ = 2 vs 1, W₂ = 2 vs √2).

    (safe ≥ paper is NOT a general law: the exact enumerated forms can be below the paper's.)
    """
    kw = dict(n=50, dim=3, m_x=1, m_y=1, l1_radius=1, epsilon=1.0, delta=0.0, eps_split=0.5,
              noise="gamma", bounds=uniform_bounds(50))
    s, p = calibrate(**kw, mode="safe"), calibrate(**kw, mode="paper")
    assert s.scale == pytest.approx(2 * p.scale)
    assert s.gamma_required == pytest.approx(math.sqrt(2) * p.gamma_required)


@pytest.mark.parametrize(("n", "u_hi", "u_lo"), [(2, 1.0, 1.0), (97, 3.2, 1.1), (1000, 9.0, 1.25)])
def test_the_enumeration_does_not_depend_on_its_block_size(
        monkeypatch: pytest.MonkeyPatch, n: int, u_hi: float, u_lo: float) -> None:
    """Blocks of k are a cache optimisation: one block, blocks of 7 and of 1 give the same maxima."""
    results = []
    for block in (n, 7, 1):
        monkeypatch.setattr(calibration, "ENUMERATION_BLOCK", block)
        calibration._enumerate_two_level.cache_clear()
        results.append(calibration.enumerate_two_level(n, u_hi, u_lo))
    calibration._enumerate_two_level.cache_clear()
    assert results[0] == results[1] == results[2]
