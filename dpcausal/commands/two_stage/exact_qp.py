"""Exact rational arithmetic for two-stage's stage-2 QP: min ½θᵀPθ + cᵀθ over ‖θ‖₁ ≤ λ₁.

The privacy theorem (docs/proofs/two_stage.md §3) is about the exact minimiser θ* of the QP. The
float64 solver (``solver.py``) finds a candidate; this module decides *exactly* whether it is θ*,
and otherwise computes θ* exactly. Every float64 number is a rational (Fraction(x) is exact), so the
QP with the float64 P, c and λ₁ has an exact rational minimiser, and:

* ``is_minimiser`` checks the KKT conditions of a rational point exactly (they are necessary and
  sufficient: P ≻ 0 makes the problem strictly convex);
* ``solve_candidate`` solves the equality system of an active set (support S, signs σ) exactly;
* ``dual_active_set`` is Goldfarb & Idnani's dual active-set method (Math. Programming 27 (1983)
  1–33) in exact arithmetic, with the ℓ₁ ball written as the 2^p half-spaces σᵀθ ≤ λ₁ (the most
  violated one is σ = sign θ, so they are never listed). It terminates after finitely many steps
  on every input (GI §3: each full step strictly increases the objective at a new active set, and
  at most q partial steps separate two full steps), and returns θ* exactly.

Linear systems are solved fraction-free (Bareiss elimination on integer rows), so no step rounds.
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Vector = list[Fraction]
Matrix = list[list[Fraction]]


def vector(a: FloatArray) -> Vector:
    """The exact rational value of every float64 in a vector."""
    return [Fraction(float(v)) for v in np.asarray(a, dtype=np.float64)]


def matrix(a: FloatArray) -> Matrix:
    """The exact rational value of every float64 in a matrix."""
    return [vector(row) for row in np.asarray(a, dtype=np.float64)]


def _integer_row(row: list[Fraction]) -> list[int]:
    scale = lcm(*(v.denominator for v in row))
    return [int(v * scale) for v in row]


def _bareiss(m: list[list[int]], n: int) -> tuple[list[list[int]], int]:
    """Fraction-free elimination of the integer rows ``m`` = [a | b₁ … b_K] (a n × n, nonsingular):
    returns integer numerators num_k and a denominator det with a·(num_k/det) = b_k exactly."""
    width = len(m[0])
    prev = 1
    for k in range(n):
        if m[k][k] == 0:
            piv = next((i for i in range(k + 1, n) if m[i][k] != 0), None)
            if piv is None:
                raise ZeroDivisionError("singular system")
            m[k], m[piv] = m[piv], m[k]
        mkk = m[k][k]
        for i in range(k + 1, n):
            mik, ri, rk = m[i][k], m[i], m[k]
            for j in range(k + 1, width):
                ri[j] = (ri[j] * mkk - mik * rk[j]) // prev
            ri[k] = 0
        prev = mkk
    det = m[n - 1][n - 1]
    nums: list[list[int]] = []
    for col in range(n, width):
        num = [0] * n  # det·x, integers by Cramer's rule
        for i in range(n - 1, -1, -1):
            s = m[i][col] * det - sum(m[i][j] * num[j] for j in range(i + 1, n))
            num[i] = s // m[i][i]
        nums.append(num)
    return nums, det


def solve(a: Matrix, b: list[Vector]) -> list[Vector]:
    """Exact solutions x_k of a·x_k = b_k for a nonsingular rational a (Bareiss elimination).

    Each augmented row is scaled to integers (row scaling keeps the solutions), eliminated
    fraction-free with row pivoting, then back-substituted; every division is exact.
    """
    n = len(a)
    rows = [_integer_row(list(a[i]) + [rhs[i] for rhs in b]) for i in range(n)]
    nums, det = _bareiss(rows, n)
    return [[Fraction(v, det) for v in num] for num in nums]


def _matvec(a: Matrix, x: Vector) -> Vector:
    return [sum((aij * xj for aij, xj in zip(row, x, strict=True)), Fraction(0)) for row in a]


def is_minimiser(p: Matrix, c: Vector, l1: Fraction, theta: Vector) -> bool:
    """Exact KKT test of argmin ½θᵀPθ + cᵀθ over ‖θ‖₁ ≤ l1 (P ≻ 0): with g = Pθ + c, either
    ‖θ‖₁ < l1 and g = 0, or ‖θ‖₁ = l1 and some μ ≥ 0 has g_j = −μ·sign θ_j on the support and
    |g_j| ≤ μ off it."""
    norm = sum((abs(v) for v in theta), Fraction(0))
    if norm > l1:
        return False
    g = [gj + cj for gj, cj in zip(_matvec(p, theta), c, strict=True)]
    if norm < l1:
        return all(v == 0 for v in g)
    support = [j for j, v in enumerate(theta) if v != 0]
    mu = -g[support[0]] * (1 if theta[support[0]] > 0 else -1)
    if mu < 0:
        return False
    for j, v in enumerate(theta):
        if v != 0 and g[j] != -mu * (1 if v > 0 else -1):
            return False
        if v == 0 and abs(g[j]) > mu:
            return False
    return True


def solve_candidate(p: Matrix, c: Vector, l1: Fraction,
                    signs: list[int] | None) -> Vector | None:
    """The exact solution of an active set's equality system, or None if it is singular.

    ``signs`` None: the unconstrained θ = −P⁻¹c. Otherwise signs[j] ∈ {−1, 0, 1} (0 = off the
    support S): P_SS θ_S + c_S + μσ_S = 0, σᵀθ_S = l1, θ_{Sᶜ} = 0.
    """
    d = len(c)
    if signs is None:
        return solve(p, [[-v for v in c]])[0]
    s = [j for j in range(d) if signs[j] != 0]
    kkt = [[p[i][j] for j in s] + [Fraction(signs[i])] for i in s]
    kkt.append([Fraction(signs[j]) for j in s] + [Fraction(0)])
    rhs = [-c[i] for i in s] + [l1]
    try:
        sol = solve(kkt, [rhs])[0]
    except ZeroDivisionError:
        return None
    theta = [Fraction(0)] * d
    for pos, j in enumerate(s):
        theta[j] = sol[pos]
    return theta


def dual_active_set(p: Matrix, c: Vector, l1: Fraction) -> Vector:
    """θ* exactly, by Goldfarb & Idnani's dual method on the constraints λ₁ − σᵀθ ≥ 0.

    Notes
    -----
    Constraint normals n_σ = −σ. State: an active list A of sign vectors (linearly independent),
    multipliers u ≥ 0 and θ. From θ = −P⁻¹c (A = ∅), while ‖θ‖₁ > λ₁ add σ⁺ = sign θ (the most
    violated constraint): with N the active normals, r = (NᵀP⁻¹N)⁻¹NᵀP⁻¹n⁺ and
    z = P⁻¹(n⁺ − Nr), step t = min(t₁, t₂) with t₁ = min_{r_j > 0} u_j/r_j (drop that
    constraint: a partial step) and t₂ = (σ⁺ᵀθ − λ₁)/(zᵀn⁺) (make σ⁺ active: a full step). Exact
    arithmetic makes every test (z = 0, r_j > 0, t₂ ≤ t₁, ‖θ‖₁ > λ₁) exact, so GI's
    finite-termination theorem applies verbatim. The feasible set is never empty (0 is in it), so
    the method's infeasible exit (z = 0 and no r_j > 0) cannot occur.

    Each step solves the integer system [[P_int, D·N], [Nᵀ, 0]]·[z; r] = [D·n⁺; 0] (P = P_int/D)
    fraction-free, so no step rounds.
    """
    d = len(c)
    scale = lcm(*(v.denominator for row in p for v in row))
    p_int = [[int(v * scale) for v in row] for row in p]
    theta = solve(p, [[-v for v in c]])[0]
    active: list[list[int]] = []
    u: list[Fraction] = []
    while True:
        if sum((abs(v) for v in theta), Fraction(0)) <= l1:
            return theta
        sigma = [1 if v >= 0 else -1 for v in theta]
        n_plus = [-s for s in sigma]
        u_plus = [*u, Fraction(0)]
        while True:
            q = len(active)
            rows = [p_int[i] + [-scale * a[i] for a in active] + [scale * n_plus[i]]
                    for i in range(d)]
            rows += [[-v for v in a] + [0] * (q + 1) for a in active]
            (sol,), den = _bareiss(rows, d + q)
            zi = sol[:d]
            zs = Fraction(1, den)
            r = [Fraction(v, den) for v in sol[d:]]
            drop, t1 = -1, None  # partial step: the first multiplier to reach 0
            for k, rk in enumerate(r):
                if rk > 0 and (t1 is None or u_plus[k] / rk < t1):
                    drop, t1 = k, u_plus[k] / rk
            if not any(zi):
                if t1 is None:
                    raise ArithmeticError("infeasible ℓ₁-ball QP (impossible: 0 is feasible)")
                u_plus = [ui - t1 * rk for ui, rk in zip(u_plus, r, strict=False)] + [u_plus[-1] + t1]
                del active[drop], u_plus[drop]
                continue
            excess = sum((s * v for s, v in zip(sigma, theta, strict=True)), Fraction(0)) - l1
            t2 = excess / (zs * sum(z * n for z, n in zip(zi, n_plus, strict=True)))
            full = t1 is None or t2 <= t1
            t: Fraction = t2 if t1 is None or t2 <= t1 else t1
            step = t * zs
            theta = [ti + step * z for ti, z in zip(theta, zi, strict=True)]
            u_plus = [ui - t * rk for ui, rk in zip(u_plus, r, strict=False)] + [u_plus[-1] + t]
            if full:  # σ⁺ joins the active set
                active.append(sigma)
                u = u_plus
                break
            del active[drop], u_plus[drop]  # partial step
