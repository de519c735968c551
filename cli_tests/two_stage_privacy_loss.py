"""Exact privacy-loss evaluation of DP-2ERM's stage 2 for small p (spec §10 T2), for tests and audits.

For θ in the interior of the ℓ₁ ball the released θ has density
pdf_D(θ) = ν(b_D(θ))·det J_D(θ), with b_D(θ) = −[Σ w_i∇ℓ(θ; d_i) + nγθ], J_D = Σ 2w_i x_i x_iᵀ + nγI
and ℓ(θ; d) = (t − xᵀθ)². The privacy loss at θ is log pdf_D(θ) − log pdf_D′(θ). Nothing here
touches sensitive data or draws noise: it evaluates formulas on adversarially chosen datasets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Dataset:
    """Records (x_i, t_i) with weights w_i (rows may stand for several identical records)."""

    x: FloatArray
    t: FloatArray
    w: FloatArray


def gradient_map(ds: Dataset, theta: FloatArray, n: int, gamma: float) -> FloatArray:
    """b_D(θ) = −[Σ w_i ∇ℓ(θ; d_i) + nγθ] with ∇ℓ = −2(t − xᵀθ)x."""
    resid = ds.t - ds.x @ theta
    grad = -2.0 * (ds.x * (ds.w * resid)[:, None]).sum(axis=0)
    return -(grad + n * gamma * theta)


def log_det_jacobian(ds: Dataset, n: int, gamma: float) -> float:
    """log det(Σ 2 w_i x_i x_iᵀ + nγI)."""
    p = ds.x.shape[1]
    jac = 2.0 * (ds.x * ds.w[:, None]).T @ ds.x + n * gamma * np.eye(p)
    return float(np.linalg.slogdet(jac)[1])


def privacy_loss_gamma(d: Dataset, dp: Dataset, theta: FloatArray, *, n: int, gamma: float,
                       beta: float) -> float:
    """log pdf_D(θ) − log pdf_D′(θ) for Gamma-norm noise ν(b) ∝ exp(−β‖b‖)."""
    bd = gradient_map(d, theta, n, gamma)
    bdp = gradient_map(dp, theta, n, gamma)
    noise = -beta * float(np.linalg.norm(bd)) + beta * float(np.linalg.norm(bdp))
    return noise + log_det_jacobian(d, n, gamma) - log_det_jacobian(dp, n, gamma)


def _sig(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))


def _point(params: FloatArray, m_x: float) -> FloatArray:
    r = m_x * _sig(params[0])
    return np.array([r * math.cos(params[1]), r * math.sin(params[1])])


def uniform_weight_search(n: int, *, beta: float, gamma: float, l1_radius: float = 0.01,
                          m_x: float = 1.0, m_y: float = 1.0, groups: tuple[int, ...] | None = None,
                          starts: int = 40, seed: int = 0,
                          x0: FloatArray | None = None) -> tuple[float, FloatArray]:
    """Maximise the interior privacy loss over data, replaced record and θ (w ≡ 1, p = 2).

    The n − 1 unchanged records are modelled as groups of identical records of the given sizes
    (default: every record separately when n ≤ 5, else groups (n−3, 1, 1)). Multi-start
    Nelder–Mead (plus one start at ``x0`` if given); returns the largest loss found (a lower bound
    on the true sup) and its parameter vector.
    """
    if groups is None:
        groups = tuple([1] * (n - 1)) if n <= 5 else (n - 3, 1, 1)
    if sum(groups) != n - 1:
        raise ValueError("groups must add up to n - 1")
    g = len(groups)
    counts = np.array(groups, dtype=np.float64)
    rng = np.random.default_rng(seed)

    def unpack(v: FloatArray) -> tuple[Dataset, Dataset, FloatArray]:
        pts = [_point(v[3 * i: 3 * i + 2], m_x) for i in range(g + 2)]
        ts = [2.0 * m_y * math.tanh(v[3 * i + 2]) for i in range(g + 2)]
        zt = v[3 * (g + 2): 3 * (g + 2) + 2]
        s = _sig(v[-1]) * 0.999 * l1_radius
        theta = s * zt / max(float(np.abs(zt).sum()), 1e-12)
        xs = np.array(pts[:g])
        others_t = np.array(ts[:g])
        d = Dataset(np.vstack([xs, pts[g]]), np.append(others_t, ts[g]), np.append(counts, 1.0))
        dp = Dataset(np.vstack([xs, pts[g + 1]]), np.append(others_t, ts[g + 1]),
                     np.append(counts, 1.0))
        return d, dp, theta

    def neg(v: FloatArray) -> float:
        d, dp, theta = unpack(v)
        return -privacy_loss_gamma(d, dp, theta, n=n, gamma=gamma, beta=beta)

    best, arg = -math.inf, np.zeros(0)
    dim = 3 * (g + 2) + 3
    inits = [np.asarray(x0, dtype=np.float64)] if x0 is not None else []
    inits += [rng.normal(0.0, 2.0, size=dim) for _ in range(starts)]
    for v0 in inits:
        res = optimize.minimize(neg, v0, method="Nelder-Mead",
                                options={"maxiter": 4000 * dim, "xatol": 1e-9, "fatol": 1e-12})
        if -float(res.fun) > best:
            best, arg = -float(res.fun), np.asarray(res.x)
    return best, arg


def calibrated_uniform(n: int, epsilon: float, mode: str, *, l1_radius: float = 0.01,
                       m_x: float = 1.0, m_y: float = 1.0) -> tuple[float, float]:
    """(β, γ) of ``safe`` or ``paper`` for w ≡ 1 (W₁ˢ = W₂aug = 2; paper W₁ = 1, W₂ = √2)."""
    from dpcausal.commands.two_stage.calibration import calibrate, uniform_bounds

    cal = calibrate(n=n, dim=2, m_x=m_x, m_y=m_y, l1_radius=l1_radius, epsilon=epsilon, delta=0.0,
                    eps_split=0.5, noise="gamma", bounds=uniform_bounds(n), mode=mode)  # type: ignore[arg-type]
    return 1.0 / cal.scale, cal.gamma_required


def structured_witness(n: int, a: float, *, m_y: float = 1.0,
                       m: int | None = None) -> tuple[Dataset, Dataset, FloatArray]:
    """An explicit adversarial pair for w ≡ 1, p = 2, evaluated at θ = 0 (interior).

    Replaced record: x_n = e₁, t_n = +2M_y → x′_n = (a, √(1−a²)), t′_n = −2M_y, so the gradient
    shift is s = 4M_y(e₁ + x′_n). About half of the others sit at x = e₂ with t = 0 (zero gradient
    at θ = 0): they inflate J along e₂ and hide x′_n's Jacobian term. The rest sit at x = r·e₁ with
    t = −2M_y and r chosen so that b_D′(0) = −s, which makes the noise term reach β‖s‖ exactly.
    ``m`` (default (n−1)//2) is the number of records of the second kind.
    """
    m = (n - 1) // 2 if m is None else m
    if not 1 <= m <= n - 1:
        raise ValueError("m must be in [1, n - 1]")
    k = n - 1 - m
    xp = np.array([a, math.sqrt(max(0.0, 1.0 - a * a))])
    r = 1.0 / m
    others_x = np.vstack([np.tile([0.0, 1.0], (k, 1)), np.tile([r, 0.0], (m, 1))])
    others_t = np.concatenate([np.zeros(k), np.full(m, -2.0 * m_y)])
    ones = np.ones(n)
    d = Dataset(np.vstack([others_x, [1.0, 0.0]]), np.append(others_t, 2.0 * m_y), ones)
    dp = Dataset(np.vstack([others_x, xp]), np.append(others_t, -2.0 * m_y), ones)
    return d, dp, np.zeros(2)


def structured_witness_loss(n: int, *, beta: float, gamma: float, m_y: float = 1.0) -> float:
    """max over a ∈ [−1, 1] of the privacy loss of :func:`structured_witness` (bounded scalar search)."""

    best = -math.inf
    for m in sorted({max(1, min(n - 1, v)) for v in (1, 2, 4, int(math.sqrt(n)), (n - 1) // 2)}):

        def neg(a: float, m: int = m) -> float:
            d, dp, theta = structured_witness(n, a, m_y=m_y, m=m)
            return -privacy_loss_gamma(d, dp, theta, n=n, gamma=gamma, beta=beta)

        res = optimize.minimize_scalar(neg, bounds=(-1.0, 1.0), method="bounded",
                                       options={"xatol": 1e-10})
        best = max(best, -float(res.fun))
    return best


def privacy_loss_gaussian_mc(d: Dataset, dp: Dataset, *, n: int, gamma: float, sigma: float,
                             l1_radius: float, draws: int,
                             rng: np.random.Generator) -> FloatArray:
    """Privacy losses log pdf_D(θ) − log pdf_D′(θ) at θ ~ the release under D (Gaussian b).

    Where the unconstrained solution θ of (2H + nγI)θ = 2g − b (H = Σ w x xᵀ, g = Σ w t x) lies in
    the interior ‖θ‖₁ < λ₁ it is the release and b_D(θ) = b; boundary outputs (where this interior
    formula does not apply) are returned as NaN. Public-formula audit only.
    """
    p = d.x.shape[1]
    h = (d.x * d.w[:, None]).T @ d.x
    g = (d.x * (d.w * d.t)[:, None]).sum(axis=0)
    a = 2.0 * h + n * gamma * np.eye(p)
    bs = rng.normal(0.0, sigma, size=(draws, p))
    thetas = np.linalg.solve(a, (2.0 * g[None, :] - bs).T).T
    ld = log_det_jacobian(d, n, gamma) - log_det_jacobian(dp, n, gamma)
    out = np.full(draws, np.nan)
    for k in range(draws):
        if float(np.abs(thetas[k]).sum()) >= l1_radius:
            continue
        bd = gradient_map(d, thetas[k], n, gamma)
        bdp = gradient_map(dp, thetas[k], n, gamma)
        out[k] = (float(bdp @ bdp) - float(bd @ bd)) / (2.0 * sigma**2) + ld
    return out
