"""Stage 2 of ``two-stage``: the objective-perturbed ITR regression over the ℓ₁ ball, solved exactly.

    θ = argmin_{‖θ‖₁ ≤ λ₁} (1/n)Σ_i w_i (t_i − x_iᵀθ)² + (γ/2)‖θ‖² + ⟨b, θ⟩/n,   t_i = 2 y_i ã_i

is the quadratic program min ½θᵀPθ + cᵀθ with P = (2/n)H + γI, c = −(2/n)g + b/n, where
H = Σ w_i x_i x_iᵀ and g = Σ w_i t_i x_i are the only data passes (O(n p²), streaming-friendly).

Exactness (spec P3). The privacy argument is for the *exact* minimiser θ*, and every released θ is
θ* of the QP with the float64 P, c and λ₁, rounded once to float64 (docs/proofs/two_stage.md §6):

1. a float64 search proposes an active set (support S and signs σ): the unconstrained solution if
   it lies in the ball, else an interior-point warm start (Clarabel via cvxpy) repaired against the
   KKT conditions of the set,

       P_SS θ_S + c_S + μσ = 0,   σᵀθ_S = λ₁,   θ_{Sᶜ} = 0;

2. that set's equality system is solved in exact rational arithmetic and the KKT conditions are
   checked exactly (``exact_qp.is_minimiser``): if they hold, this is θ*;
3. otherwise (a near-degenerate set the float search got wrong, or a repair that did not settle)
   θ* is computed exactly by Goldfarb & Idnani's dual active-set method, which terminates on every
   input (``exact_qp.dual_active_set``).

No step releases an iterate or a projection, and none refuses, so no output depends on the data
except through θ*.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcausal.commands.two_stage.exact_qp import (
    dual_active_set,
    is_minimiser,
    matrix,
    solve_candidate,
    vector,
)

FloatArray = npt.NDArray[np.float64]
KKT_TOL = 1e-9


@dataclass(frozen=True)
class Stage2Solution:
    """The exact minimiser (rounded to float64) and how it was found (never released)."""

    theta: FloatArray
    constraint_active: bool
    active_set_iterations: int
    exact_dual: bool = False
    """True when the float search's candidate was not θ* and the exact dual method computed it."""


def sufficient_stats(x: FloatArray, t: FloatArray, w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """H = Σ w_i x_i x_iᵀ and g = Σ w_i t_i x_i."""
    xw = x * w[:, None]
    return xw.T @ x, xw.T @ t


def qp_terms(h: FloatArray, g: FloatArray, n: int, gamma: float,
             b: FloatArray) -> tuple[FloatArray, FloatArray]:
    """P and c of ½θᵀPθ + cᵀθ."""
    p = (2.0 / n) * h + gamma * np.eye(len(g))
    c = -(2.0 / n) * g + b / n
    return 0.5 * (p + p.T), c


def _kkt_ok(p: FloatArray, c: FloatArray, theta: FloatArray, mu: float,
            support: npt.NDArray[np.bool_],
            l1: float) -> bool:
    scale = max(1.0, float(np.abs(c).max()), float(np.abs(p).max()) * l1)
    grad = p @ theta + c
    on = support
    if mu < -KKT_TOL * scale:
        return False
    if on.any() and np.any(np.sign(theta[on]) * np.sign(-grad[on]) < 0):
        return False
    if np.any(np.abs(grad[~on]) > mu + KKT_TOL * scale):
        return False
    # θ carries the rounding of the solve with right-hand side c: |δθ| ~ u‖c‖/λ_min(P), which at
    # extreme outcome scales (|c| ~ 1e9) is far above 1e-9·l1 (the old test then refused)
    theta_scale = max(1.0, l1, float(np.abs(c).max()) / float(np.linalg.eigvalsh(p)[0]))
    if abs(float(np.abs(theta).sum()) - l1) > KKT_TOL * theta_scale:
        return False
    return bool(np.all(np.abs(grad[on] + mu * np.sign(theta[on])) <= KKT_TOL * scale))


def project_l1_ball(v: FloatArray, radius: float) -> FloatArray:
    """Euclidean projection onto {‖θ‖₁ ≤ radius} (Duchi et al. 2008)."""
    if float(np.abs(v).sum()) <= radius:
        return v
    u = np.sort(np.abs(v))[::-1]
    css = np.cumsum(u)
    k = np.arange(1, len(u) + 1)
    rho = int(np.nonzero(u * k > css - radius)[0][-1])
    tau = (css[rho] - radius) / (rho + 1.0)
    return np.sign(v) * np.maximum(np.abs(v) - tau, 0.0)


def _pgd(p: FloatArray, c: FloatArray, l1: float, iters: int = 20000) -> FloatArray:
    """Accelerated projected gradient (a fallback warm start; the KKT polish makes it exact)."""
    step = 1.0 / float(np.linalg.eigvalsh(p)[-1])
    x = project_l1_ball(-c * step, l1)
    y, t = x.copy(), 1.0
    for _ in range(iters):
        nx = project_l1_ball(y - step * (p @ y + c), l1)
        nt = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        y = nx + ((t - 1.0) / nt) * (nx - x)
        if float(np.linalg.norm(nx - x)) <= 1e-14 * max(1.0, float(np.abs(nx).max())):
            return nx
        x, t = nx, nt
    return x


def _warm_start(p: FloatArray, c: FloatArray, l1: float) -> FloatArray:
    import warnings

    import cvxpy as cp  # lazy: keep dry runs and imports fast

    chol = np.linalg.cholesky(p)
    th = cp.Variable(len(c))
    prob = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(chol.T @ th) + c @ th),
                      [cp.norm1(th) <= l1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # accuracy is certified by the KKT polish, not by Clarabel
        with contextlib.suppress(cp.error.SolverError):
            prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12,
                       max_iter=500)
    if th.value is None or not np.all(np.isfinite(th.value)):
        return _pgd(p, c, l1)
    return np.asarray(th.value, dtype=np.float64)


