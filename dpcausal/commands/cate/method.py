"""cate as the pipeline runs it: the columns and side files it reads, its plan, its
in-memory run — for the τ(x) release (``estimand: cate``) or the ATE (``estimand: ate``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.cate.ate_estimate import ate_run
from dpcausal.commands.cate.ate_plan import ate_plan
from dpcausal.commands.cate.estimate import run as cate_run
from dpcausal.commands.cate.plan import plan as cate_plan
from dpcausal.commands.cate.setup import data_columns, side_inputs
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.mechanisms import NoiseGuard
from dpcausal.method import MethodDef, Release


def plan(spec: CateSpec, n_rows: int, side: dict[str, Any], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """The plan of the spec's estimand (public inputs only)."""
    if spec.cate.estimand == "ate":
        return ate_plan(spec, n_rows, side, rng=rng)
    return cate_plan(spec, n_rows, side, rng=rng)


def run(spec: CateSpec, frame: pd.DataFrame, plan: PrivacyPlan, side: dict[str, Any], *,
        rng: np.random.Generator, noise: NoiseGuard) -> Release:
    """The in-memory release of the spec's estimand."""
    if spec.cate.estimand == "ate":
        return ate_run(spec, frame, plan, side, rng=rng, noise=noise)
    return cate_run(spec, frame, plan, side, rng=rng, noise=noise)


METHOD = MethodDef(
    command="cate", spec_model=CateSpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan, run=run,
)
