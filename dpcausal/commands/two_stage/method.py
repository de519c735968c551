"""two-stage as the pipeline runs it: the columns and side files it reads, its plan, its
in-memory run."""

from __future__ import annotations

from dpcausal.commands.two_stage.plan import plan
from dpcausal.commands.two_stage.setup import data_columns, side_inputs
from dpcausal.commands.two_stage.spec import TwoStageSpec
from dpcausal.method import MethodDef, lazy

METHOD = MethodDef(
    command="two-stage", spec_model=TwoStageSpec, data_columns=data_columns,
    side_inputs=side_inputs, plan=plan,
    run=lazy("dpcausal.commands.two_stage.estimate:run"),
)