def _candidate(p: FloatArray, c: FloatArray, l1: float) -> tuple[list[int] | None, int] | None:
    """A float64 guess of θ*'s active set: (None, 0) for the unconstrained solution, (signs, k)
    after k repair steps, or None when the repair does not settle."""
    theta_u = np.asarray(np.linalg.solve(p, -c), dtype=np.float64)
    if float(np.abs(theta_u).sum()) <= l1:
        return None, 0
    approx = _warm_start(p, c, l1)
    d = len(c)
    scale = max(1.0, float(np.abs(approx).max()))
    support = np.abs(approx) > 1e-7 * scale
    if not support.any():
        support[int(np.argmax(np.abs(c)))] = True
    signs = np.where(approx >= 0, 1.0, -1.0)
    signs[~support] = 0.0
    for it in range(1, 4 * d + 20):
        s = np.flatnonzero(support)
        k = len(s)
        kkt = np.zeros((k + 1, k + 1))
        kkt[:k, :k] = p[np.ix_(s, s)]
        kkt[:k, k] = signs[s]
        kkt[k, :k] = signs[s]
        rhs = np.concatenate([-c[s], [l1]])
        try:
            sol = np.linalg.solve(kkt, rhs)
        except np.linalg.LinAlgError:  # a singular (degenerate) active set
            return None
        theta = np.zeros(d)
        theta[s] = sol[:k]
        mu = float(sol[k])
        if _kkt_ok(p, c, theta, mu, support, l1):
            return [int(v) for v in signs], it
        # repair the active set: drop sign-inconsistent coordinates, else add the worst violator
        wrong = support & (np.sign(theta) != signs)
        if wrong.any():
            j = int(np.flatnonzero(wrong)[np.argmax(np.abs(theta[wrong]))])
            support[j] = False
            signs[j] = 0.0
            if not support.any():
                return None
            continue
        grad = p @ theta + c
        viol = np.where(~support, np.abs(grad) - mu, -np.inf)
        j = int(np.argmax(viol))
        if viol[j] <= 0:
            return None
        support[j] = True
        signs[j] = -np.sign(grad[j])
    return None


def solve_l1_ball_qp(p: FloatArray, c: FloatArray, l1: float) -> Stage2Solution:
    """θ* = argmin of ½θᵀPθ + cᵀθ over ‖θ‖₁ ≤ l1 (P positive definite), exactly for the float64
    P, c, l1, rounded once to float64. See the module docstring."""
    pf, cf, lf = matrix(p), vector(c), Fraction(float(l1))
    guess = _candidate(p, c, l1)
    theta = None
    if guess is not None:
        signs, iterations = guess
        theta = solve_candidate(pf, cf, lf, signs)
        if theta is not None and not is_minimiser(pf, cf, lf, theta):
            theta = None
    exact_dual = theta is None
    if theta is None:
        theta, iterations = dual_active_set(pf, cf, lf), 0
    norm = sum((abs(v) for v in theta), Fraction(0))
    return Stage2Solution(np.array([float(v) for v in theta]), norm == lf, iterations, exact_dual)


def stage2_objective(theta: FloatArray, p: FloatArray, c: FloatArray) -> float:
    """½θᵀPθ + cᵀθ (for tests)."""
    return float(0.5 * theta @ p @ theta + c @ theta)
