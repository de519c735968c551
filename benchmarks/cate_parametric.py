"""DP-CATE with a parametric (neural-network) second stage: the paper's Corollary 1, as a benchmark.

    python benchmarks/cate_parametric.py [--seeds 5] [--seed-offset K] [--raw-out RAW.json]

`dpcausal cate` ships the kernel-ridge second stage only (README, "Where we deviate"). This script
runs the paper's finite-query release (Thm 1) with the NN second stage of its experiments (App. G.3:
two hidden layers of width 32, tanh) on its synthetic Datasets 1 and 2 (benchmarks/cate_dgp.py),
next to the kernel-ridge (KR) release of the CLI on the same rows, nuisances and queries:

* nuisances: dpcausal's own DP logistic propensity and DP ridge outcome models on D̃ (ε/2, δ/2 each),
  exactly as the CLI (``dpcausal.commands.cate.privacy.nuisance_learners``); R-learner pseudo-outcomes on D;
* second stage: θ̂ = argmin (1/n)Σ ρ_i(φ_i − g(s_i; θ))² + λ_w‖θ‖² over the NN weights (λ_w = 1e-3,
  s = box-scaled covariates, L-BFGS from a public seeded initialisation);
* Cor. 1: h(x_q; x_z) = 2·J_θ[g(x_q)]·H⁻¹·∇_θ g(x_z), H the Hessian of the objective at θ̂ (central
  differences of the analytic gradient), damped to H + αI with α = max(10⁻³·tr H/p, 2·|λ_min(H)|)
  when it is not positive definite (Remark 1, "damping");
* γ(T, D) = sup_z ‖h(·; x_z)‖·s(x_z) by the same search as the CLI (data rows, queries, 1024 Sobol
  points, corners; × 1.1), s(x) = max over a, y of |ρ(φ − g)| (``residual_bound``);
* release ĝ(x_q) + γ·c(ε, δ, n)·N(0, I_d) through the CLI's Gaussian vector mechanism.

The guarantee is Thm 1's asymptotic one, as for the CLI's queries mode; this is a simulation.
Metric: √PEHE on the 300 test queries; mean ± SE (median) over seeds. δ = 1e-5, n_total = 3000.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import optimize
from scipy.stats import qmc

from dpcausal.commands.cate.estimate import prepare
from dpcausal.commands.cate.plan import plan
from dpcausal.commands.cate.privacy import nuisance_learners, queries_constant, queries_mechanism

sys.path.insert(0, str(Path(__file__).parent))
from cate_common import NONPRIVATE_EPS, make_spec, release, sqrt_pehe
from cate_dgp import design

from dpcausal.commands.cate.krr import pseudo_outcomes, residual_bound
from dpcausal.commands.cate.setup import CateSetup, build_setup
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.learners.dp_logistic import PropensityModel
from dpcausal.learners.dp_ridge import OutcomeModel
from dpcausal.mechanisms import NoiseGuard

DELTA, WIDTH, WEIGHT_DECAY, SAFETY = 1e-5, 32, 1e-3, 1.1
EPS_GRID = (1.0, 10.0, 50.0, NONPRIVATE_EPS)
RAW: dict[str, list[float]] = {}


class TanhNet:
    """g(s; θ) = w₃ᵀ tanh(W₂ tanh(W₁ s + b₁) + b₂) + b₃, θ flattened."""

    def __init__(self, q: int) -> None:
        self.shapes = [(WIDTH, q), (WIDTH,), (WIDTH, WIDTH), (WIDTH,), (WIDTH,), ()]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.p = sum(self.sizes)

    def unpack(self, theta: np.ndarray) -> list[np.ndarray]:
        """The weight arrays of a flat θ."""
        out, k = [], 0
        for shape, size in zip(self.shapes, self.sizes, strict=True):
            out.append(theta[k:k + size].reshape(shape))
            k += size
        return out

    def init(self, seed: int) -> np.ndarray:
        """Public seeded initialisation: N(0, 1/fan-in) weights and biases, output bias 0."""
        rng = np.random.default_rng(seed)
        fan_in = [self.shapes[0][1], WIDTH, WIDTH, WIDTH, WIDTH]
        parts = [rng.normal(0.0, 1.0 / math.sqrt(f), size) for f, size in
                 zip(fan_in, self.sizes[:-1], strict=True)]
        return np.concatenate([*parts, np.zeros(1)])

    def forward(self, theta: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, tuple]:
        """g(s; θ) and the layer activations."""
        w1, b1, w2, b2, w3, b3 = self.unpack(theta)
        h1 = np.tanh(s @ w1.T + b1)
        h2 = np.tanh(h1 @ w2.T + b2)
        return h2 @ w3 + b3, (s, h1, h2)

    def param_grads(self, theta: np.ndarray, s: np.ndarray) -> np.ndarray:
        """∇_θ g(s_i; θ) for every row: (rows, p)."""
        _, w2, _, w3, _ = self.unpack(theta)[1:]
        _, (s, h1, h2) = self.forward(theta, s)
        d2 = (1 - h2**2) * w3                      # ∂g/∂(pre-activation 2)
        d1 = (1 - h1**2) * (d2 @ w2)               # ∂g/∂(pre-activation 1)
        rows = s.shape[0]
        return np.hstack([(d1[:, :, None] * s[:, None, :]).reshape(rows, -1), d1,
                          (d2[:, :, None] * h1[:, None, :]).reshape(rows, -1), d2, h2,
                          np.ones((rows, 1))])

    def loss_grad(self, theta: np.ndarray, s: np.ndarray, rho: np.ndarray, phi: np.ndarray
                  ) -> tuple[float, np.ndarray]:
        """(1/n)Σρ(φ − g)² + λ_w‖θ‖² and its gradient."""
        g, _ = self.forward(theta, s)
        r = phi - g
        n = len(r)
        jac = self.param_grads(theta, s)
        return (float(np.mean(rho * r * r) + WEIGHT_DECAY * theta @ theta),
                -2.0 / n * jac.T @ (rho * r) + 2 * WEIGHT_DECAY * theta)


def nn_release(spec: CateSpec, setup: CateSetup, prop: PropensityModel, outm: OutcomeModel,
               x2: np.ndarray, a2: np.ndarray, y2: np.ndarray, sq: np.ndarray, net_seed: int,
               noise: NoiseGuard) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(released τ̂, non-private ĝ at the queries, γ, damping α) of the NN second stage."""
    pi = prop.predict(x2)
    rho, phi = pseudo_outcomes("r", a2, y2, pi, outm.predict(x2, 0), outm.predict(x2, 1))
    s = setup.box.unit(x2)
    net = TanhNet(setup.q)
    res = optimize.minimize(net.loss_grad, net.init(net_seed), args=(s, rho, phi), jac=True,
                            method="L-BFGS-B", options={"maxiter": 3000, "gtol": 1e-9})
    theta = res.x
    eps_fd = 1e-5
    hess = np.empty((net.p, net.p))
    for j in range(net.p):
        e = np.zeros(net.p)
        e[j] = eps_fd
        hess[:, j] = (net.loss_grad(theta + e, s, rho, phi)[1]
                      - net.loss_grad(theta - e, s, rho, phi)[1]) / (2 * eps_fd)
    hess = 0.5 * (hess + hess.T)
    lam_min = float(np.linalg.eigvalsh(hess)[0])
    alpha = 0.0 if lam_min > 0 else max(1e-3 * np.trace(hess) / net.p, 2 * abs(lam_min))
    hess += alpha * np.eye(net.p)
    a_mat = np.linalg.solve(hess, net.param_grads(theta, sq).T).T          # J H⁻¹: (d, p)
    sobol = qmc.Sobol(setup.q, scramble=True, seed=np.random.default_rng(0)).random(1024)
    cands = [s, sq, sobol]
    if setup.q <= 10:
        cands.append(np.array(np.meshgrid(*[[0.0, 1.0]] * setup.q, indexing="ij")
                              ).reshape(setup.q, -1).T)
    cand = np.vstack(cands)
    norms = np.linalg.norm(2.0 * a_mat @ net.param_grads(theta, cand).T, axis=0)
    xr = setup.box.lo + cand * (setup.box.hi - setup.box.lo)
    s_val = residual_bound("r", prop.predict(xr), outm.predict(xr, 0), outm.predict(xr, 1),
                           net.forward(theta, cand)[0], setup.y_bounds)
    gamma = SAFETY * float(np.max(norms * s_val))
    g_q = net.forward(theta, sq)[0]
    # as the CLI: the planned mechanism is per unit of γ; release g/γ and scale back (g + γ·c·N(0, I))
    tau = gamma * noise.release(queries_mechanism(spec, setup, len(sq), None), g_q / gamma)
    return tau, g_q, gamma, alpha


