"""Weighted margin-loss ERM with the ½‖θ‖² regulariser, solved to a stated gradient tolerance —
one solver for every backend.

The objective, in sum form (same argmin as the paper's (1/n)Σ + (γ/n)R form),

    G(θ) = Σ_i w_i ℓ(y_i v_iᵀθ) + (γ/2)‖θ‖²,

is γ-strongly convex when every w_i ≥ 0 and ℓ is convex. Whatever the solve returns is within a
PUBLIC distance D of the exact minimiser (:class:`dpcausal.solvers.erm_accuracy.ERMAccuracy`,
whose docstring proves it), so a sensitivity derived for the exact minimiser holds for the
returned point after adding 2D, and no refusal, exit or message depends on the data.

Every data pass is one ``backend.map_sum`` (or ``map_list``) of per-piece statistics
(:mod:`dpcausal.solvers.erm_passes`), each one sweep over the rows in cache-sized blocks that
computes all of the pass's statistics while a block is in cache: in memory the backend is the
prepared table as one piece (:class:`dpcausal.solvers.backend.InMemory`), on an engine the
batches or partitions of the table. So each objective has one solver and one certificate
whatever the backend:

* Newton's method (:func:`newton`) takes the Newton direction from the gradient and the Hessian
  Σ_quad w v vᵀ/(2h) at θ (margins computed from scratch) and the step length from an exact line
  search over passes (:func:`dpcausal.solvers.erm_line.line_search`): φ'(t) of
  φ(t) = G(θ − t·step) is increasing and piecewise linear, so it is bracketed, never interpolated,
  to the rounding level of φ'. After a full step (and from a nonzero start) the next full step is
  tried first alone (its gradient and Hessian, φ'(1) = −∇G(θ − step)·step); a full step costs one
  pass, a damped one two to five.
* For n ≥ ``WARM_START_MIN_ROWS`` Newton starts from the minimiser on a fixed 1-in-k subsample of
  the rows (every k-th global row, weights scaled by n/m; the subsample is solved in memory by this
  same fast path, from the minimiser on a 1-in-k' subsample of it). Should Newton not certify:
  Newton from θ = 0, then L-BFGS-B from θ = 0 (one value pass per evaluation) followed by the
  same Newton polish (:func:`fast_path`).
* Should none of them certify, the guaranteed fallback (projected gradient descent for a public
  number of steps, :func:`dpcausal.solvers.erm_accuracy.guaranteed_descent`) runs from there:
  its distance bound holds by proof, not by a check, so nothing is refused.

The certificate (:meth:`~dpcausal.solvers.erm_accuracy.ERMAccuracy.accepts`) is the test
‖ĝ‖ ≤ τ, τ ≥ 4× the public rounding allowance ε_g, on a gradient computed from scratch over every
row at exactly the returned θ, summed in blocks of ≤ ``SUM_CHUNK`` rows added exactly rounded
(in memory the gradient pass at θ, or a line or full-step pass whose candidate is θ — a sweep's
gradient obeys the same rounding bound whatever else the sweep computes, the module docstring of
:mod:`~dpcausal.solvers.erm_passes`; on an engine one more pass adding the pieces exactly,
:func:`certify`), so the returned θ is within (τ + ε_g)/γ of the
exact minimiser. The line search, the fallbacks and the start only shape the path. The number of
passes depends on the data and is never published.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpcausal.solvers.backend import Backend, InMemory
from dpcausal.solvers.erm_accuracy import (
    ERMAccuracy,
    exact_gradient,
    guaranteed_descent,
    in_memory,
)
from dpcausal.solvers.erm_line import line_search
from dpcausal.solvers.erm_passes import Part, grad_hess, huber_dloss, stride_rows

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class HuberHinge:
    """Huber-smoothed hinge (Chapelle 2007): convex, C¹, |ℓ'| ≤ 1, ℓ'' ≤ 1/(2h).

    ℓ(z) = 0 for z > 1+h; (1+h−z)²/(4h) for |1−z| ≤ h; 1−z for z < 1−h.
    """

    h: float = 0.5

    def __post_init__(self) -> None:
        if not (np.isfinite(self.h) and self.h > 0):
            raise ValueError(f"huber h must be > 0, got {self.h!r}")

    def value(self, z: FloatArray) -> FloatArray:
        """ℓ(z)."""
        h = self.h
        return np.where(z > 1 + h, 0.0, np.where(z < 1 - h, 1 - z, (1 + h - z) ** 2 / (4 * h)))

    def derivative(self, z: FloatArray) -> FloatArray:
        """ℓ'(z)."""
        h = self.h
        return np.where(z > 1 + h, 0.0, np.where(z < 1 - h, -1.0, -(1 + h - z) / (2 * h)))

    def curvature(self, z: FloatArray) -> FloatArray:
        """ℓ''(z) (a.e.)."""
        return np.where(np.abs(1 - z) <= self.h, 1 / (2 * self.h), 0.0)


