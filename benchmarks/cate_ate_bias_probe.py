"""Where the ATE release's bias comes from (issue #19 probe): ``cate_ate_sim.py`` with one of the
release's ingredients changed — for this probe only, never in a release.

    python benchmarks/cate_ate_bias_probe.py --jacobian-share 0.2 -- --kind nhefs --eps 5 1 --reps 1000 --ate '{...}' --cate '{...}'
    python benchmarks/cate_ate_bias_probe.py --silence propensity -- --kind nhefs --eps 5 --reps 300 ...

``--jacobian-share s``: the objective-perturbation propensity learner spends the share s of its ε on
the Jacobian term instead of ``dp_objective.JACOBIAN_SHARE`` (0.1): a smaller penalty Δ (less
shrinkage), more noise. ``--silence propensity``: the propensity model's objective noise b and output
noise z are set to zero (its shrinkage by Δ stays), and the outcome models' noise too; ``--silence
outcome``: only the outcome models' noise is zero. The privacy claims of a silenced run are void;
the score-stage releases keep their noise, so the interval's modelled part is unchanged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cate_ate_sim

import dpcausal.learners.dp_objective as dp_objective
from dpcausal.mechanisms import NoiseGuard


def silencing_guard(what: str) -> type[NoiseGuard]:
    """A NoiseGuard drawing exactly as the CLI's (same seeds, same order) that returns the
    pre-noise value for the silenced nuisance stages."""

    class Silenced(NoiseGuard):
        def objective_noise(self, perturbation: Any) -> Any:
            b = super().objective_noise(perturbation)
            return 0.0 * b if what == "propensity" else b

        def release(self, mechanism: Any, value: Any, **kwargs: Any) -> Any:
            out = super().release(mechanism, value, **kwargs)
            stage = mechanism.event().stage
            if what == "propensity" and stage.endswith("propensity.output"):
                return np.asarray(value, dtype=np.float64)
            if ".nuisance" in stage and ".outcome" in stage:
                return np.asarray(value, dtype=np.float64)
            return out

    return Silenced


def main() -> None:
    """Patch the one ingredient, then run cate_ate_sim's main with the arguments after ``--``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jacobian-share", type=float, default=None)
    ap.add_argument("--silence", choices=["propensity", "outcome"], default=None)
    args, rest = ap.parse_known_args()
    if args.jacobian_share is not None:
        dp_objective.JACOBIAN_SHARE = args.jacobian_share
    if args.silence is not None:
        cate_ate_sim.NoiseGuard = silencing_guard(args.silence)  # type: ignore[misc]
    sys.argv = [sys.argv[0], *[a for a in rest if a != "--"]]
    cate_ate_sim.main()


if __name__ == "__main__":
    main()
