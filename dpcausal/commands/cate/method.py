"""cate as the pipeline runs it: the columns and side files it reads, its plan, its
in-memory run — for the τ(x) release (``estimand: cate``) or the ATE (``estimand: ate``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpcausal.accounting.plan import PrivacyPlan
from dpcausal.commands.cate.plan import plan as cate_plan
from dpcausal.commands.cate.queries import side_inputs
from dpcausal.commands.cate.setup import data_columns
from dpcausal.commands.cate.spec import CateSpec
from dpcausal.method import MethodDef, lazy

_cate_run = lazy("dpcausal.commands.cate.estimate:run")
_arms_run = lazy("dpcausal.commands.cate.multi_arm:run")
_ate_run = lazy("dpcausal.commands.cate.ate_estimate:ate_run")


def plan(spec: CateSpec, n_rows: int, side: dict[str, Any], *,
         rng: np.random.Generator) -> PrivacyPlan:
    """The plan of the spec's estimand (public inputs only)."""
    if spec.cate.estimand == "ate":
        from dpcausal.commands.cate.ate_plan import ate_plan
        return ate_plan(spec, n_rows, side, rng=rng)
    return cate_plan(spec, n_rows, side, rng=rng)


def run(spec: CateSpec, *args: Any, **kwargs: Any) -> Any:
    """The in-memory release of the spec's estimand (two arms, K ≥ 3 arms or the ATE; its
    estimation code imported on first use)."""
    if spec.cate.estimand == "ate":
        return _ate_run(spec, *args, **kwargs)
    if spec.cate.multi_arm:
        return _arms_run(spec, *args, **kwargs)
    return _cate_run(spec, *args, **kwargs)


METHOD = MethodDef(
    command="cate", spec_model=CateSpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan,
    run=run,
)
