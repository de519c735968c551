"""Probe (not a CLI feature): cate's ATE release with the scores clipped to a public [−c, c].

    python benchmarks/cate_ate_clip_probe.py 80 5 200 '{"nuisance_share": 0.8, "variance_share": 0.2}' '{"nuisance": {"propensity_share": 0.9}}'

Arguments: c, ε, repetitions, the cate.ate section (JSON), other cate fields (JSON). It replaces the
scores' domain range [L, H] (``centred_range``) by its intersection with [−c − centre, c − centre]
for this process only, so every score (and centred score) is clipped to it and the Laplace noise is
calibrated to the narrower range — the privacy argument is unchanged (the clipped score lies in the
clipped range) — but the interval **does not account for the clipping bias** E[u − clip(u)]: that
is why this is a probe of how much of the score-stage noise a public clip would remove, and not
shipped. Prints the same summary as ``cate_ate_sim.py`` (NHEFS shape).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cate_ate_sim as sim

import dpcausal.commands.cate.ate_estimate as ate_estimate
from dpcausal.commands.cate.ate_scores import NuisanceRanges, Weights, centred_range


def main() -> None:
    """Patch the scores' range for this process and run the NHEFS-shaped simulation."""
    c, eps, reps = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    ate: dict[str, Any] = json.loads(sys.argv[4])
    cate: dict[str, Any] = json.loads(sys.argv[5])

    def clipped(weights: Weights, y_bounds: tuple[float, float], ranges: NuisanceRanges,
                center: float = 0.0, residual_clip: float | None = None
                ) -> tuple[float, float]:
        lo, hi = centred_range(weights, y_bounds, ranges, center, residual_clip=residual_clip)
        return max(lo, -c - center), min(hi, c - center)

    ate_estimate.centred_range = clipped  # type: ignore[assignment]
    rec = sim.simulate("nhefs", eps, reps, ate, 20261126, cate)
    print(f"clip ±{c:g}, ε={eps:g} {json.dumps(ate)} {json.dumps(cate)}: " + ", ".join(
        f"{k} {v:.4g}" for k, v in sim.summary(rec).items()), flush=True)


if __name__ == "__main__":
    main()
