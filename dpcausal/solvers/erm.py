"""Weighted margin-loss ERM with the ½‖θ‖² regulariser, solved to a stated gradient tolerance —
one solver for every backend.

The objective, in sum form (same argmin as the paper's (1/n)Σ + (γ/n)R form),

    G(θ) = Σ_i w_i ℓ(y_i v_iᵀθ) + (γ/2)‖θ‖²,

is γ-strongly convex when every w_i ≥ 0 and ℓ is convex. Hence for any θ̃,
‖θ̃ − θ̂‖ ≤ ‖∇G(θ̃)‖/γ: a solve that stops at ‖∇G‖ ≤ τ is within τ/γ of the exact minimiser, and a
sensitivity derived for the exact minimiser holds for the returned point after adding 2τ/γ.

Every data pass is one ``backend.map_sum`` (or ``map_list``) of per-piece statistics
(:mod:`dpcausal.solvers.erm_passes`): in memory the backend is the prepared table as one piece
(:class:`dpcausal.solvers.backend.InMemory`), on an engine the batches or partitions of the table.
So each objective has one solver and one certificate whatever the backend:

* Newton's method (:func:`newton`) takes the Newton direction from a gradient pass (the gradient
  and the Hessian Σ_quad w v vᵀ/(2h) at θ, margins computed from scratch) and the step length from
  an exact line search over passes (:func:`dpcausal.solvers.erm_line.line_search`): φ'(t) of
  φ(t) = G(θ − t·step) is increasing and piecewise linear, so it is bracketed, never interpolated,
  to the rounding level of φ'. A full step costs one pass (its gradient and Hessian come with the
  line pass), a damped one two to four.
* For n ≥ ``WARM_START_MIN_ROWS`` Newton starts from the minimiser on a fixed 1-in-k subsample of
  the rows (every k-th global row, weights scaled by n/m; the subsample is solved in memory by this
  same solver). Should Newton not reach the tolerance: Newton from θ = 0, then L-BFGS-B from θ = 0
  (one value pass per evaluation) followed by the same Newton polish. :class:`SolverError` only
  when all of them fail — never an inexact solution returned silently.

The certificate is the stopping test ‖∇G(θ)‖ ≤ τ, always on a gradient computed from scratch over
every row at exactly the returned θ (a gradient pass at θ, or a line pass whose candidate is θ,
with the margins y vᵀθ recomputed), so the returned θ is within τ/γ of the exact minimiser. The
line search, the fallbacks and the start only shape the path. The number of passes depends on the
data and is never published.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize

from dpcausal.errors import SolverError
from dpcausal.solvers.backend import Backend, InMemory
from dpcausal.solvers.erm_line import line_search
from dpcausal.solvers.erm_passes import Part, grad_hess, hessian, huber_dloss, stride_rows

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
    iterations: int


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


WARM_START_MIN_ROWS = 400_000
"""From this many rows on, Newton starts from the solution on a fixed 1-in-k subsample."""
WARM_START_ROWS = 50_000


def warm_start(backend: Backend, *, d: int, gamma: float, loss: HuberHinge,
               grad_tol: float) -> FloatArray:
    """The start for large n: the minimiser on every k-th global row (weights × n/m), solved in
    memory; θ = 0 for n < ``WARM_START_MIN_ROWS`` or when that solve fails. Only the path of the
    solve depends on it (the returned θ is certified on all rows); the subsample is a fixed
    stride of the global row index (no randomness, nothing data-dependent)."""
    n = backend.n_rows
    if n < WARM_START_MIN_ROWS:
        return np.zeros(d)
    k = n // WARM_START_ROWS
    parts = backend.map_list(functools.partial(stride_rows, k=k))
    vs = np.concatenate([p[0] for p in parts])
    ys = np.concatenate([p[1] for p in parts])
    ws = np.concatenate([p[2] for p in parts])
    scale = n / ys.size
    try:
        theta = solve_weighted_erm(vs, ys, ws * scale, gamma=gamma, loss=loss,
                                   grad_tol=grad_tol * scale).theta
    except SolverError:
        return np.zeros(d)
    return theta if bool(np.all(np.isfinite(theta))) else np.zeros(d)


def newton(backend: Backend, theta: FloatArray, *, gamma: float, h: float, grad_tol: float,
           max_newton: int) -> tuple[FloatArray, float, int]:
    """Newton with the exact line search from ``theta``; (θ, ‖∇G(θ)‖, iterations).

    On an engine, one pass per iteration when the full step is taken (its gradient and Hessian
    come with the line pass), two when a later line pass's candidate is accepted, one more when
    another point is. In memory a pass is a function call, so the line passes compute only the
    candidates' gradients and the Hessian follows at the point accepted, if Newton continues
    (the same values: only the work is arranged differently)."""
    d = theta.size
    speculative = not isinstance(backend, InMemory)
    g_data, h_data = backend.map_sum(functools.partial(grad_hess, theta=theta, h=h))
    for it in range(max_newton + 1):
        grad = g_data + gamma * theta
        gnorm = float(np.linalg.norm(grad))
        if gnorm <= grad_tol or it == max_newton or not np.isfinite(gnorm):
            return theta, gnorm, it
        if h_data is None:
            h_data = backend.map_sum(functools.partial(hessian, theta=theta, h=h))
        hess = h_data + gamma * np.eye(d)
        step = np.linalg.solve(hess, grad)
        d0 = -float(grad @ step)
        if not d0 < 0.0:
            return theta, gnorm, it
        curv0 = float(step @ hess @ step)
        t, g_new, h_new = line_search(backend, theta, step, d0=d0, curv0=curv0, gamma=gamma, h=h,
                                      hessians=speculative)
        if t * float(np.linalg.norm(step)) <= 1e-15 * (1.0 + float(np.linalg.norm(theta))):
            return theta, gnorm, it
        theta = theta - t * step
        if g_new is None:
            g_new, h_new = backend.map_sum(functools.partial(grad_hess, theta=theta, h=h))
        g_data, h_data = g_new, h_new
    raise AssertionError("unreachable")  # pragma: no cover


def lbfgs_start(backend: Backend, *, d: int, gamma: float, h: float, grad_tol: float
                ) -> FloatArray:
    """erm's L-BFGS-B fallback start (same options), one value pass per function evaluation."""

    def fun(x: FloatArray) -> tuple[float, FloatArray]:
        x = np.asarray(x, dtype=np.float64)
        value, grad = backend.map_sum(functools.partial(value_grad, theta=x, h=h))
        return float(value) + 0.5 * gamma * float(x @ x), grad + gamma * x

    res = optimize.minimize(
        fun, np.zeros(d), jac=True, method="L-BFGS-B",
        options={"maxiter": 200, "gtol": grad_tol / np.sqrt(d), "ftol": 1e-15},
    )
    x = np.asarray(res.x, dtype=np.float64)
    return x if bool(np.all(np.isfinite(x))) else np.zeros(d)