@dataclass(frozen=True)
class ERMSolution:
    """The minimiser and how close to exact it is (public facts about the solver only)."""

    theta: FloatArray
    grad_norm: float
    """‖∇G(θ)‖ as computed when the certificate accepted θ; NaN after the fallback."""
    iterations: int
    certified: bool = True
    """Whether the certificate accepted θ (else the guaranteed fallback ran); never published."""


def objective(theta: FloatArray, v: FloatArray, y: FloatArray, w: FloatArray, gamma: float,
              loss: HuberHinge) -> tuple[float, FloatArray]:
    """G(θ) and ∇G(θ)."""
    z = y * (v @ theta)
    val = float(w @ loss.value(z)) + 0.5 * gamma * float(theta @ theta)
    grad = v.T @ (w * loss.derivative(z) * y) + gamma * theta
    return val, grad


def gradient(theta: FloatArray, v: FloatArray, y: FloatArray, w: FloatArray, gamma: float,
             loss: HuberHinge) -> FloatArray:
    """∇G(θ) alone (cheaper than :func:`objective`)."""
    return v.T @ (w * loss.derivative(y * (v @ theta)) * y) + gamma * theta


def value_grad(part: Part, start: int, *, theta: FloatArray, h: float
               ) -> tuple[float, FloatArray]:
    """Σ_batch w ℓ(y vᵀθ) and Σ_batch w ℓ'(y vᵀθ) y v (the L-BFGS-B fallback's pass)."""
    v, y, w = part
    z = y * (v @ theta)
    value = float(w @ HuberHinge(h).value(z))
    return value, v.T @ (w * huber_dloss(z, h) * y)


WARM_START_MIN_ROWS = 100_000
"""From this many rows on, Newton starts from the solution on a fixed 1-in-k subsample (was
400,000 before the nested start made it cheap; owl's 10⁶ × 21 design cut to n rows, in-process
CPU-s from θ = 0 → warm: 100,000 rows 0.165 → 0.088, 200,000 0.29 → 0.06, 300,000 0.48 → 0.13)."""
WARM_START_ROWS = 50_000
WARM_START_NESTED_ROWS = 5_000
"""The subsample's own solve starts from the solution on every k'-th of its rows, this many,
when the subsample has ≥ ``NESTED_FACTOR`` times as many (measured on owl's 10⁶ × 21: the
warm start's CPU halved, 0.08 → 0.04 s, and the full-data passes stayed 4)."""
NESTED_FACTOR = 8


