"""Public bounds on the floating-point error of the nuisance learners' solves.

A solver tolerance below the rounding error of the quantity it tests makes the test a coin flip
that depends on the data: an absolute 1e-10 on a ridge gradient refused 10 % of random data sets at
an outcome range of 1e8, and a neighbour could flip a release into a refusal (issue #13). So every
tolerance and every solver slack here is a function of PUBLIC inputs only (row count m, dimension
p, feature radius R, outcome bounds, penalty λ), derived from a rounding model:

* IEEE float64, round to nearest, u = 2⁻⁵³; the standard model fl(a ∘ b) = (a ∘ b)(1 + δ),
  |δ| ≤ u (a fused multiply-add only removes roundings); γ_k = ku/(1 − ku).
* A sum of k products, in ANY order or summation tree (BLAS blocking, numpy's pairwise sums),
  errs by ≤ γ_k·Σ|terms| (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §3.1
  and Lemma 3.4). So the learners never let a sum run over more than ``SUM_CHUNK`` rows: the
  rows are summed in blocks (one BLAS call each) and the blocks' partial sums — and an engine's
  per-batch totals — are added exactly rounded (``math.fsum``, :func:`exact_total`). Every
  learner sum then errs by ≤ γ_k·Σ|terms| with k = ``SUM_TERMS`` whatever m and the partitioning;
  a bound with k = m would grow like m²u relative to the sensitivity (5 % at m = 5·10⁶).
* Cholesky (LAPACK potrf/potrs) of a p × p SPD matrix A completes when 20p^{3/2}κ₂(A)u < 1 and
  solves (A + ΔA)x̂ = b with ‖ΔA‖₂ ≤ pγ_{3p+1}‖A‖₂/(1 − pγ_{p+1}) (Higham Thm 10.4, 10.7, and
  ‖|R̂ᵀ||R̂|‖₂ ≤ p‖R̂‖₂²); ×4 covers the constants of blocked variants.

With them the ridge needs no check at all — its error is bounded a priori (:func:`ridge_error`)
and folded into the sensitivity — and the logistic Newton stops at a tolerance ≥ 4× its public
rounding allowance, with a fallback whose number of steps is bounded a priori
(:func:`damped_newton`), so neither refuses on a data-dependent predicate after the rows are
read. A public setting too extreme for float64 (a penalty λ far below R²·u·m) is refused by the
plan, before any row is read (:func:`ridge_problem`, :meth:`LogisticAccuracy.problem`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.numerics import (
    SAFETY,
    SUM_CHUNK,
    SUM_TERMS,
    UNIT_ROUNDOFF,
    block_total,
    exact_total,
    gamma,
)

__all__ = ["SAFETY", "SUM_CHUNK", "SUM_TERMS", "UNIT_ROUNDOFF", "block_total", "exact_total",
           "gamma"]

FloatArray = npt.NDArray[np.float64]
MAX_GUARANTEED_STEPS = 100_000
"""The most damped Newton steps the logistic fallback may need; beyond it the plan refuses λ."""
_OMEGA_QUARTER = 0.25 - math.log(1.25)
"""ω(1/4) = 1/4 − ln(5/4): the least decrease of a damped Newton step while the decrement ≥ 1/4."""


def effective_half_range(lo: float, hi: float) -> float:
    """A public bound on |fl(clip(y, lo, hi) − c)| with c = fl(lo + hi)/2: the centred outcome as
    computed, which may exceed h = (hi − lo)/2 by the rounding of c (at an offset of 10⁹ and a
    range of 10⁻⁶ that is not negligible)."""
    h = 0.5 * (hi - lo)
    return h * (1.0 + 4.0 * UNIT_ROUNDOFF) + 2.0 * UNIT_ROUNDOFF * max(abs(lo), abs(hi))


def _ridge_perturbation(p: int, radius: float, lam: float) -> float:
    """e ≥ ‖Ĥ + ΔC − H‖₂: the sums Σx̃x̃ᵀ (γ_k·Σ‖x̃‖² ≤ γ_k·mR², k = SUM_TERMS), the division by m
    and the addition of λI (u each), and the Cholesky backward error ΔC."""
    e_h = gamma(SUM_TERMS + 3) * (radius * radius + lam)
    norm_h = radius * radius + lam + e_h
    e_c = p * gamma(3 * p + 1) * norm_h / (1.0 - p * gamma(p + 1))
    return SAFETY * (e_h + e_c)


def ridge_problem(p: int, radius: float, lam: float) -> str | None:
    """Why a float64 Cholesky ridge solve with a guaranteed accuracy is impossible at these
    public settings (λ too small for m, p, R), or None. Checked by the plan, never on data."""
    if _ridge_ok(p, radius, lam):
        return None
    need = lam
    while not _ridge_ok(p, radius, need):
        need *= 2.0
    return (f"the ridge penalty {lam:g} is below the float64 accuracy of a solve with {p} "
            f"features and covariates of norm up to {radius:.3g} (λ ≥ {need:.2g} is needed)")


def _ridge_ok(p: int, radius: float, lam: float) -> bool:
    e = _ridge_perturbation(p, radius, lam)
    return e <= 0.5 * lam and cholesky_completes(p, radius * radius + lam + e, lam - e)


def cholesky_completes(p: int, norm_bound: float, min_eigenvalue: float) -> bool:
    """Whether LAPACK's Cholesky provably completes on every p × p symmetric matrix with
    ‖A‖₂ ≤ ``norm_bound`` and λ_min(A) ≥ ``min_eigenvalue`` (Higham Thm 10.7:
    20p^{3/2}κ₂(A)u < 1; half of it is required). A public check, made before the data is read,
    so that a factorisation never fails — an exit — on the data."""
    if min_eigenvalue <= 0.0:
        return False
    return 20.0 * p**1.5 * (norm_bound / min_eigenvalue) * UNIT_ROUNDOFF <= 0.5


def ridge_error(p: int, radius: float, half_range: float, lam: float) -> float:
    """E ≥ ‖θ̂ − θ*‖₂ for the computed Cholesky solution θ̂ of one arm's ridge.

    Notes
    -----
    θ* = H⁻¹b minimises (1/m)Σ_{arm} ½(θᵀx̃_i − r_i)² + (λ/2)‖θ‖² over the rows as computed
    (‖x̃_i‖ ≤ R, |r_i| ≤ h: use :func:`effective_half_range`), so ‖θ*‖ ≤ h/√λ. The computed θ̂
    solves (H + E_H)θ̂ = b + Δb exactly, with ‖E_H‖ ≤ e (:func:`_ridge_perturbation`) and
    ‖Δb‖ ≤ γ_{k+2}·hR (the sum Σr_i x̃_i over m rows, k = SUM_TERMS, then /m). Then
    H(θ̂ − θ*) = Δb − E_Hθ̂ and H ⪰ λI give ‖θ̂ − θ*‖ ≤ (‖Δb‖ + e‖θ̂‖)/λ
    ≤ (‖Δb‖ + e(h/√λ + ‖θ̂ − θ*‖))/λ, i.e. E = (‖Δb‖ + e·h/√λ)/(λ − e), for e < λ
    (:func:`ridge_problem` requires e ≤ λ/2). A function of public inputs (not of m): no check on
    the data is needed, and none is made.
    """
    e = _ridge_perturbation(p, radius, lam)
    db = SAFETY * gamma(SUM_TERMS + 2) * half_range * radius
    return (db + e * half_range / math.sqrt(lam)) / (lam - e)


def solve_spd(hess: FloatArray, rhs: FloatArray) -> FloatArray:
    """The Cholesky solution of hess·θ = rhs (the algorithm :func:`ridge_error` bounds).

    Raises
    ------
    RuntimeError
        If the factorisation breaks down, which :func:`ridge_problem` excludes a priori (an
        internal error, never a refusal on the data).
    """
    from scipy import linalg  # lazy: planning never solves

    try:
        factor = linalg.cho_factor(hess, lower=True, check_finite=True)
        return np.asarray(linalg.cho_solve(factor, rhs, check_finite=True), dtype=np.float64)
    except (linalg.LinAlgError, ValueError) as exc:
        raise RuntimeError("a ridge system excluded by the public accuracy check is not "
                           "positive definite; report this as a bug") from exc


@dataclass(frozen=True)
class LogisticAccuracy:
    """The public certificate of an ℓ2-logistic solve F(θ) = (1/m)Σℓ(θᵀx̃_i; A_i) + (λ/2)‖θ‖².

    Parameters
    ----------
    m, p
        Rows and features (intercept included).
    radius
        R ≥ ‖x̃_i‖ for every mapped row.
    lam
        λ > 0.
    tol
        The requested stopping tolerance on ‖∇F‖; raised to 4× the rounding allowance if below.

    Notes
    -----
    Certificate: θ̃ is accepted when ‖θ̃‖ ≤ T = √(2 ln 2/λ) + tol/λ + 1 and the computed gradient has
    ‖ĝ‖ ≤ τ (``stop_tol``). At such a point ‖ĝ − ∇F(θ̃)‖ ≤ ε_g (``grad_allowance``: the per-row
    σ(x̃ᵀθ̃) errs by ≤ ¼γ_p R T + 4u, the sum over m rows by γ_k·R with k = SUM_TERMS (the sums
    must be taken by :func:`block_total` / :func:`exact_total`), the ridge term by u·λT), so
    ‖θ̃ − θ*‖ ≤ (τ + ε_g)/λ = ``distance`` — the slack a sensitivity adds twice. T is consistent:
    F(θ*) ≤ F(0) = ln 2 gives ‖θ*‖ ≤ √(2 ln 2/λ), and with 5ε_g ≤ λ (:meth:`problem`) the
    distance is ≤ tol/λ + 1, so the minimiser's neighbourhood the certificate needs lies in the ball.
    Termination: F is self-concordant with constant M = R/√λ (|F‴[v,v,v]| ≤ R‖v‖F″[v,v] and
    ‖v‖ ≤ F″[v,v]^{1/2}/√λ), so Nesterov's damped Newton from θ = 0 takes at most
    ``max_steps`` = ⌈(R²/4λ)·ln 2/ω(1/4)⌉ + 10 steps to reach a Newton decrement of 1e-19 (at most
    that many with decrement ≥ 1/4, each decreasing (M²/4)F by ≥ ω(1/4); then quadratic
    convergence), far inside the certificate (Nesterov, Lectures on Convex Optimization, §5.1).
    """

    m: int
    p: int
    radius: float
    lam: float
    tol: float

    @property
    def theta_bound(self) -> float:
        """T ≥ ‖θ̃‖ at an accepted point: ‖θ*‖ + (requested tolerance)/λ + 1."""
        return math.sqrt(2.0 * math.log(2.0) / self.lam) + self.tol / self.lam + 1.0

    @property
    def grad_allowance(self) -> float:
        """ε_g ≥ ‖ĝ − ∇F(θ̃)‖ for every θ̃ with ‖θ̃‖ ≤ T (any summation order)."""
        u, r, t = UNIT_ROUNDOFF, self.radius, self.theta_bound
        sigma = 0.25 * gamma(self.p) * r * t + 4.0 * u
        per = r * sigma + gamma(SUM_TERMS + 4) * r * (1.0 + sigma) + 3.0 * u * (r + self.lam * t)
        return SAFETY * per

    @property
    def stop_tol(self) -> float:
        """τ = max(requested tolerance, 4ε_g): the stopping test can be met whatever the data."""
        return max(self.tol, 4.0 * self.grad_allowance)

    @property
    def distance(self) -> float:
        """(τ + ε_g)/λ ≥ ‖θ̃ − θ*‖ at an accepted point."""
        return (self.stop_tol + self.grad_allowance) / self.lam

    @property
    def decrement_scale(self) -> float:
        """M/2 for the self-concordance constant M = R/√λ of F: the damped Newton step is
        θ − H⁻¹g/(1 + (M/2)‖g‖_{H⁻¹})."""
        return self.radius / (2.0 * math.sqrt(self.lam))

    @property
    def max_steps(self) -> int:
        """The damped Newton fallback's public step budget."""
        return math.ceil(self.radius**2 / (4.0 * self.lam) * math.log(2.0) / _OMEGA_QUARTER) + 10

    def problem(self) -> str | None:
        """Why a guaranteed solve is impossible at these public settings, or None (plan time)."""
        if 5.0 * self.grad_allowance > self.lam or self.max_steps > MAX_GUARANTEED_STEPS:
            need = self.radius**2 * math.log(2.0) / (4.0 * _OMEGA_QUARTER * MAX_GUARANTEED_STEPS)
            return (f"the logistic penalty {self.lam:g} is too small for a solve that is "
                    f"guaranteed to finish with {self.p} features (λ ≥ {need:.2g} is needed)")
        return None

    def accepts(self, theta: FloatArray, grad: FloatArray) -> bool:
        """The certificate at θ̃ given the computed gradient ĝ (norms inflated for their own
        rounding)."""
        rel = 1.0 + 2.0 * (self.p + 2) * UNIT_ROUNDOFF
        return bool(float(np.linalg.norm(theta)) <= self.theta_bound / rel
                    and float(np.linalg.norm(grad)) * rel <= self.stop_tol)