def one(dataset: int, seed: int, eps: float) -> dict[str, float]:
    """√PEHE of the NN and KR releases on one seeded draw (same rows, nuisances and queries)."""
    rng = np.random.default_rng(1000 * dataset + seed)
    des = design(dataset, rng)
    train, test = des.sample(2700, rng), des.sample(300, rng)
    names = [f"x{i}" for i in range(des.p)]
    spec = make_spec(names, des.y_bounds, eps, DELTA, mode="queries", search_points=1024)
    queries = test[names].reset_index(drop=True)
    tau_true = des.theta(queries.to_numpy())
    kr = release(spec, train, queries, noise_seed=10_000 + seed)  # the CLI's KR queries release
    setup = build_setup(spec, len(train))
    data = prepare(spec, setup, train)
    side = {"queries": queries}
    noise = NoiseGuard(plan(spec, len(train), side, rng=np.random.default_rng(0)),
                       test_seed=10_000 + seed)  # the KR release's nuisance draws, replayed
    prop_l, out_l = nuisance_learners(spec, setup)
    prop = prop_l.fit(data.x1, data.a1, clip=setup.kappa, noise=noise)
    outm = out_l.fit(data.x1, data.a1, data.y1, noise=noise)
    sq = setup.box.unit(queries.to_numpy())
    tau, g_q, gamma, alpha = nn_release(spec, setup, prop, outm, data.x2, data.a2, data.y2, sq,
                                        net_seed=seed, noise=noise)
    return {"nn": sqrt_pehe(tau, tau_true), "nn_nonprivate_fit": sqrt_pehe(g_q, tau_true),
            "kr": sqrt_pehe(kr, tau_true), "nn_gamma": gamma, "nn_damping": alpha,
            "nn_noise_sd": gamma * queries_constant(spec, setup)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--datasets", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--eps", type=float, nargs="+", default=list(EPS_GRID))
    ap.add_argument("--out", type=Path, default=None, help="also write the table here")
    ap.add_argument("--raw-out", type=Path, default=None)
    args = ap.parse_args()
    seeds = range(args.seed_offset, args.seed_offset + args.seeds)
    t0 = time.time()
    lines = [f"√PEHE, finite-query release (Thm 1), R-learner, n_total = 3000, δ = {DELTA:g}, "
             f"seeds {seeds.start}–{seeds.stop - 1}: mean ± SE (median)\n",
             "| data | ε | NN second stage (Cor. 1) | KR second stage (CLI, Cor. 2) | "
             "NN fit before noise | NN γ(T,D), median | NN noise sd per query, median |",
             "|---|---|---|---|---|---|---|"]
    for ds in args.datasets:
        for eps in args.eps:
            runs = [one(ds, s, eps) for s in seeds]
            cells = []
            for key in ("nn", "kr", "nn_nonprivate_fit"):
                v = [r[key] for r in runs]
                RAW[f"DS{ds}/eps={eps:g}/{key}"] = v
                cells.append(f"{np.mean(v):.3f} ± {np.std(v, ddof=1) / math.sqrt(len(v)):.3f} "
                             f"({np.median(v):.3f})")
            label = "non-private" if eps >= NONPRIVATE_EPS else f"{eps:g}"
            lines.append(f"| DS{ds} | {label} | " + " | ".join(cells)
                         + f" | {np.median([r['nn_gamma'] for r in runs]):.3g}"
                         + f" | {np.median([r['nn_noise_sd'] for r in runs]):.3g} |")
            print(lines[-1], f"({time.time() - t0:.0f} s)", flush=True)
    lines.append(f"\nWall time {time.time() - t0:.0f} s.")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    if args.raw_out is not None:
        args.raw_out.write_text(json.dumps(RAW) + "\n")


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        main()