def _subsample(backend: Backend, acc: ERMAccuracy, rows: int) -> tuple[InMemory, ERMAccuracy]:
    """Every k-th global row, k = n // rows, in memory, with the weights × n/m (and the
    certificate of that problem)."""
    n = backend.n_rows
    parts = backend.map_list(functools.partial(stride_rows, k=n // rows))
    vs = np.concatenate([p[0] for p in parts])
    ys = np.concatenate([p[1] for p in parts])
    ws = np.concatenate([p[2] for p in parts])
    scale = n / ys.size
    sub = ERMAccuracy(ys.size, acc.d, acc.weight_bound * scale, acc.gamma, acc.h,
                      acc.tol * scale)
    return InMemory((vs, ys, ws * scale), ys.size), sub


def _certified_from(backend: InMemory, acc: ERMAccuracy, start: FloatArray) -> FloatArray:
    """The fast path's minimiser from ``start`` if the certificate accepts it, else θ = 0."""
    theta, grad, _ = fast_path(backend, acc, start, max_newton=100)
    return theta if acc.accepts(theta, grad) else np.zeros(acc.d)


def warm_start(backend: Backend, acc: ERMAccuracy) -> FloatArray:
    """The start for large n: the minimiser on every k-th global row (weights × n/m), solved in
    memory by the fast path, itself started from the minimiser on every k'-th of those rows
    (``WARM_START_NESTED_ROWS``); θ = 0 for n < ``WARM_START_MIN_ROWS`` or when that solve does
    not certify. Only the path of the solve depends on it (the returned θ is certified on all
    rows, or comes from the guaranteed fallback); the subsamples are fixed strides of the global
    row index (no randomness, nothing data-dependent)."""
    if backend.n_rows < WARM_START_MIN_ROWS:
        return np.zeros(acc.d)
    sub_backend, sub = _subsample(backend, acc, WARM_START_ROWS)
    start = np.zeros(acc.d)
    if sub_backend.n_rows >= NESTED_FACTOR * WARM_START_NESTED_ROWS:
        start = _certified_from(*_subsample(sub_backend, sub, WARM_START_NESTED_ROWS), start)
    return _certified_from(sub_backend, sub, start)


def newton(backend: Backend, theta: FloatArray, acc: ERMAccuracy, *, max_newton: int
           ) -> tuple[FloatArray, FloatArray, int]:
    """Newton with the exact line search from ``theta``; (θ, ∇G(θ) as computed, iterations).

    Stops when the certificate accepts the computed gradient (in memory it is the certificate's
    own blocked sum; on an engine :func:`certify` recomputes it exactly rounded), at the
    iteration cap, or when no step makes progress. One pass per iteration when the full step is
    taken (its gradient and Hessian come with the line pass, computed in the same sweep over the
    rows), two when a later line pass's candidate is accepted, one more when another point is;
    in memory and on an engine alike."""
    d, gamma, h = acc.d, acc.gamma, acc.h
    g_data, h_data = backend.map_sum(functools.partial(grad_hess, theta=theta, h=h))
    full = bool(np.any(theta != 0.0))  # a start near θ*: try the full step alone first
    for it in range(max_newton + 1):
        grad = g_data + gamma * theta
        gnorm = acc.grad_norm(grad)
        if acc.accepts(theta, grad) or it == max_newton or not np.isfinite(gnorm):
            return theta, grad, it
        hess = h_data + gamma * np.eye(d)
        step = np.linalg.solve(hess, grad)
        d0 = -float(grad @ step)
        if not d0 < 0.0:
            return theta, grad, it
        curv0 = float(step @ hess @ step)
        t, g_new, h_new = line_search(backend, theta, step, d0=d0, curv0=curv0, gamma=gamma, h=h,
                                      full_step_first=full)
        full = t == 1.0
        if t * float(np.linalg.norm(step)) <= 1e-15 * (1.0 + float(np.linalg.norm(theta))):
            return theta, grad, it
        theta = theta - t * step
        if g_new is None or h_new is None:
            g_new, h_new = backend.map_sum(functools.partial(grad_hess, theta=theta, h=h))
        g_data, h_data = g_new, h_new
    raise AssertionError("unreachable")  # pragma: no cover


def lbfgs_start(backend: Backend, acc: ERMAccuracy) -> FloatArray:
    """erm's L-BFGS-B fallback start (same options), one value pass per function evaluation."""
    gamma, h, d = acc.gamma, acc.h, acc.d

    def fun(x: FloatArray) -> tuple[float, FloatArray]:
        x = np.asarray(x, dtype=np.float64)
        value, grad = backend.map_sum(functools.partial(value_grad, theta=x, h=h))
        return float(value) + 0.5 * gamma * float(x @ x), grad + gamma * x

    from scipy import optimize  # lazy: only this rare fallback needs it

    res = optimize.minimize(
        fun, np.zeros(d), jac=True, method="L-BFGS-B",
        options={"maxiter": 200, "gtol": acc.stop_tol / np.sqrt(d), "ftol": 1e-15},
    )
    x = np.asarray(res.x, dtype=np.float64)
    return x if bool(np.all(np.isfinite(x))) else np.zeros(d)


def certify(backend: Backend, acc: ERMAccuracy, theta: FloatArray, grad: FloatArray
            ) -> tuple[bool, FloatArray]:
    """Whether the certificate accepts θ, with the gradient it was judged on: in memory Newton's
    own (one piece, blocked, exactly added), on an engine one more pass that adds the pieces'
    gradients exactly rounded (:func:`dpcausal.solvers.erm_accuracy.exact_gradient`)."""
    if not in_memory(backend) and bool(np.all(np.isfinite(theta))):
        grad = exact_gradient(backend, theta, acc)
    return acc.accepts(theta, grad), grad


def fast_path(backend: Backend, acc: ERMAccuracy, start: FloatArray, *, max_newton: int
              ) -> tuple[FloatArray, FloatArray, int]:
    """Newton from ``start``, then Newton from θ = 0, then L-BFGS-B followed by the Newton
    polish, until the certificate accepts; (θ, its computed gradient, iterations) of the last."""
    theta, grad, its = newton(backend, start, acc, max_newton=max_newton)
    ok, grad = certify(backend, acc, theta, grad)
    if not ok and np.any(start != 0.0):
        theta, grad, more = newton(backend, np.zeros(acc.d), acc, max_newton=max_newton)
        its += more
        ok, grad = certify(backend, acc, theta, grad)
    if not ok:
        x0 = lbfgs_start(backend, acc)
        theta, grad, more = newton(backend, x0, acc, max_newton=max_newton)
        its += more
        ok, grad = certify(backend, acc, theta, grad)
    return theta, grad, its


def solve_erm(backend: Backend, acc: ERMAccuracy, *, max_newton: int = 100) -> ERMSolution:
    """Minimise G(θ) = Σ w ℓ(y vᵀθ) + (γ/2)‖θ‖² over the backend's rows to within
    ``acc.distance`` of the exact minimiser, whatever the data: never raises on the data.

    The fast path (:func:`fast_path`: Newton from the warm start, from θ = 0, L-BFGS-B and the
    Newton polish) ends at a θ the certificate accepts, or else the guaranteed fallback
    (:func:`dpcausal.solvers.erm_accuracy.guaranteed_descent`) runs its public number of steps
    from there. Either way ‖θ − θ̂‖ ≤ ``acc.distance`` (the module docstring of
    :mod:`dpcausal.solvers.erm_accuracy`), so a sensitivity that adds 2·distance holds for the
    returned θ, and nothing that leaves the process depends on which way it ended except the
    running time. The backend's pieces are (v, y, w): rows with ‖v_i‖ ≤ 1, labels ±1, weights in
    [0, W(1 + 6u)] (:data:`dpcausal.solvers.erm_passes.Part`).
    """
    if acc.gamma <= 0:
        raise ValueError("gamma must be > 0")
    start = warm_start(backend, acc)
    theta, grad, its = fast_path(backend, acc, start, max_newton=max_newton)
    if acc.accepts(theta, grad):
        return ERMSolution(theta, acc.grad_norm(grad), its, certified=True)
    theta = guaranteed_descent(backend, theta, acc)
    return ERMSolution(theta, float("nan"), its + acc.fallback_steps, certified=False)


def solve_weighted_erm(v: FloatArray, y: FloatArray, w: FloatArray, acc: ERMAccuracy, *,
                       max_newton: int = 100) -> ERMSolution:
    """Minimise G over the rows (v, y, w) held in memory: :func:`solve_erm` on the one-piece
    backend (``acc.n`` must be the number of rows)."""
    if np.any(w < 0):
        raise ValueError("weights must be >= 0 for the objective to be convex")
    part = (np.asarray(v, dtype=np.float64), np.asarray(y, dtype=np.float64),
            np.asarray(w, dtype=np.float64))
    if part[1].size != acc.n or part[0].shape[1] != acc.d:
        raise ValueError("the accuracy certificate was built for another shape")
    return solve_erm(InMemory(part, part[1].size), acc, max_newton=max_newton)
