"""What a larger propensity clip ζ would do to cate's ATE on the NHEFS shape, computed, not simulated.

    python benchmarks/cate_ate_clip_predict.py [--clips 0.1 0.125] [--residual-clip 16 24 32]

Prints (1) the simulation's true propensities e(x) (``cate_ate_dgp.nhefs_logit``): quantiles, the
share of rows below ζ and above 1 − ζ, and e's range over the public covariate box; (2) for each ζ,
with the *true* e clipped to [ζ, 1 − ζ] and the arms' population means as outcome model (what
``outcome_model: auto`` picks at these sizes), the bias the clip leaves in the AIPW (E[u] − ATE,
10⁶ draws) and the scores' sd; (3) the non-private reference's mean half-width at each ζ
(``cate_ate_sim.reference_aipw``, the same 200 data sets as the simulation's seeds); (4) the
predicted total half-width at ε = 5 with the code's own functions
(``ate_scores.centred_range`` for the score range R and the variance unit E² at these nuisance
ranges, ``ate_interval.variance_inflation`` and ``ate_interval.total_halfwidth`` as
``ate_plan.predicted`` combines them) for nuisance shares × variance shares, and its ratio to the
reference at the same ζ. The propensity's range over the box is taken as [ζ, max(e over the box)]
clipped (a barely shrunk model reaches ζ; its upper end only matters when above 1 − ζ).
With ``--residual-clip r …`` parts (2) and (4) are repeated with Y − μ̂_a clipped to [−r, r]
(``cate.ate.residual_clip``): the oracle's bias and sd, R from ``centred_range`` with the clip, and
the predicted half-width (the reference never clips).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

import numpy as np
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cate_ate_dgp import DRAWS, NHEFS_BOUNDS, NHEFS_COVARIATES, NHEFS_OUTCOME, draw, nhefs_logit
from cate_ate_sim import reference_aipw

from dpcausal.commands.cate.ate_interval import total_halfwidth, variance_inflation
from dpcausal.commands.cate.ate_scores import NuisanceRanges, centred_range, residuals

CLIPS = (0.1, 0.11, 0.12, 0.125, 0.13, 0.14, 0.15, 0.2)
N_ROWS, ALPHA, EPS = 1500, 0.05, 5.0


def box_range() -> tuple[float, float]:
    """The true propensity's range over the public box (the logit is affine: its corners)."""
    corners = itertools.product(*(NHEFS_BOUNDS[k] for k in NHEFS_COVARIATES))
    cols = np.array(list(corners), dtype=float).T
    vals = expit(nhefs_logit(dict(zip(NHEFS_COVARIATES, cols, strict=True))))
    return float(vals.min()), float(vals.max())


def main() -> None:
    """Print the four parts of the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clips", type=float, nargs="+", default=list(CLIPS), help="the ζ to try")
    ap.add_argument("--residual-clip", type=float, nargs="+", default=[],
                    help="residual clips r to try besides none (outcome units)")
    args = ap.parse_args()
    clips = args.clips
    rs: list[float | None] = [None, *args.residual_clip]
    frame, y0, y1 = DRAWS["nhefs"](10**6, np.random.default_rng(99))
    e = expit(nhefs_logit({k: frame[k].to_numpy(float) for k in NHEFS_COVARIATES}))
    a = frame["A"].to_numpy(float)
    y = np.where(a == 1, y1, y0)
    tau = float(np.mean(y1 - y0))
    lo_box, hi_box = box_range()
    print(f"ATE {tau:.4f}; treated {a.mean():.3f}; e quantiles 1/5/50/95/99 %: "
          + " / ".join(f"{q:.3f}" for q in np.quantile(e, [0.01, 0.05, 0.5, 0.95, 0.99]))
          + f"; e over the box [{lo_box:.4f}, {hi_box:.4f}]")
    for z in clips:
        print(f"  e < {z}: {np.mean(e < z):.4f} of rows ({np.mean(e[a == 1] < z):.4f} of the "
              f"treated); e > {1 - z:g}: {np.mean(e > 1 - z):.5f}")
    m1, m0 = float(y[a == 1].mean()), float(y[a == 0].mean())
    print(f"arms' means {m1:.3f} / {m0:.3f} (unadjusted bias {m1 - m0 - tau:+.3f})")
    print("ζ | r | clip bias (true e, arms' means) | scores' sd | s = sd/√n | reference half-width")
    sampling, ref = {}, {}
    for z in clips:
        ec = np.clip(e, z, 1 - z)
        ref[z] = float(np.mean([reference_aipw(draw("nhefs", N_ROWS, np.random.default_rng(
            20261126 + r)), NHEFS_COVARIATES, z, ALPHA)[1] for r in range(200)]))
        for rc in rs:
            r1 = residuals(y, np.full_like(y, m1), rc)
            r0 = residuals(y, np.full_like(y, m0), rc)
            u = m1 - m0 + a * r1 / ec - (1 - a) * r0 / (1 - ec)
            sampling[z, rc] = float(u.std()) / math.sqrt(N_ROWS)
            print(f"{z:g} | {rc} | {u.mean() - tau:+.3f} ± {u.std() / 1e3:.3f} | {u.std():.2f} | "
                  f"{sampling[z, rc]:.3f} | {ref[z]:.4f}")
    print(f"\npredicted total half-width at ε = {EPS:g} (n = {N_ROWS}, α = {ALPHA})")
    print("ζ | r | nuisance_share | variance_share | R | b | kβ | half-width | ratio to the "
          "reference at ζ | ratio to the reference at the first ζ")
    for z, rc, nu, vs in itertools.product(clips, rs, (0.4, 0.5, 0.6), (0.2, 0.3, 0.5)):
        ranges = NuisanceRanges(e=(z, min(max(hi_box, z), 1 - z)), mu0=(m0, m0), mu1=(m1, m1))
        lo, hi = centred_range("clipped", NHEFS_OUTCOME, ranges, 0.0, residual_clip=rc)
        big_e = max(abs(v) for v in centred_range("clipped", NHEFS_OUTCOME, ranges, tau,
                                                  residual_clip=rc))
        eps_s = (1.0 - nu) * EPS
        b = (hi - lo) / (N_ROWS * (1.0 - vs) * eps_s)
        beta = big_e * big_e / (vs * eps_s * N_ROWS * N_ROWS)
        k = variance_inflation(b, beta, ALPHA)
        h = total_halfwidth(math.sqrt(sampling[z, rc] ** 2 + k * beta), b, ALPHA)
        print(f"{z:g} | {rc} | {nu:g} | {vs:g} | {hi - lo:.0f} | {b:.3f} | {k * beta:.3f} | "
              f"{h:.3f} | {h / ref[z]:.2f} | {h / ref[clips[0]]:.2f}")


if __name__ == "__main__":
    main()
