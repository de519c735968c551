"""The public accuracy certificate of :mod:`dpcausal.solvers.erm`'s solve, and its guaranteed
fallback: how far the returned θ can be from the exact minimiser, as a function of PUBLIC inputs
only, whatever the data and whichever way the solve ended.

G(θ) = Σ_i w_i ℓ(y_i v_iᵀθ) + (γ/2)‖θ‖² over n rows with ‖v_i‖ ≤ 1, y_i = ±1,
0 ≤ w_i ≤ W̃ = W(1 + 6u) (the computed weights: W bounds them in real arithmetic, the division and
shift of the weight add ≤ 6 roundings), ℓ the Huber hinge (|ℓ'| ≤ 1, ℓ'' ≤ 1/(2h)). G is
γ-strongly convex and L-smooth with L = γ + nW̃/(2h); its minimiser θ* has
(γ/2)‖θ*‖² ≤ G(θ*) ≤ G(0) = ℓ(0)Σw_i, so ‖θ*‖ ≤ ρ = √(2nW̃ℓ(0)/γ).

Two ways a solve may end, with one public bound D on ‖θ̃ − θ*‖ for both (:attr:`ERMAccuracy.
distance`), so a sensitivity that adds 2D holds for whatever the solver returns and no exit, no
message and no number depends on which way it ended:

1. **The certificate** (:meth:`ERMAccuracy.accepts`): ‖θ̃‖ ≤ T and the computed gradient
   ‖ĝ‖ ≤ τ (``stop_tol``). ĝ is summed in blocks of ≤ ``SUM_CHUNK`` rows added exactly rounded
   (:func:`dpcausal.solvers.erm_passes.gradient_pass`, :func:`exact_gradient`), so
   ‖ĝ − ∇G(θ̃)‖ ≤ ε_g (``grad_allowance``) whatever n and the partitioning, hence
   ‖θ̃ − θ*‖ ≤ (τ + ε_g)/γ. Both norms are taken as ‖s·x‖/s with public powers of two s
   (ĝ scales with W, θ̃ does not: :meth:`ERMAccuracy.accepts`), so no outcome scale makes their
   squares underflow (a false certificate) or overflow (no certificate).
2. **The guaranteed fallback** (:func:`guaranteed_descent`), run when the fast path has not
   certified: projected gradient descent θ ← P_ρ(θ − s·ĝ), s = 2/(L + γ), for a PUBLIC number N
   of steps (``fallback_steps``). With exact gradients each step contracts the distance to θ* by
   q = (L − γ)/(L + γ) (Nesterov, Lectures on Convex Optimization, 2nd ed., Thm 2.1.15, from the
   co-coercivity of Thm 2.1.12; the projection onto the ball that holds θ* does not increase the
   distance). With the computed gradient (error ≤ ε_g) and the rounding of the update and the
   projection (≤ r, ``update_allowance``) the distance obeys D_{k+1} ≤ q·D_k + s·ε_g + r, so
   D_N ≤ q^N·2ρ + (s·ε_g + r)/(1 − q) ≤ τ/γ + ε_g/γ + r(L + γ)/(2γ) for the N chosen.

So D = (τ + A)/γ with A = ε_g + r(L + γ)/2 (``allowance``), and τ ≥ 4ε_g (``stop_tol``: the
certificate can be met near θ* whatever the data). A public setting too extreme for float64 is
refused by the plan before any row is read (:meth:`ERMAccuracy.problem`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.numerics import (
    SAFETY,
    SUM_CHUNK,
    UNIT_ROUNDOFF,
    bound_scale_problem,
    descent_contraction_gap,
    descent_steps,
    exact_total,
    gamma,
    objective_scale,
    scaled_norm,
)
from dpcausal.solvers.backend import Backend, InMemory
from dpcausal.solvers.erm_passes import gradient_pass

FloatArray = npt.NDArray[np.float64]
MAX_RELATIVE_SLACK = 0.01
"""The plan refuses when τ + A would exceed this fraction of W (the sensitivity's 2W/γ)."""
def weight_bound_problem(weight_bound: float) -> str | None:
    """Why the weight bound W is beyond float64's reach for a solve with a guaranteed accuracy
    (below :data:`~dpcausal.numerics.MIN_SCALED_BOUND`, or not finite: above it the power of two
    of :attr:`ERMAccuracy.grad_scale` exists and a product that underflows errs by ≤ 2^−1075,
    < 1e-9 of ε_g ≥ γ_{SUM_CHUNK}·nW), or None. Public: W comes from the spec."""
    return bound_scale_problem(weight_bound, "the weight bound W")


def huber_at_zero(h: float) -> float:
    """ℓ(0) of the Huber hinge: 1 for h < 1, (1 + h)²/(4h) otherwise."""
    return 1.0 if h < 1.0 else (1.0 + h) ** 2 / (4.0 * h)


@dataclass(frozen=True)
class ERMAccuracy:
    """The public certificate and fallback of one weighted-ERM solve (see the module docstring).

    Parameters
    ----------
    n, d
        Rows (public) and the dimension of θ.
    weight_bound
        W ≥ every weight in real arithmetic (the computed weights may exceed it by 6u·W).
    gamma, h
        The ridge γ > 0 and the Huber half-width h > 0.
    tol
        The requested tolerance on ‖∇G‖; raised to 4ε_g when below (``stop_tol``).
    """

    n: int
    d: int
    weight_bound: float
    gamma: float
    h: float
    tol: float

    @property
    def weight_max(self) -> float:
        """W̃ = W(1 + 6u) ≥ every computed weight."""
        return self.weight_bound * (1.0 + 6.0 * UNIT_ROUNDOFF)

    @property
    def radius(self) -> float:
        """ρ = √(2nW̃ℓ(0)/γ) ≥ ‖θ*‖ (rounded up)."""
        return math.sqrt(2.0 * self.n * self.weight_max * huber_at_zero(self.h) / self.gamma) * (
            1.0 + 4.0 * UNIT_ROUNDOFF)

    @property
    def theta_bound(self) -> float:
        """T ≥ ‖θ̃‖ at every point whose gradient is computed: ρ + tol/γ + 1."""
        return self.radius + self.tol / self.gamma + 1.0

    @property
    def smoothness(self) -> float:
        """L = γ + nW̃/(2h) ≥ the largest eigenvalue of ∇²G."""
        return self.gamma + self.n * self.weight_max / (2.0 * self.h)

    @property
    def grad_allowance(self) -> float:
        """ε_g ≥ ‖ĝ − ∇G(θ)‖ for every ‖θ‖ ≤ T, ĝ summed by :func:`exact_gradient`.

        Per row: the margin y·vᵀθ errs by ≤ γ_d·T (‖v‖ ≤ 1), so ℓ' (1/(2h)-Lipschitz, and its
        clip, subtraction and division) by ≤ ε_ℓ = γ_d·T/(2h) + 4u; the coefficient w·y·ℓ' adds
        two products (≤ W̃(ε_ℓ + 3u)). The sum over n rows in blocks of ≤ ``SUM_CHUNK`` rows
        (one product each, in any order) added exactly rounded errs by
        ≤ γ_{SUM_CHUNK+2}·nW̃(1 + ε_ℓ + 3u); the ridge term γθ and the final addition by
        ≤ u(2γT + nW̃ + γT)."""
        u, t, wmax, n = UNIT_ROUNDOFF, self.theta_bound, self.weight_max, self.n
        eps_l = gamma(self.d) * t / (2.0 * self.h) + 4.0 * u
        rows = n * wmax * (eps_l + 3.0 * u)
        sums = gamma(SUM_CHUNK + 2) * n * wmax * (1.0 + eps_l + 3.0 * u)
        ridge = u * (3.0 * self.gamma * t + n * wmax)
        return SAFETY * (rows + sums + ridge)

    @property
    def stop_tol(self) -> float:
        """τ = max(requested tolerance, 4ε_g)."""
        return max(self.tol, 4.0 * self.grad_allowance)

    @property
    def step(self) -> float:
        """The fallback's step s ≤ 2/(L + γ) (rounded down)."""
        return 2.0 / (self.smoothness + self.gamma) * (1.0 - 4.0 * UNIT_ROUNDOFF)

    @property
    def contraction_gap(self) -> float:
        """1 − q ≤ 1 − √(1 − x), x = 2sγL/(γ + L), the fallback's contraction per step (computed
        as x/(1 + √(1 − x)), which keeps its accuracy when γ ≪ L, and rounded down)."""
        return descent_contraction_gap(self.step, self.gamma, self.smoothness)

    @property
    def update_allowance(self) -> float:
        """r ≥ the rounding of one fallback update θ − s·ĝ and its projection onto the ball ρ:
        ‖θ‖ ≤ ρ(1 + (d + 6)u), ‖s·ĝ‖ ≤ s(2Lρ + ε_g) ≤ 5ρ, each coordinate's product and
        difference ≤ 2u of ≤ 6ρ, the projection's norm and scaling ≤ (d + 6)u·ρ."""
        return SAFETY * (self.d + 20.0) * UNIT_ROUNDOFF * self.radius

    @property
    def allowance(self) -> float:
        """A = max(ε_g, γ·(s·ε_g + r)/(1 − q)): D = (τ + A)/γ bounds both ways a solve ends."""
        fallback = self.gamma * (self.step * self.grad_allowance + self.update_allowance) / (
            self.contraction_gap)
        return max(self.grad_allowance, fallback) * (1.0 + 1e-9)

    @property
    def distance(self) -> float:
        """D = (τ + A)/γ ≥ ‖θ̃ − θ*‖ for whatever :func:`dpcausal.solvers.erm.solve_erm`
        returns."""
        return (self.stop_tol + self.allowance) / self.gamma

    @property
    def fallback_steps(self) -> int:
        """N with q^N·2ρ ≤ τ/γ: the fallback's public number of gradient steps."""
        return descent_steps(2.0 * self.radius * self.gamma, self.stop_tol, self.contraction_gap)

    def problem(self) -> str | None:
        """Why float64 cannot give this solve a useful guarantee (checked by the plan, on public
        inputs only), or None."""
        scale = weight_bound_problem(self.weight_bound)
        if scale is not None:
            return scale
        try:
            slack = self.stop_tol + self.allowance
        except (ValueError, ZeroDivisionError):  # beyond the float64 rounding model
            slack = math.inf
        if not (slack <= MAX_RELATIVE_SLACK * self.weight_bound and self.contraction_gap > 0.0):
            return (f"{self.n} rows with d = {self.d} features are too many for a float64 solve "
                    f"with a guaranteed accuracy at γ = {self.gamma:g}: the rounding allowance "
                    "would exceed 1% of the sensitivity; use a larger γ or fewer rows")
        return None

    @property
    def grad_scale(self) -> float:
        """s = 2^−e, W̃ = m·2^e (:func:`~dpcausal.numerics.objective_scale`): the public power of
        two by which every gradient is scaled before its squares are summed (:meth:`grad_norm`)."""
        return objective_scale(self.weight_max)

    def grad_norm(self, grad: FloatArray) -> float:
        """‖ĝ‖ computed as ‖s·ĝ‖/s, s = :attr:`grad_scale` (:func:`~dpcausal.numerics.
        scaled_norm`): ``np.linalg.norm(ĝ)`` bit for bit wherever its squares stay in float64's
        normal range, and within the same rounding bound at any outcome scale."""
        return scaled_norm(grad, self.grad_scale)

    def accepts(self, theta: FloatArray, grad: FloatArray) -> bool:
        """The certificate at θ̃ given the computed gradient ĝ (norms inflated for their own
        rounding).

        Notes
        -----
        ĝ carries the weights' units (‖ĝ‖ ≤ nW̃ + γ‖θ̃‖ and τ ≥ 4ε_g ∝ W̃ when γ ∝ W̃, as owl's
        γ = λnW), θ̃ does not (‖θ*‖ ≤ ρ = √(2nW̃ℓ(0)/γ)). So ‖ĝ‖ is computed as ‖s·ĝ‖/s with
        s = :attr:`grad_scale` from the public W̃, ‖θ̃‖ as ‖s_T·θ̃‖/s_T with s_T = 2^−e from the
        public T = m·2^e. Multiplying by a power of two is exact, so wherever the unscaled squares
        neither overflow nor underflow each norm is the float ``np.linalg.norm`` gives (the same
        decision, bit for bit); ‖s·ĝ‖ ≲ n + s·γT with s·γT ≤ 1e12 (:meth:`problem` keeps
        12uγT ≤ ε_g ≤ W/100) and s·τ ≥ 4s·ε_g ≥ γ_{SUM_CHUNK}·n, so the scaled squares stay far
        inside float64's range at any W, and each norm's relative error stays ≤ (d + 2)u
        (d squares, d − 1 additions, the square root): half the inflation ``rel``. The
        certificate's bound ‖θ̃ − θ*‖ ≤ (τ + ε_g)/γ therefore holds as proved in the module
        docstring. Unscaled (before), a gradient ≲ 1e-154 underflowed towards 0 and was
        accepted far above τ: at W ≈ 5.6e-163 a point 0.14 from θ* (D = 2.5e-7), below W ≈ 5e-169
        θ̃ = 0 for every data set; a gradient ≳ 1.3e154 overflowed to ∞ and every iterate was
        refused (the fallback then ran all its steps: safe but slow). Nothing but the rounding of
        the norms depends on s and s_T, and they depend on public inputs only. The rounding model
        of ε_g still assumes the gradient's terms w·ℓ′·v are normal floats or negligible beside
        ε_g (W above ~1e-290)."""
        rel = 1.0 + 2.0 * (self.d + 2) * UNIT_ROUNDOFF
        return bool(scaled_norm(theta, objective_scale(self.theta_bound)) * rel <= self.theta_bound
                    and self.grad_norm(grad) * rel <= self.stop_tol)


def exact_gradient(backend: Backend, theta: FloatArray, acc: ERMAccuracy) -> FloatArray:
    """ĝ = ∇G(θ) summed per block of ``SUM_CHUNK`` rows, the blocks and the pieces added exactly
    rounded (what :attr:`ERMAccuracy.grad_allowance` bounds); one pass."""
    parts = backend.map_list(functools.partial(gradient_pass, theta=theta, h=acc.h))
    return np.asarray(exact_total(parts), dtype=np.float64) + acc.gamma * theta


def project(theta: FloatArray, radius: float) -> FloatArray:
    """P_ρ(θ): θ scaled onto the ball ‖θ‖ ≤ ρ when outside it (θ = 0 when not finite); ‖θ‖ is
    computed as ‖s·θ‖/s, s = 2^−e from ρ = m·2^e (exact scalings: the same float as
    ``np.linalg.norm`` wherever its squares neither overflow nor underflow)."""
    if not bool(np.all(np.isfinite(theta))):
        return np.zeros_like(theta)
    norm = scaled_norm(theta, objective_scale(radius))
    return theta * (radius / norm) if norm > radius else theta


def guaranteed_descent(backend: Backend, start: FloatArray, acc: ERMAccuracy) -> FloatArray:
    """The fallback: projected gradient descent from P_ρ(start) for ``acc.fallback_steps`` steps
    (fewer when a step's gradient meets the certificate, which bounds its distance just as well);
    the returned θ is within ``acc.distance`` of θ* by the contraction bound, with no check.

    On an engine each step is one pass; in memory a pass is a call over the prepared rows."""
    theta = project(np.asarray(start, dtype=np.float64), acc.radius)
    for _ in range(acc.fallback_steps):
        grad = exact_gradient(backend, theta, acc)
        if acc.accepts(theta, grad):
            return theta
        theta = project(theta - acc.step * grad, acc.radius)
    return theta


def in_memory(backend: Backend) -> bool:
    """Whether the backend is one piece, so its map_sum gradient is already the exact one."""
    return isinstance(backend, InMemory)
