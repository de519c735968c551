"""Weight-stability sups and the objective-perturbation calibration of ``two-stage`` (DP-2ERM).

Everything here is a function of public inputs only (n, p, bounds, hyperparameters).

Notation (spec §2.7 and its amendments). Let record n be the replaced one (w → w′). Then

    W₁ˢ  = Σ_{i<n} |w_i − w′_i| + w_n + w′_n
    W₂aug = sqrt(Σ_{i<n} (w_i − w′_i)² + w_n² + w′_n²) · sqrt(#{i<n: w_i ≠ w′_i} + 2)

and the paper's (3.4) quantities, kept only for ``calibration: paper`` (reproduction):

    W₁ = ‖w − w′‖₁ + max_i min(w_i, w′_i)
    W₂ = sqrt(‖w − w′‖₂² + 2 max_i w_i w′_i) · sqrt(1 + ‖w − w′‖₀).

``safe`` calibration (ε-DP with Gamma noise; (ε, δ) with Gaussian noise):

    ζ = 2M_x(2M_y + M_∞λ₁),  λ_H = 2M_x²                    (Corollary 6.1 with M_∞ ≥ ‖x‖_∞; paper: M_x)
    Gamma:    1/β = ζ·W̄₁ˢ/ε_b
    Gaussian: σ = (ζ·W̄₁ˢ/(2ε_b))·(L̃ + sqrt(L̃² + 2ε_b)),  L̃ = sqrt((√p + sqrt(ln 1/δ))² + ln 1/δ)
    γ ≥ λ_H·W̄₂aug/(ε_H·n),   ε_b + ε_H = ε.

Why (interior of Θ; the boundary is handled by the constrained argument of Thm 3.1 / Lemma 5.4):
b_D(θ) = −[Σ_i w_i∇ℓ(θ; d_i) + nγθ] and pdf_D(θ) = ν(b_D(θ))·|det J_D(θ)|. The triangle inequality
gives ‖b_D(θ) − b_D′(θ)‖ ≤ ζ·W₁ˢ (the replaced record's two gradients each contribute), so the noise
term's log-ratio is ≤ β·ζ·W₁ˢ ≤ ε_b (Gamma), or ≤ (2σL̃Δ + Δ²)/(2σ²) ≤ ε_b off an event of
probability ≤ δ (Gaussian, Laurent–Massart χ² tail). Lemma 5.1 in the augmented (n+1)-record form
bounds the Jacobian term by λ_H·W₂aug/(nγ) ≤ ε_H.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

Calibration = Literal["safe", "paper"]


@dataclass(frozen=True)
class StabilityBounds:
    """Public sups of the weight-stability quantities over all neighbouring datasets of size n.

    ``w1s`` and ``w2aug`` are used by ``safe``; ``w1_paper`` and ``w2_paper`` by ``paper``.
    ``attained_w2aug`` is a value actually reached by a neighbouring pair (a lower bound on the
    sup, reported to show the bound's tightness) when ``w2aug`` is an upper bound, not the exact sup.
    """

    w1s: float
    w2aug: float
    w1_paper: float
    w2_paper: float
    source: str
    attained_w2aug: float | None = None
    specific_safe: bool = True
    """Whether a ``safe``-mode field (W₁ˢ or W₂aug) is strictly below the universal cap, i.e. the
    method-specific bound is actually in use (set by ``_cap``)."""
    specific_paper: bool = True
    """The same for the ``paper``-mode fields."""

    def method_specific(self, mode: str) -> bool:
        """Whether the bound used by ``mode`` relies on the method (else only the universal caps,
        valid for ANY weights in nΔⁿ, are used: stage-1 accuracy is then irrelevant)."""
        return self.specific_safe if mode == "safe" else self.specific_paper

    def to_dict(self) -> dict[str, Any]:
        """The receipt's record of the bounds."""
        out: dict[str, Any] = {"W1s": self.w1s, "W2aug": self.w2aug, "W1_paper": self.w1_paper,
                               "W2_paper": self.w2_paper, "source": self.source}
        if self.attained_w2aug is not None:
            out["W2aug_attained"] = self.attained_w2aug
        return out


def universal_bounds(n: int) -> StabilityBounds:
    """Caps valid for ANY weights in nΔⁿ (spec §2.7 E1, amendments; Cor 3.4 for paper mode).

    Both vectors are nonnegative with sum n, so Σ_{i<n}|Δw_i| + w_n + w′_n ≤ Σ_i (w_i + w′_i) = 2n,
    and Σ_{i<n}Δw_i² + w_n² + w′_n² ≤ ‖w‖² + ‖w′‖² ≤ 2n², while the count is ≤ n + 1.
    """
    return StabilityBounds(
        w1s=2.0 * n,
        w2aug=math.sqrt(2.0) * n * math.sqrt(n + 1.0),
        w1_paper=3.0 * n,
        w2_paper=math.sqrt(6.0) * (n + 1.0) ** 1.5,
        source="universal (any weights in nΔⁿ)",
        specific_safe=False,
        specific_paper=False,
    )


def _cap(b: StabilityBounds, n: int) -> StabilityBounds:
    """Take the minimum with the universal caps (both are valid bounds)."""
    u = universal_bounds(n)
    return StabilityBounds(min(b.w1s, u.w1s), min(b.w2aug, u.w2aug), min(b.w1_paper, u.w1_paper),
                           min(b.w2_paper, u.w2_paper), b.source, b.attained_w2aug,
                           specific_safe=b.w1s < u.w1s or b.w2aug < u.w2aug,
                           specific_paper=b.w1_paper < u.w1_paper or b.w2_paper < u.w2_paper)


EXP_MAX = 700.0
"""Exponents above this overflow float64 in exp/expm1 (limit ≈ 709.78); the bounds that would need
them exceed the universal caps by far (e^700·n ≫ 2n), so the caps are returned instead."""


def _capped_universal(n: int, source: str) -> StabilityBounds:
    """The universal caps, labelled as the cap of a method bound too large to evaluate."""
    u = universal_bounds(n)
    return StabilityBounds(u.w1s, u.w2aug, u.w1_paper, u.w2_paper,
                           f"{source}: exceeds the universal caps (universal used)",
                           specific_safe=False, specific_paper=False)


def enumerate_two_level(n: int, u_hi: float, u_lo: float) -> dict[str, float]:
    """Exact sups for weights w_i = n·u_i/Σ_j u_j with every u_i ∈ {u_lo, u_hi}.

    O(n) enumeration over k = the number of OTHER records at u_hi (the rest at u_lo) and over the
    replaced record's old and new values (u_n, u′_n) ∈ {u_lo, u_hi}². Every neighbouring pair of a
    two-level weight map is one of these configurations (weights are exchangeable), so the maxima
    are the exact sups. Returns ``w1s``, ``w2aug``, ``w1_paper``, ``w2_paper``.

    A function of public numbers only, computed once per process and arguments (a run asks for
    it in its plan, its stage-1 weights and its stage-2 noise; at 10⁶ rows each costs ~0.4 CPU-s).
    """
    if n < 2:
        raise ValueError("n must be >= 2")
    return dict(_enumerate_two_level(n, u_hi, u_lo))


FloatArray = npt.NDArray[np.float64]

ENUMERATION_BLOCK = 1 << 15
"""Values of k per block of :func:`_enumerate_two_level`: its ~30 temporaries stay in the cache
instead of being allocated at n floats each (the maxima, and so the bounds, are the same)."""


@functools.lru_cache(maxsize=8)
def _enumerate_two_level(n: int, u_hi: float, u_lo: float) -> dict[str, float]:
    """:func:`enumerate_two_level` (its callers get a copy of this cached dict)."""
    best = {"w1s": 0.0, "w2aug": 0.0, "w1_paper": 0.0, "w2_paper": 0.0}
    for start in range(0, n, ENUMERATION_BLOCK):
        k = np.arange(start, min(start + ENUMERATION_BLOCK, n), dtype=np.float64)
        for key, value in _two_level_block(n, u_hi, u_lo, k).items():
            best[key] = max(best[key], value)
    return best


def _two_level_block(n: int, u_hi: float, u_lo: float, k: FloatArray) -> dict[str, float]:
    """The four maxima over the configurations with k OTHER records at u_hi (k a block of 0..n−1)."""
    m = (n - 1) - k
    t = k * u_hi + m * u_lo
    q = k * u_hi**2 + m * u_lo**2
    best = {"w1s": 0.0, "w2aug": 0.0, "w1_paper": 0.0, "w2_paper": 0.0}
    for un in (u_lo, u_hi):
        for up in (u_lo, u_hi):
            s, sp = t + un, t + up
            changed = un != up
            d = n * (1.0 / s - 1.0 / sp) if changed else np.zeros_like(t)
            wn, wp = n * un / s, n * up / sp
            sum_abs = np.abs(d) * t
            sum_sq = d**2 * q
            count = (n - 1) if changed else 0
            w1s = sum_abs + wn + wp
            w2aug = np.sqrt(sum_sq + wn**2 + wp**2) * math.sqrt(count + 2)
            # paper's (3.4): max over ALL records of min(w, w') and of w·w'
            hi_min = np.where(k > 0, np.minimum(n * u_hi / s, n * u_hi / sp), 0.0)
            lo_min = np.where(m > 0, np.minimum(n * u_lo / s, n * u_lo / sp), 0.0)
            max_min = np.maximum(np.maximum(hi_min, lo_min), np.minimum(wn, wp))
            hi_prod = np.where(k > 0, n**2 * u_hi**2 / (s * sp), 0.0)
            lo_prod = np.where(m > 0, n**2 * u_lo**2 / (s * sp), 0.0)
            max_prod = np.maximum(np.maximum(hi_prod, lo_prod), wn * wp)
            l1 = sum_abs + np.abs(wn - wp)
            l2sq = sum_sq + (wn - wp) ** 2
            l0 = count + (1 if changed else 0)
            w1p = l1 + max_min
            w2p = np.sqrt(l2sq + 2.0 * max_prod) * math.sqrt(1 + l0)
            for key, arr in (("w1s", w1s), ("w2aug", w2aug), ("w1_paper", w1p),
                             ("w2_paper", w2p)):
                best[key] = max(best[key], float(np.max(arr)))
    return best


def uniform_bounds(n: int) -> StabilityBounds:
    """w ≡ 1: W₁ˢ = 2, W₂aug = 2 (paper: W₁ = 1, W₂ = √2, Cor 3.3)."""
    e = enumerate_two_level(n, 1.0, 1.0)
    return _cap(StabilityBounds(e["w1s"], e["w2aug"], e["w1_paper"], e["w2_paper"],
                                "exact (data-independent weights)"), n)


def ipw_rct_bounds(n: int, p_treated: float) -> StabilityBounds:
    """IPW with a public design probability: u_i = 1/p_{a_i} takes two values; exact enumeration."""
    u1, u0 = 1.0 / p_treated, 1.0 / (1.0 - p_treated)
    e = enumerate_two_level(n, max(u0, u1), min(u0, u1))
    return _cap(StabilityBounds(e["w1s"], e["w2aug"], e["w1_paper"], e["w2_paper"],
                                "exact O(n) enumeration (ipw-rct)"), n)


def ipw_known_bounds(n: int, u_lo: float, u_hi: float) -> StabilityBounds:
    """IPW with a public logistic model: every u_i = 1 + exp(∓score) lies in [u_lo, u_hi].

    W₁ˢ (exact): with T = Σ_{i<n} u_i and u_n ≤ u′_n, W₁ˢ = n·T(1/S − 1/S′) + n·u_n/S + n·u′_n/S′
    = 2n·u′_n/(T + u′_n), so sup W₁ˢ = 2n·u_hi/((n−1)·u_lo + u_hi), attained at extreme values.

    W₂aug (rigorous upper bound, within O(ρ/n) of the attained value): with Q = Σ_{i<n} u_i²
    ≤ u_hi·T, T ≥ T₀ = (n−1)·u_lo and a count ≤ n + 1,
    W₂aug² ≤ (n+1)·n²·[(u_hi−u_lo)²·u_hi·T₀/(T₀+u_lo)⁴ + 2·u_hi²/(T₀+u_hi)²]
    (each term is decreasing in T on T ≥ u_lo/3 and monotone in u_n, u′_n).
    The paper-mode quantities use the two-level enumeration at the extremes.
    """
    if n < 2:
        raise ValueError("n must be >= 2")
    e = enumerate_two_level(n, u_hi, u_lo)
    w1s = 2.0 * n * u_hi / ((n - 1) * u_lo + u_hi)
    t0 = (n - 1) * u_lo
    cross = (u_hi - u_lo) ** 2 * u_hi * t0 / (t0 + u_lo) ** 4
    own = 2.0 * u_hi**2 / (t0 + u_hi) ** 2
    w2aug = n * math.sqrt(cross + own) * math.sqrt(n + 1.0)
    # the sup over continuous u includes u_n → u′_n = u_hi with u_n ≠ u′_n (count n+1)
    attained = max(e["w2aug"], n * math.sqrt(own) * math.sqrt(n + 1.0))
    return _cap(StabilityBounds(max(w1s, e["w1s"]), max(w2aug, attained), e["w1_paper"],
                                e["w2_paper"], "exact W1s; rigorous W2aug bound (ipw-known)",
                                attained_w2aug=attained), n)


def ipw_logit_bounds(n: int, *, m_w: float, radius: float, ridge: float,
                     lambda_slack: float) -> StabilityBounds:
    """Proven sups for IPW from the ridge logistic fit (4.10) in the ℓ₂ ball (docs/proofs §5).

    λ̂ minimises the ρ-strongly convex (ρ = λ_IPW) mean logistic loss over ‖λ‖ ≤ R; one replaced
    record moves its gradient by ≤ 2M_w/n, so ‖Δλ̂‖ ≤ 2M_w/(nλ_IPW) (+ the solver slack). Each
    log u_i = log(1 + exp(−ã_i⟨x_i, λ⟩)) is M_w-Lipschitz in λ, so |Δ log u_i| ≤ δ_u := M_w‖Δλ̂‖
    for i < n, and the normaliser moves by ≤ δ_u + log(1 + (ρ_u − 1)/n), ρ_u = e^{M_w R}. Hence
    |Δ log w_i| ≤ d := 2δ_u + log1p((ρ_u − 1)/n) for every unchanged record, giving
    W₁ˢ ≤ n(e^d − 1) + 2b and W₂aug ≤ sqrt((e^d − 1)²·b·n + 2b²)·√(n+1),
    b = n·u_hi/((n−1)u_lo + u_hi) the largest possible weight. The paper-mode fields carry the
    same values (the paper's (4.12′) is false and is never used).
    """
    if n < 2:
        raise ValueError("n must be >= 2")
    if m_w * radius > EXP_MAX:
        return _capped_universal(n, "proven ratio bound (ipw-logit)")
    u_lo, u_hi = 1.0 + math.exp(-m_w * radius), 1.0 + math.exp(m_w * radius)
    rho_u = u_hi / u_lo
    d_lambda = 2.0 * m_w / (n * ridge) + lambda_slack
    d = 2.0 * m_w * d_lambda + math.log1p((rho_u - 1.0) / n)
    if not d <= EXP_MAX:  # e^d − 1 > e^700: far above the caps (and expm1 would overflow)
        return _capped_universal(n, "proven ratio bound (ipw-logit)")
    b = n * u_hi / ((n - 1) * u_lo + u_hi)
    em = math.expm1(d)
    w1s = n * em + 2.0 * b
    w2aug = math.sqrt(em * em * b * n + 2.0 * b * b) * math.sqrt(n + 1.0)
    return _cap(StabilityBounds(w1s, w2aug, w1s, w2aug, "proven ratio bound (ipw-logit)"), n)


def ebw_bounds(n: int, *, m_g: float, kappa: float, radius: float, ridge: float,
               lambda_slack: float) -> StabilityBounds:
    """Proven sups for entropy balancing with sample arm totals (docs/proofs §5c).

    Rows b_i = clip₁((n/n_a)·(κ/M_g)·g(x_i)) move by ≤ β_b = M_g/(κn) when an arm count changes
    (the unit-norm clip makes this hold for every n_a); the target (sḡ, sḡ) by ≤ 2√2κ/n; the
    softmax means by ≤ β_b + 4e^{2R}/n + (e^{2Rβ_b} − 1). The dual is λ_EBW-strongly convex on the
    ball, so ‖Δλ̂‖ ≤ G/λ_EBW (+ slack), every logit of an unchanged record moves by
    δ_z ≤ ‖Δλ̂‖ + Rβ_b, and log w_i by ≤ d = 2δ_z + log1p((e^{2R} − 1)/n). Then as for ipw-logit:
    W₁ˢ ≤ n(e^d − 1) + 2b, W₂aug ≤ sqrt((e^d − 1)²·b·n + 2b²)·√(n+1), b = n e^{2R}/(n − 1 + e^{2R}).
    """
    if n < 2:
        raise ValueError("n must be >= 2")
    beta_b = m_g / (kappa * n)
    if 2.0 * radius > EXP_MAX or 2.0 * radius * beta_b > EXP_MAX:
        return _capped_universal(n, "proven ratio bound (ebw, sample totals)")
    rho = math.exp(2.0 * radius)
    grad_shift = (beta_b + 4.0 * rho / n + math.expm1(2.0 * radius * beta_b)
                  + 2.0 * math.sqrt(2.0) * kappa / n)
    d_lambda = grad_shift / ridge + lambda_slack
    delta_z = d_lambda + radius * beta_b
    d = 2.0 * delta_z + math.log1p((rho - 1.0) / n)
    if not d <= EXP_MAX:  # e^d − 1 > e^700: far above the caps (and expm1 would overflow)
        return _capped_universal(n, "proven ratio bound (ebw, sample totals)")
    b = n * rho / (n - 1 + rho)
    em = math.expm1(d)
    w1s = n * em + 2.0 * b
    w2aug = math.sqrt(em * em * b * n + 2.0 * b * b) * math.sqrt(n + 1.0)
    return _cap(StabilityBounds(w1s, w2aug, w1s, w2aug, "proven ratio bound (ebw, sample totals)"),
                n)


def chi_norm_quantile(dim: int, delta: float) -> float:
    """L̃ with P(‖N(0, I_dim)‖ > L̃) ≤ δ (Laurent & Massart 2000, t = ln 1/δ)."""
    t = math.log(1.0 / delta)
    return math.sqrt((math.sqrt(dim) + math.sqrt(t)) ** 2 + t)


@dataclass(frozen=True)
class Calibrated:
    """The noise and ridge of one run (all public).

    ``shift_bound`` is Δ = ζ·W̄₁ (the ℓ₂ bound on the shift of the gradient map b_D(θ));
    ``noise_epsilon`` = ε_b; ``scale`` is 1/β (Gamma) or σ (Gaussian).
    """

    zeta: float
    lambda_h: float
    shift_bound: float
    noise_epsilon: float
    hessian_epsilon: float
    scale: float
    gamma_required: float
    l_tilde: float | None
    expected_noise_norm: float


def calibrate(*, n: int, dim: int, m_x: float, m_y: float, l1_radius: float, epsilon: float,
              delta: float, eps_split: float, noise: Literal["gamma", "gaussian"],
              bounds: StabilityBounds, mode: Calibration, m_inf: float | None = None) -> Calibrated:
    """β or σ and γ_required from public inputs (module docstring).

    ``m_inf`` ≥ ‖x‖_∞ for every feature row (default ``m_x``): ``safe`` uses
    ζ = 2M_x(2M_y + M_∞λ₁), since |xᵀθ| ≤ ‖x‖_∞‖θ‖₁ ≤ M_∞λ₁ on the ℓ₁ ball (for the feature map,
    M_∞ = (1 − 8u)/√d ≪ M_x = 1: every coordinate of a unit row is at most that); ``paper`` keeps
    the paper's ζ = 2M_x²λ₁ + 4M_xM_y.
    """
    inf_bound = m_x if m_inf is None or mode != "safe" else min(m_inf, m_x)
    zeta = 2.0 * m_x * (inf_bound * l1_radius + 2.0 * m_y)
    lambda_h = 2.0 * m_x**2
    eps_b = eps_split * epsilon
    eps_h = epsilon - eps_b
    w1 = bounds.w1s if mode == "safe" else bounds.w1_paper
    w2 = bounds.w2aug if mode == "safe" else bounds.w2_paper
    shift = zeta * w1
    gamma_req = lambda_h * w2 / (eps_h * n)
    l_tilde = None
    if noise == "gamma":
        scale = shift / eps_b
        expected = dim * scale
    else:
        l_tilde = chi_norm_quantile(dim, delta)
        if mode == "safe":
            scale = shift / (2.0 * eps_b) * (l_tilde + math.sqrt(l_tilde**2 + 2.0 * eps_b))
        else:  # (3.9) verbatim with ε → 2ε_b
            scale = shift / (2.0 * eps_b) * (l_tilde + math.sqrt(l_tilde**2 + 2.0 * eps_b / (3 * n)))
        expected = scale * math.sqrt(dim)
    return Calibrated(zeta, lambda_h, shift, eps_b, eps_h, scale, gamma_req, l_tilde, expected)


def noise_to_signal(cal: Calibrated, n: int) -> float:
    """ρ_ns = E‖b‖/(n·ζ): expected noise norm over the largest possible data-gradient norm (§6.3)."""
    return cal.expected_noise_norm / (n * cal.zeta)
