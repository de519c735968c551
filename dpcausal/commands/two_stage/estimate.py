"""two-stage in memory: stage 1 on the prepared rows, the sufficient statistics, stage 2."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.two_stage import center
from dpcausal.commands.two_stage.setup import build_setup, prepare, with_radius
from dpcausal.commands.two_stage.solver import sufficient_stats
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.commands.two_stage.stage1 import compute_weights
from dpcausal.commands.two_stage.stage2 import objective_noise, release_rule
from dpcausal.errors import DataError
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import Release


def run(spec: TwoStageSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, pd.DataFrame],
        *, rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """The private centre (if planned), stage 1, draw b, stage 2, build the rule (and
    recommendations for ``apply_to``)."""
    setup = with_radius(build_setup(spec), plan.details)
    data = prepare(spec, setup, frame, spec.data.path)
    n = len(data.t)
    if n != plan.details["n_rows"]:
        raise DataError(f"{spec.data.path}: the file changed while running (row count)")
    b = None
    if setup.private_center:  # b (data-free) first, in the plan's order, then the centre
        b = objective_noise(spec, setup, n, noise=noise)
        setup = center.release(spec, setup, center.outcome_sum(data.y), n, noise=noise)
        data = data.centred(setup)
    w = compute_weights(spec, setup, data)
    h, g = sufficient_stats(data.x, data.t, w)
    del w, data
    return release_rule(spec, setup, plan, h, g, n, side, noise=noise, b=b)