GradHessSums = Callable[[FloatArray], tuple[FloatArray, FloatArray]]
"""θ ↦ (Σ(σ(θᵀx̃_i) − A_i)x̃_i, Σσ′x̃_ix̃_iᵀ) over the m rows (in memory or an engine's passes)."""


def damped_newton(grad_hess: GradHessSums, acc: LogisticAccuracy) -> FloatArray:
    """Nesterov's damped Newton from θ = 0, θ ← θ − H⁻¹g/(1 + λ_N), λ_N = (R/2√λ)‖g‖_{H⁻¹}, until
    the certificate accepts (at most ``acc.max_steps`` steps: see :class:`LogisticAccuracy`).

    The fallback of the logistic learners when their faster Armijo Newton has not certified
    within its iteration cap: a bound known before the data is read replaces the data-dependent
    refusal.

    Raises
    ------
    RuntimeError
        If the certificate is not met within the public budget, which the analysis excludes (an
        internal error, never a refusal on the data).
    """
    theta = np.zeros(acc.p)
    eye = np.eye(acc.p)
    scale = acc.decrement_scale
    for _ in range(acc.max_steps + 1):
        g_sum, h_sum = grad_hess(theta)
        grad = g_sum / acc.m + acc.lam * theta
        if acc.accepts(theta, grad):
            return theta
        step = solve_spd(h_sum / acc.m + acc.lam * eye, grad)
        decrement = scale * math.sqrt(max(float(grad @ step), 0.0))
        theta = theta - step / (1.0 + decrement)
    raise RuntimeError("the guaranteed logistic solve did not certify within its public step "
                       "budget; report this as a bug")