def solve_erm(backend: Backend, *, d: int, gamma: float, loss: HuberHinge, grad_tol: float,
              max_newton: int = 100) -> ERMSolution:
    """Minimise G(θ) = Σ w ℓ(y vᵀθ) + (γ/2)‖θ‖² over the backend's rows to ‖∇G‖ ≤ ``grad_tol``.

    Newton from the warm start (θ = 0 for small n), then Newton from θ = 0, then L-BFGS-B
    followed by the Newton polish. The backend's pieces are (v, y, w): rows with ‖v_i‖ ≤ 1,
    labels ±1, weights ≥ 0 (:data:`dpcausal.solvers.erm_passes.Part`).

    Raises
    ------
    SolverError
        When the tolerance is not reached (never returns an inexact solution silently).
    """
    if gamma <= 0:
        raise ValueError("gamma must be > 0")
    h = loss.h
    start = warm_start(backend, d=d, gamma=gamma, loss=loss, grad_tol=grad_tol)
    theta, gnorm, its = newton(backend, start, gamma=gamma, h=h, grad_tol=grad_tol,
                               max_newton=max_newton)
    if not gnorm <= grad_tol and np.any(start != 0.0):  # NaN too, as erm
        theta, gnorm, more = newton(backend, np.zeros(d), gamma=gamma, h=h,
                                    grad_tol=grad_tol, max_newton=max_newton)
        its += more
    if not gnorm <= grad_tol:
        x0 = lbfgs_start(backend, d=d, gamma=gamma, h=h, grad_tol=grad_tol)
        theta, gnorm, more = newton(backend, x0, gamma=gamma, h=h, grad_tol=grad_tol,
                                    max_newton=max_newton)
        its += more
    if gnorm <= grad_tol:
        return ERMSolution(theta, gnorm, its)
    raise SolverError(
        f"the weighted ERM solve did not reach its stated gradient tolerance {grad_tol:.3g}, "
        "so its sensitivity bound would not hold; try a larger gamma, or report this as a bug"
    )


def solve_weighted_erm(
    v: FloatArray,
    y: FloatArray,
    w: FloatArray,
    *,
    gamma: float,
    loss: HuberHinge,
    grad_tol: float,
    max_newton: int = 100,
) -> ERMSolution:
    """Minimise G over the rows (v, y, w) held in memory to ‖∇G(θ)‖ ≤ ``grad_tol``: :func:`solve_erm`
    on the one-piece backend.

    Raises
    ------
    SolverError
        When the tolerance is not reached (never returns an inexact solution silently).
    """
    if np.any(w < 0):
        raise ValueError("weights must be >= 0 for the objective to be convex")
    part = (np.asarray(v, dtype=np.float64), np.asarray(y, dtype=np.float64),
            np.asarray(w, dtype=np.float64))
    return solve_erm(InMemory(part, part[1].size), d=part[0].shape[1], gamma=gamma, loss=loss,
                     grad_tol=grad_tol, max_newton=max_newton)
